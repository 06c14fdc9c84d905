"""The ``rag-oracle`` stage: the answer table of e2e-rag-qna's oracle. It retrieves exactly each question's
expected pages and answers with its ground truth, so a pipeline made of it scores the task's maximum (recall and
answer accuracy 1.000 with a judge that knows a correct answer); the answer is ``tokens_per_answer`` token ids long
(default 274: the reference's mean of 273.81 that TEST09's bounds surround), so the oracle passes TEST09 and a
pipeline whose answers are cut fails it.

Options: ``dataset`` (frames_dataset.tsv or its folder, relative to the manifest; without it the item's own
``ground_truth`` is the answer), ``tokens_per_answer``, ``answer`` (a fixed answer for every question, to make a
wrong-answering pipeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlharness.kinds.pipeline.stage import StageContext, StageError, StageSpec, register_stage
from mlharness.tasks.e2e_rag.hooks import finish

REFERENCE_MEAN_TOKENS = 274


class RagOracleStage:
    def __init__(self, spec: StageSpec, ctx: StageContext):
        self.name, self.options, self.ctx = spec.name, dict(spec.options), ctx
        self.table: dict[str, str] | None = None
        self.tokens = int(self.options.get("tokens_per_answer", REFERENCE_MEAN_TOKENS))
        if self.tokens < 1:
            raise StageError(spec.name, f"tokens_per_answer must be at least 1, got {self.tokens}")

    def load(self) -> None:
        dataset = self.options.get("dataset")
        if dataset is not None:
            from mlharness.tasks.e2e_rag.dataset import read_frames

            path = Path(dataset)
            path = path if path.is_absolute() else Path(self.ctx.manifest_dir) / path
            self.table = {q.query: q.ground_truth for q in read_frames(path)}

    def run(self, item: dict[str, Any]) -> dict[str, Any]:
        query = item["query"]
        if "answer" in self.options:
            answer = str(self.options["answer"])
        elif self.table is not None:
            if query not in self.table:
                raise StageError(self.name, f"the oracle's table has no question {query[:60]!r}")
            answer = self.table[query]
        else:
            answer = item["ground_truth"]
        item["retrieved_urls"] = list(item.get("expected_urls", []))
        item["answer"] = answer
        item["answer_token_ids"] = [(i * 7919 + len(answer)) % 50000 + 1 for i in range(self.tokens)]
        return finish(item)

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"oracle": True, "tokens_per_answer": self.tokens,
                "questions": None if self.table is None else len(self.table)}


@register_stage("rag-oracle")
def rag_oracle(spec: StageSpec, ctx: StageContext) -> RagOracleStage:
    return RagOracleStage(spec, ctx)
