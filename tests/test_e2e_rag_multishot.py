"""e2e-rag-qna's multi-shot loop (mlharness.tasks.e2e_rag.multishot): its prompts byte for byte from the official
multi_shot_retrieval.py; the official function itself run in-process (its LLM calls and its database answered by the
same script and corpus as the hooks and our retrieve and rerank stages) against the hooks driven as the pipeline
routes them: the same prompts in the same order, the same answer and retrieved URLs, for 1, 2 and MAX rounds,
unreadable replies and a loop that keeps nothing; and the real manifest's loop through the CLI against a scripted
local chat server: each sample's visits, the bound, and a reply that cannot be read failing its sample (exit 3)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import types
import zlib

import pytest

from mlharness.tasks.e2e_rag import multishot

REPO = "/work/.mirror/mlcommons+inference/repo"
COMPONENTS = {"generate_search_queries": "plan", "evaluate_document_relevance": "grade",
              "check_sufficiency": "decide", "answer_generator": "generate"}


def _official_source() -> str:
    src = subprocess.run(["git", "-C", REPO, "show", "HEAD:e2e-rag/multi_shot_retrieval.py"], capture_output=True,
                         text=True, timeout=30)
    if src.returncode != 0:
        pytest.skip("no mirror of mlcommons/inference")
    return src.stdout


def test_the_prompts_are_the_references():
    src = _official_source()
    for name in ("RELEVANCE_CHECK_PROMPT", "SUFFICIENCY_CHECK_PROMPT", "QUERY_GENERATION_PROMPT"):
        assignment = re.search(rf'^{name} = """.*?"""$', src, re.DOTALL | re.MULTILINE).group(0)
        scope: dict = {}
        exec(assignment, scope)  # noqa: S102 - the official constant, as Python reads it
        assert getattr(multishot, name) == scope[name], name
    assert "MAX_DOCS_FOR_QUERY_GEN = 12" in src


# -- the official function against the hooks --------------------------------------------------------------------------
def _reference(tmp_path, monkeypatch):
    """multi_shot_retrieval.py imported with its sibling modules stubbed (they log, parse arguments and score)."""
    (tmp_path / "multi_shot_retrieval.py").write_text(_official_source())
    for name in ("llm_logger", "params", "utils", "evaluation", "retrieve"):
        stub = types.ModuleType(name)
        stub.__getattr__ = lambda attr: (lambda *a, **k: {})  # every name a callable returning {}
        monkeypatch.setitem(sys.modules, name, stub)
    spec = importlib.util.spec_from_file_location("official_multi_shot", tmp_path / "multi_shot_retrieval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _h(*parts: str) -> int:
    return zlib.crc32("\x00".join(parts).encode())


class Corpus:
    """12 pages of 2 passages each, and 2 passages without a URL; lookups and rerank scores from hashes."""

    def __init__(self):
        self.rows = [(f"page {p} part {c}: fact {_h(str(p), str(c)) % 97}", f"https://en.wikipedia.org/wiki/P{p}")
                     for p in range(12) for c in range(2)] + [("orphan passage A", ""), ("orphan passage B", "")]

    def ranked(self, query: str, k: int) -> list[int]:
        return sorted(range(len(self.rows)), key=lambda r: _h(query, str(r)))[:k]

    # the reference's rag_db
    def lookup(self, query: str, k: int):
        return [types.SimpleNamespace(page_content=self.rows[r][0], metadata={"original_url": self.rows[r][1]})
                for r in self.ranked(query, k)]

    def rerank(self, query: str, contents: list[str]):
        return [(c, float(_h("rr", query, c) % 1000)) for c in contents]


def _script(kind: str):
    """An LLM answering every prompt of the loop by ``kind``."""

    def reply(prompt: str) -> str:
        h = _h(prompt)
        if prompt.startswith("You generate search queries"):
            if kind == "unreadable":
                return "I would search for the people first."
            if kind == "json-errors":
                return '{"queries": ["a", oops]}'
            body = {"queries": [f"q{h % 7}", f"q{h % 5}", f"q{h % 3}"][: 1 + h % 3], "feedback": f"fb {h % 2}"}
            return f"```json\n{json.dumps(body)}\n```" if h % 2 else json.dumps(body)
        if prompt.startswith("You are a document relevance classifier"):
            n = int(re.search(r"MUST have exactly (\d+) elements", prompt).group(1))
            if kind == "keeps-nothing":
                return json.dumps({"relevance": [0] * n})
            if kind in ("unreadable", "json-errors"):
                return "relevant, all of them" if kind == "unreadable" else json.dumps({"relevance": [1] * (n + 1)})
            return json.dumps({"relevance": [(h >> i) & 1 for i in range(n)]})
        if prompt.startswith("You check if the retrieved documents are sufficient"):
            iteration = int(re.search(r"^ITERATION: (\d+) of", prompt, re.MULTILINE).group(1))
            stop = {"one-round": 2, "two-rounds": 3}.get(kind, 99)
            if kind == "unreadable":
                return "not yet"
            return json.dumps({"sufficient": iteration >= stop, "reasoning": f"r{iteration}"})
        assert prompt.startswith("Answer the question based ONLY"), prompt[:80]
        return f"  answer {h % 100}  "

    return reply


def _run_official(module, monkeypatch, corpus, reply, question, max_iterations):
    sent: list[tuple[str, str]] = []

    def call(service_url, model_name, messages, component="unknown", **kw):
        sent.append((COMPONENTS[component], messages[0]["content"]))
        return reply(messages[0]["content"]).strip()  # call_chat_completions strips the content

    monkeypatch.setattr(module, "call_chat_completions", call)
    config = {k: "x" for k in ("grader_service_url", "grader_model_name", "query_service_url", "query_model_name",
                               "sufficiency_service_url", "sufficiency_model_name")}
    out = module.multi_shot_retrieval(corpus, question, expected_urls=[], max_sub_queries=3, top_k_retriever=4,
                                      top_k_reranking=5, max_iterations=max_iterations, verbose=False,
                                      llm_config=config)
    return sent, out


def _run_hooks(corpus, reply, question, max_iterations):
    """The manifest's stages in the pipeline's order, routed as the flow routes them: our retrieve and rerank
    stages over the corpus, the chat stages answered by the script unless their before hook skips the call."""
    from mlharness.kinds.pipeline.rerank import RerankStage
    from mlharness.kinds.pipeline.retrieval import RetrievalStage
    from mlharness.kinds.pipeline.stage import StageContext, StageSpec

    ctx = StageContext(manifest_dir=".", cache_dir=".")
    retrieve = RetrievalStage(StageSpec("retrieve", "retrieval", options={"top_k": 99}), ctx)
    retrieve.embedder = types.SimpleNamespace(embed=lambda texts: list(texts))
    retrieve.db = types.SimpleNamespace(
        search=lambda qs, k: [[(r, 0.0) for r in corpus.ranked(q, k)] for q in qs],
        texts=[t for t, _ in corpus.rows], metadatas=[{"original_url": u} for _, u in corpus.rows])
    rerank = RerankStage(StageSpec("rerank", "rerank"), ctx)
    rerank.scores = lambda q, texts: [s for _, s in corpus.rerank(q, texts)]
    sent: list[tuple[str, str]] = []

    def chat(name):
        def run(item):
            if not item.get("skip_call"):
                sent.append((name, item["messages"][0]["content"]))
                item["answer"] = reply(item["messages"][0]["content"])
            return item
        return run

    settings = {"max_iterations": max_iterations, "max_sub_queries": 3, "top_k_retriever": 4, "top_k_reranking": 5}
    stages = [("plan", lambda it: multishot.plan_before(it, **settings), chat("plan"), multishot.plan_after),
              ("retrieve", None, retrieve.run, None), ("rerank", None, rerank.run, multishot.merge_after),
              ("grade", multishot.grade_before, chat("grade"), multishot.grade_after),
              ("decide", multishot.decide_before, chat("decide"), multishot.decide_after),
              ("generate", multishot.answer_before, chat("generate"), multishot.answer_after)]
    item, k, visits = {"query": question}, 0, {}
    while k < len(stages):
        name, before, run, after = stages[k]
        visits[name] = visits.get(name, 0) + 1
        assert visits["plan"] <= max_iterations  # plan's max_visits
        item = run(before(item) if before else item)
        item = after(item) if after else item
        route = item.pop("route", None)
        k = [s[0] for s in stages].index(route) if route else k + 1
    return sent, item, visits


@pytest.mark.parametrize(("kind", "max_iterations", "plans"), [
    ("one-round", 3, 1), ("two-rounds", 3, 2), ("never", 3, 2), ("never", 5, 4), ("keeps-nothing", 3, 3),
    ("unreadable", 3, None), ("json-errors", 4, None)])
def test_the_hooks_ask_and_keep_what_the_official_loop_does(tmp_path, monkeypatch, kind, max_iterations, plans):
    module = _reference(tmp_path, monkeypatch)
    corpus = Corpus()
    question = "Who taught the clockmaker of Kalomer, and where was that teacher born?"
    official_sent, official = _run_official(module, monkeypatch, corpus, _script(kind), question, max_iterations)
    sent, item, visits = _run_hooks(corpus, _script(kind), question, max_iterations)
    assert sent == official_sent  # every prompt, in order, byte for byte
    assert item["answer"] == official["llm_answer"] and item["retrieved_urls"] == official["retrieved_urls"]
    assert visits["plan"] == sum(1 for stage, _ in sent if stage == "plan")
    assert item["multishot_rounds"]["iterations"] == official["num_iterations"]
    assert item["multishot_rounds"]["queries"] == official["total_queries"]
    if plans is not None:
        assert visits["plan"] == plans
    if kind == "keeps-nothing":
        assert item["answer"] == "" and item["retrieved_urls"] == [] and item["n_tokens"] == 1
    else:
        assert item["retrieved_urls"] and len(item["retrieved_urls"]) <= 5


def test_unreadable_replies_fail_with_unreadable_fail():
    item = {"query": "Q?"}
    multishot.plan_before(item, unreadable="fail")
    item["answer"] = "no JSON here"
    with pytest.raises(multishot.UnreadableReply, match="plan reply could not be read"):
        multishot.plan_after(item)
    with pytest.raises(ValueError, match="not known"):
        multishot.start({}, max_rounds=2)


# -- the real manifest's loop through the CLI ---------------------------------------------------------------------
MAX = 3
BEHAVIOURS = ("one-round", "two-rounds", "keeps-nothing", "unreadable-plan")


def _served_script():
    """Each question, in the order the server first sees it, takes the next behaviour (round robin)."""
    import threading

    lock, assigned = threading.Lock(), {}

    def reply(prompt: str) -> str:
        question = re.search(r"^QUESTION: (.*)$", prompt, re.MULTILINE).group(1)
        with lock:
            kind = assigned.setdefault(question, BEHAVIOURS[len(assigned) % len(BEHAVIOURS)])
        if kind == "unreadable-plan" and prompt.startswith("You generate search queries"):
            return "Let me think about which pages to search."
        return _script(kind)(prompt)

    return reply, assigned


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(importlib.util.find_spec("faiss") is None, reason="needs faiss-cpu (the rag extra)")
def test_the_real_manifests_loop_through_the_cli(env, tmp_path):
    """e2e-rag-qna.yaml with tiny random embedder and reranker over the synthetic corpus, its chat stages on a
    scripted local server, MAX_ITERATIONS 3 and ``unreadable: fail``: a question answered after one round visits
    plan once, after two rounds twice, one whose pages are never relevant visits plan MAX times and ends
    unanswered, and one whose decomposition cannot be read fails naming the plan stage; exit 3."""
    import yaml

    from mlharness.paths import MANIFESTS_DIR
    from tests.helpers.cli import cli
    from tests.helpers.judge_server import running_judge
    from tests.helpers.multishot_server import ScriptedChat

    doc = yaml.safe_load((MANIFESTS_DIR / "e2e-rag-qna" / "e2e-rag-qna.yaml").read_text())
    stages = {s["name"]: s for s in doc["inputs"][0]["parameters"]["stages"]}
    assert list(stages) == ["plan", "retrieve", "rerank", "grade", "decide", "generate"]
    assert stages["plan"]["max_visits"] == 5 and "max_iterations=5" in stages["plan"]["before"]
    stages["plan"]["max_visits"] = MAX
    stages["plan"]["before"] = stages["plan"]["before"].replace("max_iterations=5", f"max_iterations={MAX}").replace(
        'unreadable="fallback"', 'unreadable="fail"')
    stages["retrieve"]["model"] = {"graph_path": "e2e-rag-embedder-random",
                                   "generator": "mlharness.kinds.pipeline.models:ensure_random_embedder"}
    stages["retrieve"]["options"] = {"synthetic_corpus": True, "top_k": 10}
    stages["rerank"]["model"] = {"graph_path": "e2e-rag-reranker-random",
                                 "generator": "mlharness.kinds.pipeline.models:ensure_random_reranker"}
    doc["attributes"] = {"synthetic_e2e_rag": True}
    manifest = tmp_path / "e2e-rag-qna-loop.yaml"
    reply, assigned = _served_script()
    with ScriptedChat(reply) as server, running_judge() as judge:
        for name in ("plan", "grade", "decide", "generate"):
            stages[name]["options"] = {**stages[name]["options"], "endpoints": [server.url], "model": "chat-model"}
        manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
        proc = cli({**env, "MLHARNESS_JUDGE_URL": judge.url}, "run", "--manifest", str(manifest), "--scenario",
                   "Offline", "--mode", "accuracy", "--output", str(tmp_path / "acc"), "--no-progress", timeout=200)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stage 'plan'" in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
    failed = next(tmp_path.glob("acc.failed-*"))  # a failed run's partial output is kept aside
    records = [json.loads(line) for line in (failed / "pipeline_results.jsonl").read_text().splitlines()]
    assert len(records) == 8 and set(assigned.values()) == set(BEHAVIOURS)
    seen = set()
    for r in records:
        kind = assigned[r["result"]["query"]] if r.get("result") else "unreadable-plan"
        visits = r["visits"]
        assert all(n <= MAX for n in visits.values()), visits  # the loop never passes its bound
        if kind == "unreadable-plan":
            assert r["error"]["stage"] == "plan" and "could not be read" in r["error"]["error"], r["error"]
            assert visits == {"plan": 1}
        else:
            rounds = {"one-round": 1, "two-rounds": 2, "keeps-nothing": MAX}[kind]
            assert r["error"] is None and visits["plan"] == rounds and visits["generate"] == 1, (kind, visits)
            assert visits["retrieve"] == visits["rerank"] == rounds
            urls = r["result"]["retrieved_urls"]
            if kind == "keeps-nothing":
                assert r["result"]["answer"] == "" and urls == []
            else:
                assert r["result"]["answer"].startswith("answer ") and 1 <= len(urls) <= 10
                assert len(set(urls)) == len(urls) and all(u.startswith("https://") for u in urls)
        seen.add(kind)
    assert seen == set(BEHAVIOURS)
