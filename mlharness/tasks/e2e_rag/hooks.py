"""What an e2e-rag-qna pipeline hands LoadGen and its accuracy task, made from the last item (the manifest's
``postprocess`` calls :func:`finish`; the oracle stage calls it itself).

``reference_SUT.py`` completes each sample with int32 token ids of the final answer, ``n_tokens`` of them (the
answering LLM's ``usage.completion_tokens``; a whitespace count where that is missing), so TEST09's check, which
counts 4-byte ids in the accuracy log, measures the answer's length. The answer's text travels in ``result``, the
sample's ``results.json`` entry, which the pipeline SUT writes to ``pipeline_results.jsonl``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def retrieved_urls(entry: dict[str, Any], limit: int | None = None) -> list[str]:
    """The pages an item or a result retrieved, as ``multi_shot_retrieval.py`` builds ``retrieved_urls``: its
    ``retrieved_urls`` where a stage set them (the multi-shot loop's kept documents), else the URLs of its
    ``passages`` (``[{"url", ...}]``), in their order; a page once, at its first place (the reference's
    ``all_retrieved_urls`` set), a passage without a URL left out (it adds only a non-empty ``original_url``),
    then the first ``limit`` (its ``top_k_reranking``; all without it). The one list e2e-rag-qna's results, its
    manifests' hooks and the generic ``rag_qa`` metric score."""
    urls = entry.get("retrieved_urls")
    if urls is None:
        urls = [p.get("url") for p in entry.get("passages") or [] if isinstance(p, dict)]
    unique = list(dict.fromkeys(str(u) for u in urls if u))
    return unique if limit is None else unique[:limit]


def result_entry(item: dict[str, Any]) -> dict[str, Any]:
    """``reference_SUT.py``'s ``results[query_id]`` for one answered question."""
    return {"query": item["query"], "answer": item.get("answer", "Unknown"),
            "ground_truth": item.get("ground_truth"), "retrieved_urls": retrieved_urls(item),
            "expected_urls": list(item.get("expected_urls", [])),
            "metrics": {"precision": item.get("precision", 0), "recall": item.get("recall", 0),
                        "f1": item.get("f1", 0)}}


def finish(item: dict[str, Any]) -> dict[str, Any]:
    """Set ``response`` (int32 token ids), ``n_tokens`` and ``result`` on the last item, as the reference
    completes a sample: the answer's token ids where the generator gave them, else ``n_tokens`` zeros (its
    whitespace-token count when nothing says more)."""
    ids = item.get("answer_token_ids")
    if ids is None:
        n = int(item.get("n_tokens") or max(1, len(str(item.get("answer", "")).split())))
        ids = [0] * n
    item["response"] = np.asarray(ids, dtype=np.int32)
    item["n_tokens"] = int(item["response"].size)
    item["result"] = result_entry(item)
    return item


# multi_shot_retrieval.py's generate_answer prompt, byte for byte ({question}; {documents}: "\n[DOC i] text\n" each)
ANSWER_PROMPT = """Answer the question based ONLY on the provided documents.

QUESTION: {question}

DOCUMENTS:
{documents}

INSTRUCTIONS:
- Provide a specific, concise answer
- Base your answer ONLY on facts from the documents
- If documents don't contain enough information, answer "Unknown"
- Do NOT guess or make assumptions

Answer:"""


def answer_messages(item: dict[str, Any], max_documents: int | None = None) -> list[dict[str, str]]:
    """The answering LLM's one user message, as ``generate_answer`` builds it from the kept documents (here the
    item's ``passages``, reranked, at most ``max_documents`` of them), numbered from 1."""
    passages = list(item.get("passages") or [])[:max_documents]
    documents = "".join(f"\n[DOC {i + 1}] {p.get('text', '')}\n" for i, p in enumerate(passages))
    return [{"role": "user", "content": ANSWER_PROMPT.format(question=item["query"], documents=documents)}]



def postprocess(ctx: Any, item: dict[str, Any]) -> dict[str, Any]:
    """The manifest hook's shape: ``postprocess(ctx, item) -> item``."""
    return finish(item)
