"""Run directories: staged in a sibling folder and moved into place only when the run succeeded, so a failed
run never overwrites an earlier good result. Also reads back what LoadGen wrote (summary, detail log)."""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError

METRIC_LINES = {
    "SingleStream": ("90.0th percentile latency (ns)", "ns"),
    "MultiStream": ("99.0th percentile latency (ns)", "ns"),
    "Server": ("Completed samples per second", "samples/s"),
    "Offline": ("Samples per second", "samples/s"),
}


def default_output(results_root: Path, system: str, benchmark: str, scenario: str, mode: str) -> Path:
    base = results_root / system / benchmark / scenario
    return base / "accuracy" if mode == "accuracy" else base / "performance" / "run_1"


class StagedDir:
    """A folder beside the final one; ``commit()`` swaps it in, ``abandon()`` keeps it as ``*.failed-<time>``."""

    def __init__(self, final: Path):
        self.final = final.resolve()
        self.final.parent.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = self.final.parent / f".{self.final.name}.partial-{stamp}-{os.getpid()}"
        self.path.mkdir()
        self._lock = threading.Lock()
        self._failed: Path | None = None

    def commit(self) -> Path:
        old = None
        if self.final.exists():
            old = self.final.parent / f".{self.final.name}.old-{os.getpid()}"
            os.replace(self.final, old)
        os.replace(self.path, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.final

    def abandon(self) -> Path:
        """Idempotent and thread-safe (the runner's watchdog and the main thread may both abandon); never
        collides with an earlier failed run of the same second."""
        with self._lock:
            if self._failed is not None:
                return self._failed
            base = f"{self.final.name}.failed-{time.strftime('%Y%m%d-%H%M%S')}"
            for n in itertools.count():
                failed = self.final.parent / (base if n == 0 else f"{base}-{n}")
                if failed.exists():
                    continue
                try:
                    os.rename(self.path, failed)
                except OSError as e:  # another process took the name between the check and the rename
                    if e.errno in (errno.EEXIST, errno.ENOTEMPTY) and failed.exists():
                        continue
                    raise
                self._failed = failed
                return failed
        raise AssertionError("unreachable")


@dataclass
class Summary:
    scenario: str
    valid: bool
    metric_name: str
    metric_value: float | None
    metric_unit: str
    fields: dict[str, str] = field(default_factory=dict)


def parse_summary(path: Path, scenario: str) -> Summary:
    if not path.is_file():
        raise MLHarnessError(f"LoadGen wrote no summary at {path}")
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            fields.setdefault(k.strip(), v.strip())
    name, unit = METRIC_LINES[scenario]
    raw = fields.get(name)
    value = float(raw) if raw not in (None, "") else None
    return Summary(scenario, fields.get("Result is") == "VALID", name, value, unit, fields)


_MLLOG = re.compile(r"^:::MLLOG (\{.*\})\s*$")


def read_detail(path: Path) -> list[dict[str, Any]]:
    """The ``:::MLLOG`` events of an mlperf_log_detail.txt."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        m = _MLLOG.match(line)
        if m:
            try:
                events.append(json.loads(m.group(1)))
            except json.JSONDecodeError:
                continue
    return events


def detail_values(path: Path) -> dict[str, Any]:
    """key → value of the detail log's events (the last event wins; errors collected under 'errors')."""
    values: dict[str, Any] = {}
    errors = []
    for ev in read_detail(path):
        key = ev.get("key")
        if key is None:
            continue
        if key.startswith("error") or ev.get("metadata", {}).get("is_error"):
            errors.append({"key": key, "value": ev.get("value")})
        values[key] = ev.get("value")
    values["errors"] = errors
    return values
