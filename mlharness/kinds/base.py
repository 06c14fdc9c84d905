"""What a data kind is to the rest of mlharness: one :class:`Kind` row, the interface the runner, the plan, the
calibration and the report call, never a kind's name.

A kind plays one or both roles:

- its **input** (a manifest whose ``inputs[0].type`` is the kind's name): ``make_input`` makes the
  :class:`~mlharness.loadgen.qsl.InputKind` the QSL and the batch path ask, and ``check_input`` checks the input's
  parameters before anything loads;
- its **response** (a manifest whose ``response.kind`` is the kind's name): ``make_sut`` builds the SUT that
  completes LoadGen's samples, ``server_bound`` resolves the Server latency bound, ``calibrate`` sizes the run, and
  the flags say what LoadGen measures and which scenarios are open to it.

``report`` and ``rows`` name (``"module:function"``, imported only when used) what adds the kind's section to the
HTML report and its rows to what ``mlharness run`` prints. A kind is registered by its row in :mod:`mlharness.kinds.registry`, by
:func:`~mlharness.kinds.registry.register`, or by an entry point of the ``mlharness.kinds`` group naming the row
(``docs/kinds.md``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.calibration import server_bound
from mlharness.loadgen.qsl import InputKind

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")  # a kind's name: a manifest value, a folder name


@dataclass
class Parts:
    """What the LoadGen test has built before its SUT: a kind's functions take what they need from here."""

    run: Any  # the RunPlan
    conf: Any  # its LoadgenSettings
    predictors: list[Any]
    pipelines: list[Any]  # one pre -> predict -> post pipeline per instance (tensor kinds)
    store: Any
    loader: Any
    strategy: Any
    dtype: Any  # the numpy type of the responses LoadGen is handed
    tracer: Any
    on_failure: Callable[[BaseException], None]
    outdir: Path
    sut: Any = None  # the SUT make_sut built (a session model's calibration plays a session through it)


def no_options(model: Any, path: Any = None) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Kind:
    """One data kind. Fields left at None are roles the kind does not play."""

    name: str
    # -- the input role: inputs[0].type == name
    make_input: Callable[[dict[str, Any], str], InputKind] | None = None  # (the run's ctx, the manifest's path)
    check_input: Callable[[dict[str, Any], Any, str], Any] | None = None  # (parameters, manifest path, field)
    # -- the response role: response.kind == name
    make_sut: Callable[[Parts], Any] | None = None
    server_bound: Callable[[Parts], Any] | None = None
    calibrate: Callable[[Parts], dict[str, Any]] | None = None
    tokens: bool = False  # LoadGen measures TTFT/TPOT and counts tokens (use_token_latencies, token throughput lines)
    interactive: bool = False  # the Interactive scenario is open to it
    check_outputs: bool = False  # run one sample through the pipeline to check the declared outputs before LoadGen
    sut_warmup: bool = True  # the SUT warms the model up before LoadGen starts (token SUTs warm up at calibration)
    # instead of the MultiStream scenario (None: open to it): a scenario LoadGen times as one query of several
    # samples issued together fits no kind whose sample is a whole conversation
    not_multistream: str | None = None
    # what the accuracy metric is told of the responses beyond the manifest's accuracy.options (video: fps, shape)
    accuracy_options: Callable[..., dict[str, Any]] = no_options
    # how --endpoint reaches the model: the loaded manifest and the servers -> the manifest to run (None: the whole
    # model becomes an openai predictor, predictors/openai/client.py's endpoint_manifest)
    with_endpoints: Callable[[Any, list[str]], Any] | None = None
    # -- what a run of it shows, each "module:function" imported only when used: its section of the HTML report
    # (the report's runs, figure and table makers -> HTML parts), and the rows `mlharness run` prints under its
    # table (the run folder -> (label, text) pairs; none where the folder holds no run of the kind)
    report: str | None = None
    rows: str | None = None

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"a kind's name is lower-case letters, digits, '-' and '_' (at most 32), got "
                             f"{self.name!r}")
        response = (self.make_sut, self.server_bound, self.calibrate)
        if any(f is not None for f in response) and not all(f is not None for f in response):
            raise ValueError(f"kind '{self.name}': a response kind gives make_sut, server_bound and calibrate")
        if self.make_sut is None and self.make_input is None:
            raise ValueError(f"kind '{self.name}' plays no role: give make_input, or make_sut with server_bound "
                             f"and calibrate")
        for field in ("report", "rows"):
            target = getattr(self, field)
            if target is not None and not re.match(r"^[\w.]+:\w+$", target):
                raise ValueError(f"kind '{self.name}': {field} is 'module:function', got {target!r}")

    @property
    def responds(self) -> bool:
        """Whether a manifest's ``response.kind`` may name this kind."""
        return self.make_sut is not None


def played_bound(p: Parts) -> Any:
    """The Server latency bound of a kind whose sample is played whole (a session, a pipeline sample), resolved as
    for any model before its calibration derives one from a played sample where none is set."""
    return server_bound.for_run(p.run.asked, p.conf.plan, p.conf.settings, [], None, 0, p.run.official, tokens=False)


def played_calibration(for_run: Callable[..., dict[str, Any]]) -> Callable[[Parts], dict[str, Any]]:
    """The calibration step of a kind whose SUT plays samples itself (calibration/played.py's skeleton, which
    ``for_run`` fills in)."""
    def step(p: Parts) -> dict[str, Any]:
        run = p.run
        return for_run(run.asked, p.conf.plan, p.conf.settings, p.sut, p.loader, p.conf.performance_count,
                       run.loaded.model.framework.warmup, p.outdir, run.official)

    return step


__all__ = ["Kind", "Parts", "no_options", "played_bound", "played_calibration"]
