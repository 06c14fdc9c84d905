"""The tensor kind's row: LoadGen's base SUT over the pre -> predict -> post pipelines (or the agents' network
SUT), the calibration that times them, and the Server bound derived from a sample's time."""

from __future__ import annotations

from typing import Any

from mlharness.calibration import calibrate, server_bound
from mlharness.kinds.base import Kind, Parts
from mlharness.loadgen.sut import NetworkQDL, SystemUnderTest


def make_sut(p: Parts) -> Any:
    if p.run.network == "lon":
        return NetworkQDL(p.predictors[0], on_failure=p.on_failure)  # the agents run the hooks and the model
    return SystemUnderTest(p.pipelines, p.strategy, p.run.workers, on_failure=p.on_failure, tracer=p.tracer,
                           affinity=p.run.affinity)


def bound(p: Parts, tokens: bool = False) -> Any:
    """The Server bound of a kind whose samples LoadGen's base SUT (or the token SUT) completes one by one."""
    run = p.run
    return server_bound.for_run(run.asked, p.conf.plan, p.conf.settings, [] if tokens else p.pipelines, p.loader,
                                p.conf.performance_count, run.official, tokens, run.loaded.model.framework.warmup)


def calibration(p: Parts) -> dict[str, Any]:
    run = p.run
    return calibrate.for_run(run.asked, p.conf.plan, p.conf.settings, p.pipelines, p.loader,
                             p.conf.performance_count, run.batch, run.loaded.model.framework.warmup, p.outdir,
                             affinity=run.affinity)


KIND = Kind("tensor", make_sut=make_sut, server_bound=bound, calibrate=calibration, check_outputs=True)
