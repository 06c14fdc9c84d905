"""The data kinds, one package each, holding what is particular to that kind: how its input is read and checked,
how its SUT completes LoadGen's samples, and how its records are reported.

- ``tokens/``: generated token streams (the token SUT, TTFT/TPOT and token throughput in the run's report);
- ``chat/``: chat prompts with images, the input of a token stream;
- ``sessions/``: multi-turn sessions, one per sample (the session SUT, the session input, its records);
- ``pipeline/``: a system of stages, one item per sample (the pipeline SUT, its input, per-stage records);
- ``jagged/``: id lists of varying length batched as values and offsets, maybe played in time order;
- ``graph/``: a seed node per sample, its neighbourhood sampled on the timed path.

The LoadGen adapter (``mlharness/loadgen/``) names none of them. An input kind is a row of :data:`INPUT_KINDS`
below: the run's context holds the :class:`~mlharness.loadgen.qsl.InputKind` it makes (``run/context.py``), which
the QSL and the batch path ask; a response kind is a row of ``run/kinds.py`` naming its SUT."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlharness.kinds.chat import input as chat
from mlharness.kinds.graph import input as graph
from mlharness.kinds.jagged import input as jagged
from mlharness.kinds.pipeline import input as pipeline
from mlharness.kinds.sessions import input as sessions
from mlharness.loadgen.qsl import InputKind


@dataclass(frozen=True)
class InputSpec:
    """An input kind: how a run makes its InputKind, and what it checks of the input's parameters up front."""

    make: Callable[[dict[str, Any], str], InputKind]  # (the run's ctx, the manifest's path)
    check: Callable[[dict[str, Any], Any, str], Any] | None = None  # (parameters, manifest path, field)


# inputs[0].type -> its kind; any other type is a tensor
INPUT_KINDS: dict[str, InputSpec] = {
    chat.CHAT_INPUT: InputSpec(chat.make_input),
    sessions.SESSION_INPUT: InputSpec(sessions.make_input),
    pipeline.PIPELINE_INPUT: InputSpec(pipeline.make_input, pipeline.stage_specs),
    jagged.JAGGED_INPUT: InputSpec(jagged.make_input),
    graph.GRAPH_INPUT: InputSpec(graph.make_input),
}


def make_input(ctx: dict[str, Any], manifest: str) -> InputKind | None:
    """The InputKind of a run whose context is ``ctx`` (its ``inputs``, ``mode``, ``graph``); None for tensors."""
    specs = ctx.get("inputs") or []
    kind = INPUT_KINDS.get(specs[0].get("type")) if specs else None
    return kind.make(ctx, manifest) if kind is not None else None


def check_inputs(loaded: Any) -> None:
    """Each input's parameters as its kind checks them before a run starts (a pipeline's stage list: its workers,
    timeouts and visits); ManifestError names the file and the field."""
    for k, spec in enumerate(loaded.model.inputs):
        kind = INPUT_KINDS.get(spec.type)
        if kind is not None and kind.check is not None:
            kind.check(spec.parameters, loaded.path, f"inputs[{k}].parameters")
