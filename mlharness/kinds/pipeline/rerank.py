"""The ``rerank`` stage: late-interaction MaxSim over ColBERT token embeddings, as ``reranker_worker._do_rerank``
computes it, in a few lines of torch (pylate 1.6 pins torch 2.11 and has no place beside torch 2.13).

The reference loads the checkpoint as a plain ``AutoModel`` and scores with its ``last_hidden_state``: the query
tokenized to 32 tokens (``padding='max_length'``) and its padding rows dropped, the passages to at most 512 (padded
to the longest), ``sim = einsum('qd,bld->bql')``, the passages' padding masked to -inf, then the max over a passage's
tokens summed over the query's tokens. No ColBERT linear projection and no normalisation. Passages are then
reordered by score, highest first (``multi_shot_retrieval.py``), and the first ``top_k`` kept (option; default all).
The item's ``query`` and ``passages`` are read; ``passages`` comes back reordered, each with ``rerank_score``. An
item with ``query_passages`` (a multi-shot round) has each sub-query's reranked against it, to ``query_keep`` each.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from mlharness.kinds.pipeline.retrieval import asset_path
from mlharness.kinds.pipeline.stage import Item, StageContext, StageError, StageSpec, register_stage

QUERY_TOKENS = 32
PASSAGE_TOKENS = 512


def maxsim(query: Any, passages: Any, passage_mask: Any) -> Any:
    """Scores (B,) of query token embeddings (Q, D) against passages (B, L, D) whose mask (B, L) marks real
    tokens: for each query token its best passage token's dot product, summed."""
    import torch

    sim = torch.einsum("qd,bld->bql", query, passages)
    sim = sim.masked_fill(~passage_mask.unsqueeze(1).bool(), float("-inf"))
    return sim.max(dim=-1).values.sum(dim=-1)


class RerankStage:
    def __init__(self, spec: StageSpec, ctx: StageContext):
        self.spec, self.ctx, self.name = spec, ctx, spec.name
        self.top_k = spec.options.get("top_k")
        self.model: Any = None
        self.tokenizer: Any = None
        self.lock = threading.Lock()  # the tokenizer's (a fast tokenizer refuses concurrent calls)
        # one forward at a time on the shared model, torch's threads within it, unless the stage sets its workers'
        # threads: then each worker's forward has its own share of the cores and they run side by side
        self.forward_lock = threading.Lock() if not spec.threads else contextlib.nullcontext()

    def load(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        path = asset_path(self.spec, self.ctx)
        self.model = AutoModel.from_pretrained(str(path)).to(self.ctx.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.scores("warm up", ["warm up " * 64, "warm up"])  # torch's first call is slow: not a sample's

    def scores(self, query: str, texts: list[str]) -> list[float]:
        import torch

        with self.lock:
            q = self.tokenizer(query, return_tensors="pt", truncation=True, max_length=QUERY_TOKENS,
                               padding="max_length")
            d = self.tokenizer(texts, return_tensors="pt", truncation=True, max_length=PASSAGE_TOKENS, padding=True)
        q = {k: v.to(self.ctx.device) for k, v in q.items()}
        d = {k: v.to(self.ctx.device) for k, v in d.items()}
        with self.forward_lock, torch.no_grad():
            q_emb = self.model(**q).last_hidden_state.squeeze(0)
            q_emb = q_emb[q["attention_mask"].squeeze(0).bool()]
            d_emb = self.model(**d).last_hidden_state
            return maxsim(q_emb, d_emb, d["attention_mask"]).float().tolist()

    def run(self, item: Item) -> Item:
        if item.get("query_passages") is not None:  # a multi-shot round: each sub-query's passages against it
            keep = item.get("query_keep", self.top_k)
            item["query_passages"] = [self.rerank(q, ps, keep, only_over=True) for q, ps in
                                      zip(item["queries"], item["query_passages"], strict=True)]
            return item
        query, passages = item.get("query"), item.get("passages")
        if not isinstance(query, str) or not isinstance(passages, list):
            raise StageError(self.name, f"the item needs 'query' and 'passages' (keys: {sorted(item)}): is a "
                                        "retrieval stage before it?")
        item["passages"] = self.rerank(query, passages, self.top_k) if passages else passages
        return item

    def rerank(self, query: str, passages: list[dict[str, Any]], keep: Any = None,
               only_over: bool = False) -> list[dict[str, Any]]:
        """``passages`` by MaxSim score, highest first (ties in their order), the first ``keep``. A multi-shot
        round's sub-query is reranked only when it has more than ``keep`` passages, as the reference does."""
        if not passages or (keep is not None and only_over and len(passages) <= int(keep)):
            return passages
        scored = self.scores(query, [p["text"] for p in passages])
        order = sorted(range(len(passages)), key=lambda i: scored[i], reverse=True)
        kept = order if keep is None else order[: int(keep)]
        return [{**passages[i], "rerank_score": scored[i]} for i in kept]

    def close(self) -> None:
        self.model = self.tokenizer = None

    def describe(self) -> dict[str, Any]:
        import torch

        return {"torch": torch.__version__, "scoring": "MaxSim over last_hidden_state (reranker_worker.py)",
                "top_k": self.top_k, "model": (self.spec.model or {}).get("graph_path")}


@register_stage("rerank")
def rerank_stage(spec: StageSpec, ctx: StageContext) -> RerankStage:
    return RerankStage(spec, ctx)
