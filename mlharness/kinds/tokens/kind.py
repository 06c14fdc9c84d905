"""The token-stream kind's row: the token SUT (first token reported as soon as it exists), the calibration that
times generations, the Server bound of a token model, TTFT/TPOT measured by LoadGen, and the Interactive scenario."""

from __future__ import annotations

from typing import Any

from mlharness.kinds.base import Kind, Parts
from mlharness.kinds.tensor.kind import bound
from mlharness.kinds.tokens import calibrate
from mlharness.kinds.tokens.sut import TokenSUT, check_generative


def make_sut(p: Parts) -> Any:
    loaded = p.run.loaded
    predictors = p.predictors

    def prepare(prompt: Any) -> None:
        for predictor in predictors:
            predictor.prepare(prompt)

    p.loader.prepare = prepare  # before calibration and LoadGen load any sample
    return TokenSUT(check_generative(p.predictors, loaded), p.store, p.conf.plan.scenario, on_failure=p.on_failure,
                    warmup=loaded.model.framework.warmup, response_dtype=p.dtype,
                    text=loaded.model.response.text)


def calibration(p: Parts) -> dict[str, Any]:
    run = p.run
    return calibrate.for_run(run.asked, p.conf.plan, p.conf.settings, p.predictors, p.store, p.loader,
                             p.conf.performance_count, run.loaded.model.framework.warmup, p.outdir)


KIND = Kind("tokens", make_sut=make_sut, server_bound=lambda p: bound(p, tokens=True), calibrate=calibration,
            tokens=True, interactive=True, sut_warmup=False)
