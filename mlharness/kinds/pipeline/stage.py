"""What a pipeline stage is: the contract between the pipeline SUT (``mlharness/loadgen/batch.py``), the stages
(built-in ones such as retrieval and reranking, and the adapter that makes any predictor a stage) and the tasks
whose manifests declare them.

A sample travels through the stages as an :data:`Item`, a plain dict. The manifest's ``preprocess`` hook makes the
first item from the dataset (for e2e-rag-qna: ``{"query": ..., "expected_urls": [...]}``); each stage reads the keys
it needs and returns the item with the keys it adds (retrieval: ``passages``; reranking: a reordered ``passages``;
generation: ``answer`` and ``answer_token_ids``). Two keys have a meaning for the SUT:

- ``route``: set by a stage (or its ``after`` hook) to the name of an earlier stage, the item goes back there (an
  iterative retrieval loop); unset, it goes on to the next stage. The stage spec's ``max_visits`` bounds the loop;
  one visit more fails the sample naming the stage.
- at the end, ``response`` (a numpy array in the manifest's ``response.element_type``: what LoadGen is handed),
  optional ``n_tokens`` (LoadGen's token count of the sample, for TEST09) and ``result`` (a JSON-able dict written
  to the run's ``pipeline_results.jsonl`` with the sample's index and per-stage timings: what a pipeline's accuracy
  task reads, since LoadGen's accuracy log carries only the response bytes). The manifest's ``postprocess`` hook
  makes these from the last item when the last stage does not.

Stages are synchronous and called from the stage's own worker threads (``workers`` of them), so stages of
different samples overlap; a stage whose library releases the GIL (FAISS, torch, an HTTP client) runs truly in
parallel. A stage that raises fails its sample (the SUT records the stage, the sample and the error, completes the
sample empty and goes on; the run exits 3 at the end). A stage past its ``timeout_s`` fails its sample the same way;
its worker thread is abandoned, not waited for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlharness.errors import RunFailed

Item = dict[str, Any]


class StageError(RunFailed):
    """A stage failed one sample: names the stage and the sample (the SUT fills ``sample`` in); exit 3."""

    def __init__(self, stage: str, message: str, sample: int | None = None):
        self.stage, self.sample, self.detail = stage, sample, message
        where = f"stage {stage!r}" + (f", sample {sample}" if sample is not None else "")
        super().__init__(f"{where}: {message}")


@dataclass
class StageSpec:
    """One entry of the manifest's ``inputs[0].parameters.stages`` (input ``type: pipeline``)."""

    name: str  # unique within the pipeline; named in errors, records and the report
    framework: str  # a built-in stage ("retrieval", "rerank", ...) or any predictor name ("transformers", "openai")
    options: dict[str, Any] = field(default_factory=dict)  # the stage's or predictor's options
    model: dict[str, Any] | None = None  # a ModelAsset-shaped dict (graph_path, url, sha256, generator...)
    workers: int = 1  # threads running this stage concurrently (each sample holds one while in the stage)
    timeout_s: float = 600.0  # deadline of one call; past it the sample fails naming the stage
    max_visits: int = 1  # how many times one sample may enter this stage (a retrieval loop's bound)
    before: Any = None  # hook source: before(ctx, item) -> item, run before the stage on its worker
    after: Any = None  # hook source: after(ctx, item) -> item, run after it (may set item["route"])
    threads: int | None = None  # torch intra-op threads of each worker (its own); None: the process's default


@dataclass
class StageContext:
    """What a stage factory is given: the pipeline manifest's folder and cache, the run's device and threads,
    and the manifest's ``attributes``."""

    manifest_dir: Any  # Path of the manifest (relative asset paths)
    cache_dir: Any  # Path where downloaded or generated assets live
    device: str = "cpu"
    threads: int | None = None
    attributes: dict[str, Any] = field(default_factory=dict)


class Stage(Protocol):
    name: str

    def load(self) -> None:
        """Build or open what the stage needs (an index, a model, a connection pool); timed and recorded by the
        SUT as the stage's load time, before LoadGen starts."""
        ...

    def run(self, item: Item) -> Item:
        """Process one sample's item; return it (or a new dict) with the stage's keys added. Raise
        :class:`StageError` (or any exception: the SUT wraps it) to fail the sample."""
        ...

    def close(self) -> None: ...

    # Optional, not a member of the protocol (a stage without it is still a Stage):
    #
    #     def begin_test(self) -> None:
    #         """Called once after warm-up and calibration, right before LoadGen's test starts (on every lane's stage
    #         that has it, by ``PipelineSUT.run_test``); a stage that keeps state across samples — e2e-rag-db's
    #         database build — resets it here, so the warm-up's and calibration's plays leave nothing in the test."""
    #
    # :func:`begin_test` calls it where a stage defines it.

    def describe(self) -> dict[str, Any]:
        """Facts for the run metadata and report (library versions, index size, model name)."""
        ...


def begin_test(stage: Any) -> None:
    """The stage's optional ``begin_test()`` (see :class:`Stage`), where it has one: called once after warm-up and
    calibration, right before LoadGen's test starts; a stage that keeps state across samples resets it there."""
    begin = getattr(stage, "begin_test", None)
    if callable(begin):
        begin()


StageFactory = Callable[[StageSpec, StageContext], Stage]
STAGES: dict[str, StageFactory] = {}  # built-in stages by framework name; any other name is a predictor adapter


def register_stage(name: str) -> Callable[[StageFactory], StageFactory]:
    """Decorator: ``@register_stage("retrieval")`` on a factory ``(spec, ctx) -> Stage``."""

    def add(factory: StageFactory) -> StageFactory:
        STAGES[name] = factory
        return factory

    return add
