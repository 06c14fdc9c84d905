"""What a run tells calibration, and nothing more: whether it may calibrate at all, the user.conf the user named
(a default one states nothing), whether LoadGen drives agents over the network, and where one-line notices go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Asked:
    calibrate: bool = True  # False: --no-calibrate
    user_conf: Path | None = None  # the user.conf given with --user-conf (None: the default one, which states nothing)
    network: str | None = None  # "lon": LoadGen over the network, the agents run the model
    second_try: bool = True  # False: --no-second-try (a calibrated Server rate found too high is not played again)
    say: Callable[[str], None] | None = None  # one-line notices (the calibrated expected performance)

    def tell(self, line: str) -> None:
        if self.say is not None:
            self.say(line)
