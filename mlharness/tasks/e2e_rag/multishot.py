"""The reference's iterative multi-shot retrieval (``e2e-rag/multi_shot_retrieval.py``'s ``multi_shot_retrieval``,
which ``reference_SUT.py`` runs for every question) as the hooks of a pipeline with a route: its three prompts
byte for byte, its replies parsed as it parses them, its rounds' merge, deduplication and cap, and its stop rule.

The stages (``mlharness/manifests/e2e-rag-qna/e2e-rag-qna.yaml``; docs/rag.md walks through the reference):

- ``plan`` (a chat stage): ``QUERY_GENERATION_PROMPT`` -> up to ``max_sub_queries`` sub-queries
  (:func:`plan_before`, :func:`plan_after`);
- ``retrieve``: each sub-query's ``top_k_retriever`` passages (``item["queries"]`` -> ``item["query_passages"]``);
- ``rerank``: each sub-query's passages reranked to ``max(3, top_k_retriever // n)`` when it has more
  (``item["query_keep"]``); :func:`merge_after` keeps the pages not seen in an earlier round as the new documents;
- ``grade`` (a chat stage, the reference's gpt-oss-20b grader): ``RELEVANCE_CHECK_PROMPT`` marks the new documents
  relevant or not; the relevant ones are kept (:func:`grade_before`, :func:`grade_after`);
- ``decide`` (a chat stage): ``SUFFICIENCY_CHECK_PROMPT`` over the kept documents; not sufficient: ``route`` back to
  ``plan`` (bounded by its ``max_visits``, which is ``max_iterations``); forced sufficient on the last iteration
  (:func:`decide_before`, :func:`decide_after`);
- ``generate`` (a chat stage): ``generate_answer``'s prompt over every kept document (:func:`answer_before`,
  :func:`answer_after`); ``retrieved_urls`` are the kept documents' pages, the first ``top_k_reranking``.

The reference's iteration k >= 2 begins by grading what iteration k-1 retrieved, so a round of these stages is:
plan and retrieve of iteration k, grade and decide of iteration k+1. A call the reference does not make (grading
with no new document, deciding with none kept, answering after the last iteration's retrieval ended the loop
unanswered) is skipped: the hook sets ``item["skip_call"]`` and the chat stage passes the item on untouched.

Unreadable replies: the reference falls back (sub-queries: the question itself; relevance: every document
relevant; sufficiency: not sufficient, or sufficient on the last iteration) and so do these hooks, by default
(``unreadable: fallback``, what the reference's accuracy is measured with); ``unreadable: fail`` fails the sample
instead, naming the stage whose reply could not be read (its hook raises; the run exits 3).
"""

from __future__ import annotations

import json
import re
from typing import Any

from mlharness.tasks.e2e_rag.hooks import ANSWER_PROMPT

MAX_DOCS_FOR_QUERY_GEN = 12  # multi_shot_retrieval's cap of the kept documents shown to query generation
DEFAULTS = {"max_iterations": 5, "max_sub_queries": 3, "top_k_retriever": 10, "top_k_reranking": 10,
            "unreadable": "fallback"}  # reference_mlperf_{accuracy,perf}.sh's and params.py's defaults
MAX_TOKENS = {"plan": 10240, "grade": 4096, "decide": 10240, "generate": 10240}  # each call's max_tokens


class UnreadableReply(ValueError):
    """A chat stage's reply the reference's parser could not read, with ``unreadable: fail``."""


# multi_shot_retrieval.py's prompts, byte for byte (tests/test_e2e_rag_multishot.py reads them from the source)
RELEVANCE_CHECK_PROMPT = """\
You are a document relevance classifier. Evaluate if documents are relevant to answering a question.

QUESTION: {question}

NEW DOCUMENTS TO EVALUATE:
{new_docs}

KEPT DOCUMENTS (context only):
{kept_docs}

TASK: For each NEW document, mark 1 if it contains ANY information relevant to answering the question, 0 if completely irrelevant.

Be GENEROUS in marking relevance:
- Mark 1 if document mentions any entity/person/place/event in the question
- Mark 1 if document has related information that could help answer
- Mark 1 if document has facts that could be connected with other docs
- Only mark 0 if truly unrelated content

OUTPUT FORMAT (JSON only):
{{"relevance": [1, 0, 1, 0, 1]}}

The array MUST have exactly {num_docs} elements (one per NEW document).
"""

SUFFICIENCY_CHECK_PROMPT = """\
You check if the retrieved documents are sufficient to answer a question.

QUESTION: {question}

KEPT DOCUMENTS (already marked relevant):
{kept_docs}

TASK: Review ALL kept documents and determine if they contain enough information to answer the question.

Try to connect information across documents:
- Match entity names across documents
- Chain relationships (A → B → C)
- Cross-reference dates, positions, attributes
- Build complete answer chains

ITERATION: {iteration} of {max_iterations}

If iteration is {max_iterations} (the last iteration), you MUST provide a final answer with available information or return "Unknown" if truly insufficient.

OUTPUT FORMAT (JSON only):
If sufficient: {{"sufficient": true, "reasoning": "Found all required facts across documents X, Y, Z..."}}
If not sufficient: {{"sufficient": false, "reasoning": "Missing: specific fact or detail needed..."}}

RULES:
- Be precise about what information is present vs missing
- If on final iteration ({max_iterations}), force sufficient=true to generate final answer
"""

QUERY_GENERATION_PROMPT = """\
You generate search queries for complex multi-hop questions.

QUESTION: {question}

KEPT DOCUMENTS (already marked relevant):
{kept_docs}

SEARCH HISTORY: {history}
FEEDBACK: {feedback_history}

TASK: GENERATE QUERIES
Analyze what's MISSING, then generate up to {max_queries} strategic search queries.

CRITICAL ANALYSIS OF FAILURES:
Look at SEARCH HISTORY. If queries repeatedly failed (0 docs or 3+ attempts with same pattern):
- STOP that approach immediately
- ESCALATE to broader searches
- Get main Wikipedia articles first
- DO NOT repeat failed query patterns

ESCALATION STRATEGIES (when stuck):
1. **Get full articles**: Search just entity name "Harriet Lane" (not "Harriet Lane mother")
2. **Use list articles**: "List of presidents", "List of first ladies"
3. **Search related entities**: If can't find X's mother, search X's family/siblings
4. **Try alternate names**: Full name, nickname, maiden name

QUERY PATTERNS:
- **Biography**: Person's name alone → gets full Wikipedia with infobox family details
- **Lists/Rankings**: "List of X", "Timeline of Y"
- **Simple is better**: 2-4 words, entity names not descriptions

RESPONSE FORMAT (JSON only):
{{"queries": ["Harriet Lane", "James Garfield mother"], "feedback": "Found: 15th first lady is Harriet Lane. Missing: Her mother's name, 2nd assassinated president's mother's maiden name."}}

RULES:
- Make queries SHORT (2-4 words)
- Use entity NAMES not descriptions
- Never repeat failed query patterns
- Escalate after 3 failed attempts on same info
"""


def _state(item: dict[str, Any]) -> dict[str, Any]:
    state = item.get("multishot")
    if not isinstance(state, dict):
        raise ValueError("the item has no 'multishot' state: the plan stage's before hook (plan_before) starts it")
    return state


def start(item: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """The loop's state on the item (once): the settings and what ``multi_shot_retrieval`` keeps between
    iterations."""
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"multishot settings {unknown} are not known; the settings are {sorted(DEFAULTS)}")
    if settings.get("unreadable", "fallback") not in ("fallback", "fail"):
        raise ValueError(f"multishot setting unreadable={settings['unreadable']!r}: expected 'fallback' or 'fail'")
    state = {**DEFAULTS, **settings, "iteration": 0, "kept": [], "new": [], "seen": [], "history": [],
             "counts": [], "feedback": [], "previous_feedback": "", "sufficient": False, "ended": False,
             "answered": False}
    item["multishot"] = state
    return state


def json_reply(text: str) -> str | None:
    """The JSON object of a reply as the reference finds it: inside a fenced block when there is one, then from the
    first ``{`` to the last ``}``; None when there is none."""
    if "```" in text:
        block = re.search(r'```(?:json)?\s*\n?(.*?)\n?```', text, re.DOTALL)
        if block:
            text = block.group(1).strip()
    found = re.search(r'\{.*\}', text, re.DOTALL)
    return found.group(0) if found else None


def _read(state: dict[str, Any], stage: str, reply: str) -> tuple[dict[str, Any] | None, str]:
    """The reply's JSON object, or None and the reference's feedback for why it fell back ("LLM returned empty",
    "No JSON in LLM response", "Error: <the JSON error>"); ``unreadable: fail`` raises instead."""
    found = json_reply(reply) if reply else None
    parsed, why = None, "LLM returned empty" if not reply else "No JSON in LLM response"
    if found is not None:
        try:
            parsed = json.loads(found)
        except ValueError as e:
            why = f"Error: {e}"
    if parsed is None and state["unreadable"] == "fail":
        raise UnreadableReply(f"the {stage} reply could not be read as multi_shot_retrieval.py reads it ({why}): "
                              f"{reply[:200]!r}")
    return parsed, why


def _docs(docs: list[list[str]]) -> str:
    return "".join(f"\n[DOC {i + 1}] {content}\n" for i, (_url, content) in enumerate(docs)) if docs else "None"


def _ask(item: dict[str, Any], prompt: str) -> dict[str, Any]:
    item["messages"] = [{"role": "user", "content": prompt}]
    item.pop("skip_call", None)
    return item


def _skip(item: dict[str, Any]) -> dict[str, Any]:
    item["skip_call"] = True
    item.pop("messages", None)
    return item


def plan_before(item: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """generate_search_queries' prompt: on the first visit the decomposition of the question (nothing kept, no
    history), later over the last kept documents (at most 12), the search history and the feedback so far."""
    state = item.get("multishot") or start(item, **settings)
    if state["iteration"] == 0:
        state["iteration"] = 1
    first = state["iteration"] == 1 and not state["kept"]
    kept = [] if first else state["kept"][-MAX_DOCS_FOR_QUERY_GEN:]
    history = "".join(f"- Query: '{q}' → {n} docs\n" for q, n in zip(state["history"], state["counts"],
                                                                        strict=True)) if not first else ""
    feedback = "\n".join(state["feedback"]) if (state["feedback"] and not first) else "Iteration 1 - Initial search"
    return _ask(item, QUERY_GENERATION_PROMPT.format(question=item["query"], kept_docs=_docs(kept),
                                                     history=history or "No queries yet", feedback_history=feedback,
                                                     max_queries=state["max_sub_queries"]))


def plan_after(item: dict[str, Any]) -> dict[str, Any]:
    """The sub-queries (the question itself where the reply gives none or cannot be read), the feedback history,
    and what the retrieve and rerank stages read: ``queries`` and ``query_keep``."""
    state, question = _state(item), item["query"]
    reply = str(item.pop("answer", "") or "")
    parsed, why = _read(state, "plan", reply)
    if parsed is None:
        queries, feedback = [question], why
    else:
        queries, feedback = parsed.get("queries", [question]), parsed.get("feedback", "Generating queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        if state["unreadable"] == "fail":
            raise UnreadableReply(f"the plan reply's queries are not a list of strings: {queries!r}")
        queries = [question]
    if feedback and str(feedback).strip() and feedback != state["previous_feedback"]:
        state["feedback"].append(str(feedback).strip())
    state["previous_feedback"] = feedback
    item["queries"] = list(queries) or [question]
    item["query_top_k"] = state["top_k_retriever"]  # the retrieve stage's k for each sub-query
    item["query_keep"] = max(3, state["top_k_retriever"] // len(item["queries"]))  # the rerank stage's, each
    return item


def merge_after(item: dict[str, Any]) -> dict[str, Any]:
    """Each sub-query's reranked passages, in order: a page not retrieved before becomes a new document (pages
    without a URL are dropped, as the reference drops them); the search history counts each sub-query's new ones.
    The last iteration's retrieval ends the loop unanswered."""
    state = _state(item)
    seen = set(state["seen"])
    for query, passages in zip(item["queries"], item.get("query_passages") or [], strict=True):
        before = len(state["new"])
        for p in passages:
            url = p.get("url")
            if url and url not in seen:
                seen.add(url)
                state["seen"].append(url)
                state["new"].append([url, p.get("text", "")])
        state["history"].append(query)
        state["counts"].append(len(state["new"]) - before)
    item.pop("query_passages", None)
    if state["iteration"] >= state["max_iterations"]:
        state["ended"] = True
    return item


def grade_before(item: dict[str, Any]) -> dict[str, Any]:
    """evaluate_document_relevance's prompt over the new documents (and the first five kept, 300 characters
    each); no call without new documents or once the loop has ended."""
    state = _state(item)
    if state["ended"]:
        return _skip(item)
    state["iteration"] += 1
    if not state["new"]:
        return _skip(item)
    new = "".join(f"\n[NEW {i + 1}] {content}\n" for i, (_url, content) in enumerate(state["new"]))
    kept = ""
    if state["kept"]:
        kept = f"[{len(state['kept'])} documents already kept as relevant]\n"
        kept += "".join(f"[KEPT {i + 1}] {content[:300]}...\n" for i, (_url, content) in enumerate(state["kept"][:5]))
    return _ask(item, RELEVANCE_CHECK_PROMPT.format(question=item["query"], new_docs=new, kept_docs=kept or "None",
                                                    num_docs=len(state["new"])))


def grade_after(item: dict[str, Any]) -> dict[str, Any]:
    """The relevant new documents join the kept ones (every one where the reply cannot be read or its count is
    not the documents')."""
    state = _state(item)
    if item.pop("skip_call", False):
        state["new"] = []
        return item
    reply = str(item.pop("answer", "") or "")
    parsed, _why = _read(state, "grade", reply)
    relevance = parsed.get("relevance", []) if parsed is not None else None
    if not isinstance(relevance, list) or len(relevance) != len(state["new"]):
        if parsed is not None and state["unreadable"] == "fail":
            raise UnreadableReply(f"the grade reply's relevance {relevance!r} is not one mark per new document "
                                  f"({len(state['new'])})")
        relevance = [1] * len(state["new"])
    state["kept"].extend(doc for doc, mark in zip(state["new"], relevance, strict=True) if mark == 1)
    state["new"] = []
    return item


def decide_before(item: dict[str, Any]) -> dict[str, Any]:
    """check_sufficiency's prompt over every kept document; no call with none kept or once the loop has ended."""
    state = _state(item)
    if state["ended"] or not state["kept"]:
        return _skip(item)
    return _ask(item, SUFFICIENCY_CHECK_PROMPT.format(question=item["query"], kept_docs=_docs(state["kept"]),
                                                      iteration=state["iteration"],
                                                      max_iterations=state["max_iterations"]))


def decide_after(item: dict[str, Any]) -> dict[str, Any]:
    """Sufficient (always on the last iteration): on to the answer. Else back to ``plan`` for another round."""
    state = _state(item)
    last = state["iteration"] >= state["max_iterations"]
    if item.pop("skip_call", False):
        if not state["ended"]:
            item["route"] = "plan"  # nothing kept yet: more queries
        return item
    parsed, _why = _read(state, "decide", str(item.pop("answer", "") or ""))
    sufficient = bool(parsed.get("sufficient", False)) if parsed is not None else False
    state["sufficient"] = sufficient or last
    if not state["sufficient"]:
        item["route"] = "plan"
    return item


def answer_before(item: dict[str, Any]) -> dict[str, Any]:
    """generate_answer's prompt over every kept document; no call where the loop ended unanswered."""
    state = _state(item)
    if not state["sufficient"]:
        return _skip(item)
    state["answered"] = True
    item.pop("n_tokens", None)  # an earlier chat stage's count: the answer's is the sample's
    return _ask(item, ANSWER_PROMPT.format(question=item["query"], documents=_docs(state["kept"])))


def answer_after(item: dict[str, Any]) -> dict[str, Any]:
    """The answer as reference_SUT.py records it ("Unknown" for an empty one, "" where none was asked) and the
    retrieved pages: the kept documents', the first ``top_k_reranking``."""
    state = _state(item)
    if item.pop("skip_call", False):
        item["answer"], item["n_tokens"] = "", 1
    else:
        item["answer"] = str(item.get("answer") or "").strip() or "Unknown"
    item["retrieved_urls"] = [url for url, _content in state["kept"]][: state["top_k_reranking"]]
    item["multishot_rounds"] = {"iterations": state["iteration"], "queries": len(state["history"]),
                                "sufficient": state["sufficient"], "kept": len(state["kept"])}
    return item
