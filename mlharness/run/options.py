"""What a run is asked to do (:class:`RunOptions`) and what it produced (:class:`Measured`, :class:`RunResult`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import Summary
from mlharness.tasks.base import AccuracyResult
from mlharness.telemetry.sampler import DEFAULT_INTERVAL_MS

DEFAULT_MANIFEST = "demo"
METADATA_FILE = "mlharness_run.json"
TRACE_FILE = "mlharness_trace.json"


@dataclass
class RunOptions:
    scenario: str
    mode: str = "accuracy"
    manifest: str | Path = DEFAULT_MANIFEST
    framework: str | None = None  # one of the manifest's framework variants (also NAME@FRAMEWORK)
    dataset: str | Path | None = None
    dataset_path: str | Path | None = None
    output: Path | None = None
    results_root: Path = Path("results")
    system: str = "default"
    user_conf: Path | None = None
    audit_config: Path | None = None
    count: int | None = None
    overrides: lgs.Overrides = field(default_factory=lgs.Overrides)
    max_batchsize: int | None = None
    server_max_wait_ms: float | None = None
    threads: int | None = None  # framework intra-op threads
    instances: int = 1  # predictor sessions, each driven by its own worker thread
    threads_per_instance: int | None = None  # default with several instances: the cores split evenly
    workers: int = 1  # SUT worker threads
    pin_cores: bool = False  # pin each instance (its framework threads and its runner) to its share of the cores
    load_workers: int | None = None  # None: the dataset manifest's load_workers, else 1; 0: one per core
    device: str = "cpu"
    trace: str = "none"  # none, model, framework, system, full (see mlharness.telemetry.trace)
    telemetry_interval_ms: float = DEFAULT_INTERVAL_MS  # host/GPU sampling during the run; 0 disables it
    ignore_framework_version: bool = False
    # Called (from a watchdog thread) when the timed path failed and LoadGen is still running after
    # ``abort_grace_s``; the CLI uses it to end the process instead of waiting out a long min_duration.
    on_stuck_failure: Callable[[BaseException, Path], None] | None = None
    abort_grace_s: float = 5.0
    progress: Any = None  # an object with load(done, total) / attach(sut, total, settings) / close(), or None
    calibrate: bool = True  # measure the expected performance when no user.conf or flag states it
    second_try: bool = True  # a calibrated Server rate LoadGen found too high: play once more, lower (second_try.py)
    say: Callable[[str], None] | None = None  # one-line notices (the calibrated expected performance)
    # Remote agents (host:port): the model runs there (framework 'remote') with this manifest's inputs/outputs
    agents: list[str] = field(default_factory=list)
    network: str | None = None  # "lon": LoadGen over the network; the agents run the hooks (--hooks agent)
    round: str | None = None  # MLPerf round whose seeds the run uses (None: mlharness.rounds.DEFAULT_ROUND)
    agent_options: dict[str, Any] = field(default_factory=dict)  # token, tls_ca, tls_cert, tls_key for the agents
    endpoints: list[str] = field(default_factory=list)  # OpenAI-compatible servers generating (framework 'openai')
    loadgen_trace: bool = False  # LoadGen's mlperf_log_trace.json (per-sample times) at any trace level


@dataclass
class RunResult:
    output: Path
    summary: Summary  # LoadGen's, its ``valid`` the verdict under the round's rules (metadata["result"])
    accuracy: AccuracyResult | None
    metadata: dict[str, Any]


@dataclass
class Measured:
    """What the LoadGen test left: its summary and detail-log values, and how the SUT ran it."""

    summary: Summary
    detail: dict[str, Any]
    strategy: Any  # mlharness.loadgen.batch.Strategy
    sut: Any  # SystemUnderTest or NetworkQDL: their counters
    calibration: dict[str, Any] | None
    telemetry: Any
