"""The data kinds of a manifest, one row each: what a model answers with (``response.kind``) and what that asks
of the run — the SUT that completes LoadGen's samples, the calibration that sizes the run, the LoadGen lines that
measure it, the scenarios it may run, and whether its declared outputs are checked by running a sample.

The runner asks the row; it never branches on the kind's name. A new kind (video frames, a chat turn, a session of
turns) is a new row here with the functions it needs, plus its value in ``manifest/schema.py``'s
``Response.kind`` (``tests/test_run_kinds.py`` holds the two lists equal)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.calibration import (
    calibrate,
    calibrate_pipeline,
    calibrate_sessions,
    calibrate_tokens,
    server_bound,
)
from mlharness.errors import ManifestError
from mlharness.kinds.pipeline.sut import PipelineSUT, attach_hooks
from mlharness.kinds.sessions.input import session_settings
from mlharness.kinds.sessions.sut import SessionSUT, make_players, session_engines
from mlharness.kinds.tokens.sut import TokenSUT, check_generative
from mlharness.loadgen.sut import NetworkQDL, SystemUnderTest


@dataclass
class Parts:
    """What the LoadGen test has built before its SUT: a kind's functions take what they need from here."""

    run: Any  # the RunPlan (plan.py imports this module)
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


@dataclass(frozen=True)
class DataKind:
    name: str
    tokens: bool  # LoadGen measures TTFT/TPOT and counts tokens (use_token_latencies, token throughput lines)
    interactive: bool  # the Interactive scenario is open to it
    make_sut: Callable[[Parts], Any]
    server_bound: Callable[[Parts], Any]
    calibrate: Callable[[Parts], dict[str, Any]]
    check_outputs: bool  # run one sample through the pipeline to check the declared outputs before LoadGen
    sut_warmup: bool  # the SUT warms the model up before LoadGen starts (token SUTs warm up at calibration)
    # instead of the MultiStream scenario (None: open to it): a scenario LoadGen times as one query of several
    # samples issued together fits no kind whose sample is a whole conversation
    not_multistream: str | None = None
    # what the accuracy metric is told of the responses beyond the manifest's accuracy.options (video: fps, shape)
    accuracy_options: Callable[..., dict[str, Any]] = lambda model, path=None: {}
    # how --endpoint reaches the model: the loaded manifest and the servers -> the manifest to run (None: the whole
    # model becomes an openai predictor, predictors/openai/client.py's endpoint_manifest)
    with_endpoints: Callable[[Any, list[str]], Any] | None = None


def _tensor_sut(p: Parts) -> Any:
    if p.run.network == "lon":
        return NetworkQDL(p.predictors[0], on_failure=p.on_failure)  # the agents run the hooks and the model
    return SystemUnderTest(p.pipelines, p.strategy, p.run.workers, on_failure=p.on_failure, tracer=p.tracer,
                           affinity=p.run.affinity)


def _token_sut(p: Parts) -> Any:
    loaded = p.run.loaded
    predictors = p.predictors

    def prepare(prompt: Any) -> None:
        for predictor in predictors:
            predictor.prepare(prompt)

    p.loader.prepare = prepare  # before calibration and LoadGen load any sample
    return TokenSUT(check_generative(p.predictors, loaded), p.store, p.conf.plan.scenario, on_failure=p.on_failure,
                    warmup=loaded.model.framework.warmup, response_dtype=p.dtype,
                    text=loaded.model.response.text)


def _bound(p: Parts, tokens: bool) -> Any:
    run = p.run
    return server_bound.for_run(run.asked, p.conf.plan, p.conf.settings, [] if tokens else p.pipelines, p.loader,
                                p.conf.performance_count, run.official, tokens, run.loaded.model.framework.warmup)


def _tensor_calibration(p: Parts) -> dict[str, Any]:
    run = p.run
    return calibrate.for_run(run.asked, p.conf.plan, p.conf.settings, p.pipelines, p.loader,
                             p.conf.performance_count, run.batch, run.loaded.model.framework.warmup, p.outdir,
                             affinity=run.affinity)


def _token_calibration(p: Parts) -> dict[str, Any]:
    run = p.run
    return calibrate_tokens.for_run(run.asked, p.conf.plan, p.conf.settings, p.predictors, p.store, p.loader,
                                    p.conf.performance_count, run.loaded.model.framework.warmup, p.outdir)


def video_options(model: Any, path: Any = None) -> dict[str, Any]:
    """What a video model's metric is told: the frame rate and one video's [frames, height, width, 3], as the
    manifest declares them (``response.fps``, ``outputs[0].shape``); each checked here, before the model loads
    and before anything is scored."""
    shape, response = model.outputs[0].shape, model.response
    if shape is None or len(shape) != 4 or shape[-1] != 3 or not all(isinstance(d, int) and d > 0 for d in shape):
        raise ManifestError(path, "outputs[0].shape", f"a video response is one sample's frames, [frames, height, "
                            f"width, 3] with every size fixed; got {shape}")
    if response.fps is None or response.element_type not in ("uint8", "float32"):
        raise ManifestError(path, "response", f"a video response declares its 'fps' and element_type uint8 (pixels) "
                            f"or float32 (values in [0, 1]); got fps {response.fps}, {response.element_type}")
    return {"fps": float(response.fps), "video_shape": list(shape), "video_dtype": response.element_type}


def _video_sut(p: Parts) -> Any:
    video_options(p.run.loaded.model, p.run.loaded.path)  # refused before a sample is played
    return _tensor_sut(p)


def _session_sut(p: Parts) -> Any:
    """One sample, one session: the predictors' chat engines play them (kinds/sessions/sut.py; docs/sessions.md)."""
    loaded = p.run.loaded
    spec = loaded.model.inputs[0]
    settings = session_settings(spec.parameters, loaded.path)
    players, close = make_players(session_engines(p.predictors, loaded), settings.replay,
                                  loaded.model.generation.max_new_tokens)
    p.sut = SessionSUT(players, p.store, p.conf.plan.scenario, settings, outdir=p.outdir, on_failure=p.on_failure,
                       warmup=loaded.model.framework.warmup, close=close)
    return p.sut


def _played_calibration(for_run: Callable[..., dict[str, Any]]) -> Callable[[Parts], dict[str, Any]]:
    """The calibration step of a kind whose SUT plays samples itself (calibration/played.py's skeleton)."""
    def step(p: Parts) -> dict[str, Any]:
        run = p.run
        return for_run(run.asked, p.conf.plan, p.conf.settings, p.sut, p.loader, p.conf.performance_count,
                       run.loaded.model.framework.warmup, p.outdir, run.official)

    return step


def _pipeline_sut(p: Parts) -> Any:
    """One sample, one item through the manifest's stages (kinds/pipeline/sut.py; docs/pipelines.md)."""
    run = p.run
    lanes = getattr(p.predictors[0], "lanes", None)
    if lanes is None:
        raise ManifestError(run.loaded.path, "framework.name", f"response.kind is 'pipeline', but framework "
                            f"'{run.loaded.model.framework.name}' builds no stages; use framework 'pipeline'")
    attach_hooks(lanes, run.hooks)
    p.sut = PipelineSUT(lanes, p.store, run.hooks, run.ctx, p.dtype, outdir=p.outdir, on_failure=p.on_failure)
    return p.sut


def _pipeline_endpoints(loaded: Any, endpoints: list[str]) -> Any:
    """--endpoint on a pipeline: its generating stages go to the servers (pipeline/settings.py)."""
    from mlharness.pipeline.settings import endpoint_stages

    return endpoint_stages(loaded, endpoints)


def _played_bound(p: Parts) -> Any:
    """The Server latency bound of a kind whose sample is played whole (a session, a pipeline sample), resolved as
    for any model before its calibration derives one from a played sample where none is set."""
    return server_bound.for_run(p.run.asked, p.conf.plan, p.conf.settings, [], None, 0, p.run.official, tokens=False)


KINDS: dict[str, DataKind] = {
    "tensor": DataKind("tensor", tokens=False, interactive=False, make_sut=_tensor_sut,
                       server_bound=lambda p: _bound(p, False), calibrate=_tensor_calibration, check_outputs=True,
                       sut_warmup=True),
    "tokens": DataKind("tokens", tokens=True, interactive=True, make_sut=_token_sut,
                       server_bound=lambda p: _bound(p, True), calibrate=_token_calibration, check_outputs=False,
                       sut_warmup=False),
    # one video per sample, encoded like a tensor (frames x height x width x 3); its metric reads the log one video
    # at a time (tasks/wan22/videolog.py), so a run's memory does not grow with its videos
    "video": DataKind("video", tokens=False, interactive=False, make_sut=_video_sut,
                      server_bound=lambda p: _bound(p, False), calibrate=_tensor_calibration, check_outputs=True,
                      sut_warmup=True, accuracy_options=video_options),
    "session": DataKind("session", tokens=False, interactive=False, make_sut=_session_sut,
                        server_bound=_played_bound,
                        calibrate=_played_calibration(calibrate_sessions.for_run), check_outputs=False,
                        sut_warmup=True,
                        not_multistream="one sample is a whole session of turns, played in order with its think "
                        "times; run SingleStream (one session at a time), Server (sessions at a rate: "
                        "--target-qps, or mlharness replay --session-rate) or Offline (every session at once, or at "
                        "most N in flight: mlharness replay --concurrency N)"),
    # one sample, one item through a list of stages (retrieval, reranking, any predictor), each with its workers
    "pipeline": DataKind("pipeline", tokens=False, interactive=False, make_sut=_pipeline_sut,
                         server_bound=_played_bound,
                         calibrate=_played_calibration(calibrate_pipeline.for_run), check_outputs=False,
                         sut_warmup=True, with_endpoints=_pipeline_endpoints),
}


def data_kind(model: Any) -> DataKind:
    """The row of a manifest's model (its ``response.kind``; the schema admits only the table's names)."""
    return KINDS[model.response.kind]
