"""The pipeline data kind end to end through ``mlharness run``: the toy pipeline VALID Offline with only
--min-duration-ms, per-stage records that add up, stages of different samples overlapping, a failing or hanging
stage failing its sample only (exit 3 naming stage and sample, no hang past the deadline), a route loop bounded by
max_visits, and a malformed stage list refused with exit 2 naming the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from mlharness.paths import MANIFESTS_DIR

pytest.importorskip("mlperf_loadgen")

TOY = MANIFESTS_DIR / "pipeline-toy" / "pipeline-toy.yaml"


def toy_manifest(tmp: Path, stages: list[dict] | None = None, count: int = 64, postprocess: str | None = None) -> Path:
    """pipeline-toy with other ``stages`` (their postprocess answers the trail's length, or ``postprocess``'s
    source) and ``count`` samples."""
    doc = yaml.safe_load(TOY.read_text())
    if stages is not None:
        doc["inputs"][0]["parameters"]["stages"] = stages
        doc["postprocess"] = postprocess or ("def postprocess(ctx, item):\n    item['response'] = [len(item['trail'])]\n"
                                             "    item['result'] = {'trail': item['trail']}\n    return item\n")
    doc["dataset"]["init"] = doc["dataset"]["init"].replace("range(64)", f"range({count})")
    path = tmp / "pipe.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def mlharness(tmp: Path, manifest: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLHARNESS_CACHE": str(tmp / "cache")}
    return subprocess.run([sys.executable, "-m", "mlharness", "run", "--manifest", str(manifest), "--scenario",
                           "Offline", "--output", str(tmp / "out"), "--no-progress", *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)


def results(tmp: Path) -> list[dict]:
    """The run's records (a failed run's folder is kept as out.failed-<time>)."""
    out = tmp / "out" if (tmp / "out").is_dir() else max(tmp.glob("out.failed-*"))
    return [json.loads(line) for line in (out / "pipeline_results.jsonl").read_text().splitlines()]


def test_toy_pipeline_is_valid_offline_and_its_records_add_up(tmp_path):
    p = mlharness(tmp_path, TOY, "--mode", "performance", "--min-duration-ms", "500")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "VALID" in p.stdout and "INVALID" not in p.stdout
    assert "stage rerank" in p.stdout and "toy-stage, 1 workers" in p.stdout  # mlharness run's per-stage rows
    recs = results(tmp_path)
    summary = json.loads((tmp_path / "out" / "pipeline_summary.json").read_text())
    assert summary["samples"] == len(recs) and summary["failed"] == 0 and len(recs) > 64
    for s in summary["stages"]:
        assert s["count"] == len(recs) and s["errors"] == 0  # one visit per stage per sample
        assert s["latency_ms"]["p50"] <= s["latency_ms"]["p99"]
    for r in recs:
        assert [v["stage"] for v in r["stages"]] == ["retrieve", "rerank", "generate"]
        assert r["result"]["trail"] == ["retrieve", "rerank", "generate"]
        assert all(v["queued_s"] <= v["enter_s"] <= v["leave_s"] for v in r["stages"])
    # stages of different samples overlap: some sample is in one stage while another is in a different one
    visits = [(v["stage"], v["enter_s"], v["leave_s"], r["qsl_idx"], r["query_id"]) for r in recs
              for v in r["stages"]]
    generate = [v for v in visits if v[0] == "generate"]
    retrieve = [v for v in visits if v[0] == "retrieve"]
    assert any(g[4] != r[4] and g[1] < r[2] and r[1] < g[2] for g in generate[:200] for r in retrieve[:200])


def test_a_failing_stage_fails_only_its_sample_and_the_run_exits_3_naming_it(tmp_path):
    stages = [{"name": "a", "framework": "toy-stage"},
              {"name": "b", "framework": "toy-stage", "options": {"fail_sample": 3}, "workers": 2},
              {"name": "c", "framework": "toy-stage"}]
    p = mlharness(tmp_path, toy_manifest(tmp_path, stages, count=8), "--mode", "accuracy")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "stage 'b' failed sample 3" in p.stderr and "1 of 8 samples failed" in p.stderr
    recs = {r["qsl_idx"]: r for r in results(tmp_path)}
    assert sorted(recs) == list(range(8))  # every sample completed once
    assert recs[3]["error"]["stage"] == "b" and recs[3]["result"] is None
    assert all(recs[i]["error"] is None and recs[i]["result"]["trail"] == ["a", "b", "c"] for i in recs if i != 3)


def test_a_hanging_stage_fails_its_sample_at_its_deadline_without_hanging_the_run(tmp_path):
    stages = [{"name": "a", "framework": "toy-stage"},
              {"name": "slow", "framework": "toy-stage", "options": {"hang_sample": 1}, "timeout_s": 0.5}]
    t0 = time.monotonic()
    p = mlharness(tmp_path, toy_manifest(tmp_path, stages, count=4), "--mode", "accuracy", timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr
    assert time.monotonic() - t0 < 30
    assert "stage 'slow' failed sample 1: past its deadline of 0.5 s" in p.stderr
    recs = {r["qsl_idx"]: r for r in results(tmp_path)}
    assert sorted(recs) == [0, 1, 2, 3] and [i for i in recs if recs[i]["error"]] == [1]


def test_a_route_loop_is_bounded_by_max_visits(tmp_path):
    ok = [{"name": "a", "framework": "toy-stage", "max_visits": 3},
          {"name": "b", "framework": "toy-stage", "options": {"route_to": "a", "route_times": 2}}]
    p = mlharness(tmp_path, toy_manifest(tmp_path, ok, count=4), "--mode", "accuracy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(r["visits"] == {"a": 3, "b": 3} for r in results(tmp_path))
    loop = [{"name": "a", "framework": "toy-stage", "max_visits": 2},
            {"name": "b", "framework": "toy-stage", "options": {"route_to": "a", "route_times": 5}}]
    p = mlharness(tmp_path, toy_manifest(tmp_path, loop, count=4), "--mode", "accuracy")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "stage 'a' failed sample" in p.stderr and "would pass max_visits 2" in p.stderr


@pytest.mark.parametrize(("stages", "field", "words"), [
    ([{"name": "a", "framework": "toy-stage", "workers": 0}], "inputs[0].parameters.stages[0].workers", "must be >= 1"),
    ([{"name": "a", "framework": "toy-stage"}, {"name": "a", "framework": "toy-stage"}],
     "inputs[0].parameters.stages[1].name", "duplicate stage name 'a'"),
    ([{"name": "a", "framework": "no-such"}], "inputs[0].parameters.stages[0].framework", "unknown stage framework"),
    ([{"name": "a", "framework": "toy-stage", "options": {"route_to": "b"}}, {"name": "b", "framework": "toy-stage"}],
     "inputs[0].parameters.stages[0].options.route_to", "not this stage or an earlier one"),
])
def test_a_malformed_stage_list_exits_2_naming_the_field(tmp_path, stages, field, words):
    p = mlharness(tmp_path, toy_manifest(tmp_path, stages, count=4), "--mode", "accuracy")
    assert p.returncode == 2, p.stdout + p.stderr
    assert field in p.stderr and words in p.stderr


def test_a_tensor_predictor_is_a_stage_through_the_adapter(tmp_path):
    """framework echo (any predictor name): before builds item['inputs'], the stage puts item['outputs'], and the
    response LoadGen logs is what the predictor returned (in response.element_type)."""
    stages = [{"name": "a", "framework": "toy-stage"},
              {"name": "model", "framework": "echo", "options": {"sleep_ms": 1}, "workers": 2,
               "before": "import numpy as np\n\ndef before(ctx, item):\n"
                         "    item['inputs'] = [np.array([[item['index'] * 10]], dtype=np.int32)]\n    return item\n"}]
    path = toy_manifest(tmp_path, stages, count=6, postprocess=(
        "def postprocess(ctx, item):\n    item['response'] = item['outputs'][0]\n"
        "    item['result'] = {'echo': int(item['outputs'][0][0][0])}\n    return item\n"))
    p = mlharness(tmp_path, path, "--mode", "accuracy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert {r["qsl_idx"]: r["result"]["echo"] for r in results(tmp_path)} == {i: i * 10 for i in range(6)}
    log = json.loads((tmp_path / "out" / "mlperf_log_accuracy.json").read_text())
    got = {e["qsl_idx"]: int.from_bytes(bytes.fromhex(e["data"]), "little") for e in log}
    assert got == {i: i * 10 for i in range(6)}


def test_a_chat_stage_sends_its_turn_options_and_not_to_the_predictor(tmp_path):
    """framework openai as a stage through the chat engine: options.max_tokens and options.extra_body are the
    stage's per-turn request fields (each request carries them), not options of the predictor (which refuses
    options it does not know), and the answer and its completion tokens land in the item."""
    from tests.helpers.session_server import ChatServer

    with ChatServer() as server:
        stages = [{"name": "generate", "framework": "openai", "workers": 2, "timeout_s": 30,
                   "options": {"endpoints": [server.url], "model": "chat-model", "max_tokens": 7,
                               "extra_body": {"seed": 3, "temperature": 0}},
                   "before": "def before(ctx, item):\n    item['messages'] = [{'role': 'user', 'content': "
                             "'question %d' % item['index']}]\n    return item\n"}]
        path = toy_manifest(tmp_path, stages, count=4, postprocess=(
            "def postprocess(ctx, item):\n    item['response'] = [item['n_tokens']]\n"
            "    item['result'] = {'answer': item['answer']}\n    return item\n"))
        p = mlharness(tmp_path, path, "--mode", "accuracy")
    assert p.returncode == 0, p.stdout + p.stderr
    bodies = [r["body"] for r in server.requests]
    assert bodies and all(b["max_tokens"] == 7 and b["seed"] == 3 and b["temperature"] == 0 for b in bodies), bodies
    asked = {b["messages"][-1]["content"] for b in bodies}
    assert {f"question {i}" for i in range(4)} <= asked
    assert all(r["result"]["answer"] for r in results(tmp_path))


def test_endpoint_sends_the_generating_stages_to_the_server(tmp_path):
    """--endpoint on a pipeline: its generating stage (e2e-rag-qna-random's in-process transformers chat model)
    becomes an openai stage at the server, the other stages stay in-process, and each question's answer prompt
    (over the reranked passages) reaches the server; a pipeline with no generating stage is refused naming the
    field (exit 2)."""
    pytest.importorskip("faiss", reason="needs faiss-cpu (the rag extra)")
    from tests.helpers.judge_server import running_judge
    from tests.helpers.session_server import ChatServer

    with ChatServer() as server, running_judge() as judge:
        env_judge = {**os.environ, "MLHARNESS_JUDGE_URL": judge.url, "MLHARNESS_CACHE": str(tmp_path / "cache")}
        p = subprocess.run([sys.executable, "-m", "mlharness", "run", "--manifest", "e2e-rag-qna-random",
                            "--scenario", "Offline", "--mode", "accuracy", "--endpoint", server.url, "--output",
                            str(tmp_path / "out"), "--no-progress"], capture_output=True, text=True, timeout=200,
                           env=env_judge, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    prompts = [r["body"]["messages"][0]["content"] for r in server.requests]
    assert len(prompts) >= 8 and all(q.startswith("Answer the question based ONLY on the provided documents.")
                                     for q in prompts), prompts[:1]
    assert {r["result"]["answer"] for r in results(tmp_path)} == {"answer 1"}  # the server's, not the tiny LLM's
    # the stage's generation settings came along: its max_new_tokens (8) is each turn's max_tokens
    assert {r["body"].get("max_tokens") for r in server.requests} == {8}, server.requests[0]["body"]
    (tmp_path / "toy").mkdir()
    refused = mlharness(tmp_path / "toy", TOY, "--mode", "accuracy", "--endpoint", server.url)
    assert refused.returncode == 2 and "inputs[0].parameters.stages" in refused.stderr, refused.stderr
    assert "has none" in refused.stderr, refused.stderr


def test_a_stage_begins_the_test_after_warm_up_with_its_state_reset(tmp_path):
    """A stage's optional begin_test runs after the warm-up plays, right before LoadGen's test: the toy stage's call
    count (state kept across samples, as e2e-rag-db's database build) numbers the test's samples 1..N, the warm-up's
    calls not among them."""
    stages = [{"name": "a", "framework": "toy-stage", "options": {"count_calls": True}}]
    path = toy_manifest(tmp_path, stages, count=6, postprocess=(
        "def postprocess(ctx, item):\n    item['response'] = [len(item['trail'])]\n"
        "    item['result'] = {'call': item['calls']['a']}\n    return item\n"))
    doc = yaml.safe_load(path.read_text())
    doc["framework"]["warmup"] = 2
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    p = mlharness(tmp_path, path, "--mode", "accuracy")
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(r["result"]["call"] for r in results(tmp_path)) == list(range(1, 7))


def test_a_response_that_cannot_be_handed_to_loadgen_fails_its_sample_naming_postprocess(tmp_path):
    """A postprocess whose response for one sample is not in response.element_type (['x'] for int32): that sample
    fails naming postprocess and the sample, exit 3, the other samples completed, and no hang (LoadGen is handed
    every sample; before, the sample was never completed and the run waited for it forever)."""
    stages = [{"name": "a", "framework": "toy-stage"}]
    path = toy_manifest(tmp_path, stages, count=6, postprocess=(
        "def postprocess(ctx, item):\n"
        "    item['response'] = ['x'] if item['index'] == 4 else [len(item['trail'])]\n"
        "    item['result'] = {'trail': item['trail']}\n    return item\n"))
    p = mlharness(tmp_path, path, "--mode", "accuracy", timeout=60)
    assert p.returncode == 3, p.stdout + p.stderr
    assert "stage 'postprocess' failed sample 4: ValueError" in p.stderr and "1 of 6 samples failed" in p.stderr
    recs = {r["qsl_idx"]: r for r in results(tmp_path)}
    assert sorted(recs) == list(range(6)) and [i for i in recs if recs[i]["error"]] == [4]
    assert recs[4]["error"]["stage"] == "postprocess" and recs[4]["result"] is None


class _LoadGenRecorder:
    """What the SUT calls of mlperf_loadgen to complete samples, recording each completion (sample id, bytes)."""

    def __init__(self):
        self.completed, self.lock = [], threading.Lock()

    @staticmethod
    def QuerySampleResponse(token, ptr, size, n=None):  # noqa: N802 - LoadGen's name
        return token, size

    def QuerySamplesComplete(self, responses):  # noqa: N802 - LoadGen's name
        with self.lock:
            self.completed.extend(responses)


def test_a_sample_whose_item_cannot_be_read_fails_alone_and_the_batch_goes_on():
    """One batch of four samples, the third's item not in the store (never loaded): it is completed empty and
    recorded as failed naming preprocess and the sample, and the batch's other samples still flow and complete,
    each exactly once (before, the exception left the rest of the batch never completed)."""
    import numpy as np

    from mlharness.kinds.pipeline.flow import Lane
    from mlharness.kinds.pipeline.stage import StageContext, StageSpec
    from mlharness.kinds.pipeline.sut import PipelineSUT
    from mlharness.kinds.pipeline.toy import ToyStage
    from mlharness.loadgen.qsl import SampleStore

    store = SampleStore(4, 1)
    cells = {}
    for i in (0, 1, 3):
        cells[i] = (np.empty((), dtype=object),)
        cells[i][0][()] = {"index": i}
    store.put_all(cells)
    spec = StageSpec("a", "toy-stage", timeout_s=10)
    lanes = [Lane(spec, ToyStage(spec, StageContext(Path("."), Path("."))),
                  after=lambda item: {**item, "response": [len(item["trail"])]})]
    sut = PipelineSUT(lanes, store, {}, {}, np.dtype(np.int32))
    sut._lg = recorder = _LoadGenRecorder()
    sut.start()
    try:
        sut.issue([10, 11, 12, 13], [0, 1, 2, 3])
        deadline = time.monotonic() + 10
        while len(recorder.completed) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        sut.flow.stop()
    assert sorted(t for t, _ in recorder.completed) == [10, 11, 12, 13]  # each exactly once
    assert dict(recorder.completed)[12] == 0 and all(dict(recorder.completed)[t] == 4 for t in (10, 11, 13))
    (failure,) = sut.failures
    assert (failure.stage, failure.sample) == ("preprocess", 2) and "could not be read" in failure.detail


def test_a_chat_turn_past_the_stages_deadline_is_cancelled_and_frees_its_thread(tmp_path):
    """An openai stage whose server answers slowly (two fragments, 2 s before each): the stage's own call gives up
    at its timeout_s, cancelling the turn, and raises naming the stage, instead of blocking its worker thread (and
    the request's engine slot) until the server answers long after the watchdog abandoned it."""
    from mlharness.kinds.pipeline.predictor_stage import PredictorStage
    from mlharness.kinds.pipeline.stage import StageContext, StageError, StageSpec
    from tests.helpers.session_server import ChatServer

    with ChatServer(delay_s=2.0) as server:
        spec = StageSpec("generate", "openai", options={"endpoints": [server.url], "model": "chat-model"},
                         timeout_s=0.5)
        stage = PredictorStage(spec, StageContext(tmp_path, tmp_path))
        stage.load()
        try:
            t0 = time.monotonic()
            with pytest.raises(StageError, match=r"stage 'generate'.*took over 0.5 s \(timeout_s\); it was cancelled"):
                stage.run({"messages": [{"role": "user", "content": "question"}]})
            assert time.monotonic() - t0 < 1.5
        finally:
            stage.close()


def test_a_call_returning_after_its_deadline_changes_nothing_of_its_sample(tmp_path):
    """A stage call past its timeout_s is ended by the watchdog; when the abandoned call returns later, its sample is
    not completed a second time and its record (the visit's leave time, the error) stays as the watchdog wrote it."""
    from mlharness.kinds.pipeline.flow import Flow, Job, Lane
    from mlharness.kinds.pipeline.report import record
    from mlharness.kinds.pipeline.stage import StageContext, StageSpec
    from mlharness.kinds.pipeline.toy import ToyStage

    spec = StageSpec("slow", "toy-stage", options={"delay_ms": 400}, timeout_s=0.1)
    ended: list[tuple[Job, dict]] = []
    flow = Flow([Lane(spec, ToyStage(spec, StageContext(tmp_path, tmp_path)))],
                lambda job: ended.append((job, record(job, 0.0))))
    flow.start()
    try:
        job = Job(7, 0, {"index": 0})
        flow.submit(job)
        time.sleep(0.8)  # past the deadline and past the call's own return
    finally:
        flow.stop()
    assert len(ended) == 1 and ended[0][0] is job
    assert "past its deadline" in job.error.detail
    visit = job.visits[0]
    assert visit.leave - visit.enter < 0.3  # the watchdog's leave, not the late return's (0.4 s)
    assert record(job, 0.0) == ended[0][1]


def test_a_stages_bound_is_its_workers_over_its_median_call_in_the_report_and_the_calibration():
    """One definition of a stage's bound (pipeline_report.stage_bound: workers over the median call), which the
    report's summary and the calibration both read: calls of 10, 10 and 40 ms on 2 workers bound the stage at
    200/s (a mean would say 100/s)."""
    from mlharness.kinds.pipeline.flow import Job, Lane, Visit
    from mlharness.kinds.pipeline.report import stage_bound, summarize
    from mlharness.kinds.pipeline.stage import StageSpec

    jobs = [Job(i, i, {}, visits=[Visit("a", 0.0, 1.0, 1.0 + ms / 1e3)]) for i, ms in enumerate((10, 10, 40))]
    summary = summarize([Lane(StageSpec("a", "toy-stage", workers=2), None)], jobs, 1.0)
    assert summary["stages"][0]["bound_per_s"] == pytest.approx(200.0) == stage_bound(2, 10.0)
    assert summary["slowest_stage_bound_per_s"] == pytest.approx(200.0)
