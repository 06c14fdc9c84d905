"""What watches a run besides LoadGen: the framework profilers (trace level ``framework`` and up) and the
telemetry sampler (every run unless its interval is 0). One object so the runner starts and stops them in one
place, around the LoadGen test."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlharness.telemetry.sampler import TELEMETRY_FILE, TelemetrySampler
from mlharness.telemetry.trace import level_at_least

log = logging.getLogger(__name__)


def wants_profile(trace_level: str | None) -> bool:
    """Whether predictors must be built with their framework profiler on (PredictorConfig.profile)."""
    return trace_level not in (None, "", "none") and level_at_least(str(trace_level), "framework")


class RunObservers:
    def __init__(self, predictors: list[Any], tracer: Any, telemetry_interval_ms: float):
        self.predictors = predictors
        self.tracer = tracer
        self.profiling = tracer is not None and level_at_least(tracer.level, "framework")
        counters = tracer is not None and level_at_least(tracer.level, "system")
        self.sampler = TelemetrySampler(telemetry_interval_ms, tracer=tracer if counters else None)
        self.telemetry: dict[str, Any] = {"enabled": False}
        self._started: list[Any] = []

    def start(self) -> None:
        for p in self.predictors:
            # remote predictors bring their agents' spans at every level: without them a remote model is one
            # opaque span per request
            if self.profiling or (self.tracer is not None and getattr(p, "remote_spans", False)):
                p.profile_start(self.tracer)
                self._started.append(p)
        self.sampler.start()

    def stop(self) -> dict[str, Any]:
        """Idempotent; never raises (a profile or a sample is diagnostics, not the run's result)."""
        try:
            self.telemetry = self.sampler.stop()
        except Exception as e:  # noqa: BLE001
            log.warning("telemetry could not be summarised: %s", e)
        while self._started:
            p = self._started.pop(0)
            try:
                p.profile_stop(self.tracer)
            except Exception as e:  # noqa: BLE001
                log.warning("the %s profile could not be collected: %s", getattr(p, "name", "framework"), e)
        return self.telemetry

    def write(self, outdir: Path) -> None:
        """The telemetry series beside the run's metadata (for the report's plots)."""
        try:
            self.sampler.write_series(outdir / TELEMETRY_FILE)
        except OSError as e:
            log.warning("cannot write %s: %s", outdir / TELEMETRY_FILE, e)
