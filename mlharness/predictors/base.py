"""The small interface every predictor implements (MLServer-shaped: load, predict, close, warmup)."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class PredictorConfig:
    """What a predictor needs to build its session, resolved from the manifest and the command line."""

    model_path: str | None
    input_names: list[str]
    output_names: list[str]
    device: str = "cpu"
    threads: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    max_batchsize: int = 1
    factory: str | None = None  # pytorch: "module:function" building the nn.Module
    weights_path: str | None = None  # pytorch: state dict for the factory's module
    input_specs: list[dict[str, Any]] = field(default_factory=list)  # the manifest's inputs (dtype, shape, ...)
    # framework-level tracing: predictors whose profiler must be switched on when the session is created
    # (onnxruntime) read this in load(); the others start their profiler in profile_start()
    profile: bool = False
    output_specs: list[dict[str, Any]] = field(default_factory=list)  # the manifest's outputs
    model_name: str | None = None  # the manifest's name (remote: the model an agent serves)
    manifest_path: str | None = None  # the manifest file, named when its declarations disagree with the model
    generation: Any = None  # generative predictors: the manifest's GenerationConfig (None: the defaults)


class Predictor(abc.ABC):
    """A framework session. ``predict`` takes one array per model input (batch first) and returns one array per
    model output (batch first), in the manifest's declared order."""

    name = "predictor"
    remote_spans = False  # True: profile_start/stop at every trace level (see profile_start)

    def __init__(self, config: PredictorConfig):
        self.config = config

    @abc.abstractmethod
    def load(self) -> None: ...

    @abc.abstractmethod
    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]: ...

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def warmup(self, inputs: list[np.ndarray], n: int = 1) -> None:
        for _ in range(n):
            self.predict(inputs)

    def profile_start(self, tracer: Any) -> None:  # noqa: B027 - optional
        """Called before the LoadGen test when the trace level is at least ``framework`` (at every level for a
        predictor whose ``remote_spans`` is true: the spans of the agents it sends to are the model's own)."""

    def profile_stop(self, tracer: Any) -> None:  # noqa: B027 - optional
        """Called after the LoadGen test: appends the framework profiler's events, converted onto the tracer's
        clock (see mlharness.telemetry.framework_profile), to ``tracer.extra_events``."""

    def framework_version(self) -> str:
        return "n/a"

    def remote_agents(self) -> list[dict[str, Any]] | None:
        """The agents that computed for this predictor, each with what it said about itself (its address, host
        facts, framework and versions: mlharness.agent.facts); None where the model runs in this process."""
        return None

    def computes_off_host(self) -> bool:
        """True when predict leaves this machine's CPU cores free (a GPU, a remote agent): only then does work
        overlapped with it (gathering the next batch) come for free; on the CPU it competes with the model."""
        return not self.config.device.startswith("cpu")

    def describe(self) -> dict[str, Any]:
        """Facts recorded in the run metadata (providers, threads, ...)."""
        return {"predictor": self.name, "framework_version": self.framework_version()}
