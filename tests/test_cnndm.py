"""llama3.1-8b on CNN/DailyMail: the official dataset layout, ROUGE as evaluation.py computes it, the token oracle
and the tiny random Llama."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rouge_score")
pytest.importorskip("punkt")

from mlharness.predictors.base import PredictorConfig  # noqa: E402
from mlharness.predictors.generative import TokenRequest  # noqa: E402
from tests.helpers.llm_submission import pattern_values  # noqa: E402

# The official prompt (language/llama3.1-8b/download_cnndm.py), written out here rather than imported.
TEMPLATE = ("Summarize the following news article in 128 tokens. Please output the summary only, without any other "
            "text.\n\nArticle:\n{input}\n\nSummary:")
# The submission checker's patterns for llama3.1-8b (tools/submission/submission_checker/constants.py ACC_PATTERN).
CHECKER = {"rouge1": r".*'rouge1':\s+'?([\d.]+)'?.*", "rouge2": r".*'rouge2':\s+'?([\d.]+)'?.*",
           "rougeL": r".*'rougeL':\s+'?([\d.]+)'?.*", "rougeLsum": r".*'rougeLsum':\s+'?([\d.]+)'?.*",
           "gen_len": r".*'gen_len':\s([\d.]+).*", "tokens_per_sample": r".*'tokens_per_sample':\s([\d.]+).*"}


def checker_values(text: str) -> dict[str, float]:
    return pattern_values(text, CHECKER)


@pytest.fixture(scope="module")
def synth_set(tmp_path_factory) -> Path:
    from mlharness.tasks.cnndm.synth import write_synthetic_cnndm

    return write_synthetic_cnndm(tmp_path_factory.mktemp("cnndm") / "set", count=24, seed=1)


def accuracy_log(path: Path, answers: dict[int, list[int]], repeat: dict[int, list[int]] | None = None) -> Path:
    """An mlperf_log_accuracy.json as LoadGen writes it: uppercase hex of the int32 ids, token_count."""
    entries = []
    for idx, ids in [*answers.items(), *(repeat or {}).items()]:
        entries.append({"seq_id": len(entries), "qsl_idx": idx, "data": np.asarray(ids, "<i4").tobytes().hex().upper(),
                        "token_count": len(ids)})
    path.write_text(json.dumps(entries, indent=4))
    return path


def test_metric_equals_rouge_score_on_an_explicit_sentence_split():
    from rouge_score import rouge_scorer

    from mlharness.tasks.cnndm.metric import summarize

    preds = ["Mr. Smith went to Washington on Monday. He met the U.S. president there.",
             "  The company reported a 3.5 per cent rise. Shares fell!  ",
             "Rain stopped play"]
    refs = ["Mr. Smith travelled to Washington. He met the president on Monday.",
            "The company reported a rise of 3.5 per cent in profits.",
            "Heavy rain stopped play at the stadium. Is this the end?"]
    split_preds = ["Mr. Smith went to Washington on Monday.\nHe met the U.S. president there.",
                   "The company reported a 3.5 per cent rise.\nShares fell!", "Rain stopped play"]
    split_refs = ["Mr. Smith travelled to Washington.\nHe met the president on Monday.",
                  "The company reported a rise of 3.5 per cent in profits.",
                  "Heavy rain stopped play at the stadium.\nIs this the end?"]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    per = [scorer.score(r, p) for r, p in zip(split_refs, split_preds, strict=True)]
    got = summarize(preds, refs, [10, 7, 3])
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        want = round(sum(s[key].fmeasure for s in per) / len(per) * 100, 4)
        assert got[key] == str(want), key
    assert got["gen_len"] == sum(len(p) for p in split_preds) and type(got["gen_len"]) is int
    assert got["gen_num"] == 3 and got["gen_tok_len"] == 20 and got["tokens_per_sample"] == 6.7
    # the split matters for rougeLsum only: joined with spaces the figure differs
    flat = [scorer.score(r.replace("\n", " "), p.replace("\n", " ")) for r, p in zip(split_refs, split_preds,
                                                                                       strict=True)]
    assert round(sum(s["rougeLsum"].fmeasure for s in flat) / 3 * 100, 4) != float(got["rougeLsum"])


def test_synthetic_set_has_the_official_layout(run_cli, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "cnndm"
    proc = run_cli("dataset", "synth", "cnndm", "--out", str(out), "--count", "9")
    assert proc.returncode == 0, proc.stderr
    records = json.loads((out / "cnn_eval.json").read_text())
    edge = json.loads((out / "sample_cnn_eval_5000.json").read_text())
    assert len(records) == 9 and sorted(map(json.dumps, edge)) == sorted(map(json.dumps, records))
    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"), local_files_only=True)
    for rec in records:
        assert list(rec) == ["instruction", "input", "tok_input", "output"]
        assert rec["instruction"] == {"llama": TEMPLATE}
        assert rec["tok_input"] == tokenizer.encode(TEMPLATE.format(input=rec["input"]))
        assert rec["tok_input"][0] == tokenizer.bos_token_id
        assert rec["output"] and rec["output"] not in rec["tok_input"]
    again = run_cli("dataset", "synth", "cnndm", "--out", str(out), "--count", "9")
    assert again.returncode == 2, again.stderr  # an existing set is not overwritten without --force
    # another checkpoint's tokenizer (here the one just written) encodes the prompts and is copied beside them
    other = tmp_path / "other"
    proc = run_cli("dataset", "synth", "cnndm", "--out", str(other), "--count", "3", "--seed", "4",
                   "--tokenizer", str(out / "tokenizer"))
    assert proc.returncode == 0, proc.stderr
    copied = AutoTokenizer.from_pretrained(str(other / "tokenizer"), local_files_only=True)
    for rec in json.loads((other / "cnn_eval.json").read_text()):
        assert rec["tok_input"] == tokenizer.encode(TEMPLATE.format(input=rec["input"])) == copied.encode(
            TEMPLATE.format(input=rec["input"]))


class Recorder:
    """A TokenStream that records the calls and checks the contract's order."""

    def __init__(self):
        self.calls: list[tuple[str, object, float]] = []
        self.finished = threading.Event()

    def first(self, ids):
        self.calls.append(("first", np.asarray(ids).copy(), time.monotonic()))

    def done(self, ids):
        self.calls.append(("done", np.asarray(ids).copy(), time.monotonic()))
        self.finished.set()

    def fail(self, error):
        self.calls.append(("fail", error, time.monotonic()))
        self.finished.set()

    def kinds(self) -> list[str]:
        return [c[0] for c in self.calls]


def oracle(table: Path, **options):
    from mlharness.predictors import PREDICTORS

    p = PREDICTORS.get("token-oracle")(PredictorConfig(model_path=str(table), input_names=["input_ids"],
                                                       output_names=["output_ids"], options=options))
    p.load()
    return p


@pytest.fixture(scope="module")
def table(synth_set, tmp_path_factory) -> Path:
    from mlharness.tasks.cnndm.models import oracle_table

    path = tmp_path_factory.mktemp("oracle") / "table.json"
    path.write_text(json.dumps(oracle_table(synth_set / "cnn_eval.json", synth_set / "tokenizer")))
    return path


def test_oracle_streams_the_reference_ids_and_scores_100(synth_set, table, tmp_path, run_cli):
    from transformers import AutoTokenizer

    from mlharness.tasks.cnndm.dataset import CnnDm

    data = CnnDm(synth_set / "cnn_eval.json")
    tokenizer = AutoTokenizer.from_pretrained(str(synth_set / "tokenizer"), local_files_only=True)
    p = oracle(table)
    streams = [Recorder() for _ in range(len(data))]
    t0 = time.monotonic()
    p.submit([TokenRequest(i, data.prompt(i)) for i in range(len(data))], streams)
    assert time.monotonic() - t0 < 0.5  # submit only enqueues
    assert p.drain(timeout_s=10)
    p.close()
    answers = {}
    for i, s in enumerate(streams):
        assert s.kinds() == ["first", "done"]
        ids = s.calls[1][1]
        assert ids.dtype == np.int32
        want = tokenizer.encode(data.targets[i], add_special_tokens=False) + [tokenizer.eos_token_id]
        assert ids.tolist() == want and s.calls[0][1].tolist() == want[:1]
        answers[i] = ids.tolist()
    log = accuracy_log(tmp_path / "mlperf_log_accuracy.json", answers, repeat={0: [5, 6, 7]})
    proc = run_cli("accuracy", "cnndm", "--log", str(log), "--dataset-file", str(synth_set / "cnn_eval.json"),
                   "--tokenizer", str(synth_set / "tokenizer"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("\nResults\n\n{'rouge1': '100.0', 'rouge2': '100.0', 'rougeL': '100.0', "
                                  "'rougeLsum': '100.0', 'gen_len': ")
    values = checker_values(proc.stdout)
    assert values["rouge1"] == values["rougeLsum"] == 100.0 and "np.int64" not in proc.stdout
    assert values["tokens_per_sample"] == round(sum(map(len, answers.values())) / len(answers), 1)
    assert f"'gen_num': {len(data)}" in proc.stdout  # the repeated sample counts once, its first answer

    # a wrong answer for one sample lowers the score
    answers[3] = answers[4]
    proc = run_cli("accuracy", "cnndm", "--log", str(accuracy_log(tmp_path / "other.json", answers)),
                   "--dataset-file", str(synth_set / "cnn_eval.json"), "--tokenizer", str(synth_set / "tokenizer"))
    assert proc.returncode == 0 and checker_values(proc.stdout)["rouge1"] < 100.0


def test_oracle_options_delays_padding_and_failure(synth_set, table):
    from mlharness.tasks.cnndm.dataset import CnnDm

    data = CnnDm(synth_set / "cnn_eval.json")
    p = oracle(table, first_token_delay_ms=80, token_delay_ms=2, eos_padding=2)
    s = Recorder()
    t0 = time.monotonic()
    p.submit([TokenRequest(0, data.prompt(0))], [s])
    assert p.drain(timeout_s=10)
    ids = s.calls[1][1]
    assert s.calls[0][2] - t0 >= 0.08
    assert s.calls[1][2] - s.calls[0][2] >= 0.002 * (len(ids) - 1) * 0.9
    assert ids[-3:].tolist() == [p.eos_id] * 3 and ids[-4] != p.eos_id
    p.close()

    p = oracle(table, fail_after=3)
    streams = [Recorder(), Recorder()]
    p.submit([TokenRequest(1, data.prompt(1)), TokenRequest(2, np.array([1, 2, 3], np.int32))], streams)
    assert p.drain(timeout_s=10)
    assert streams[0].kinds() == ["first", "fail"] and "after 3 token" in str(streams[0].calls[1][1])
    assert streams[1].kinds() == ["fail"] and "not in the oracle table" in str(streams[1].calls[0][1])
    p.close()

    p = oracle(table, first_token_delay_ms=5000)
    s = Recorder()
    p.submit([TokenRequest(0, data.prompt(0))], [s])
    assert not p.drain(timeout_s=0.05)
    p.close()  # what is still running fails, once
    assert s.kinds() == ["fail"]


def test_random_llama_loads_offline_and_generates(tmp_path, monkeypatch, synth_set):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mlharness.tasks.cnndm.models import ensure_random_llama

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = ensure_random_llama(tmp_path / "llama_random")
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        f.name for f in folder.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    prompt = tokenizer(TEMPLATE.format(input="Mr. Smith said the bridge would reopen."), return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=6, min_new_tokens=2, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1]:]
    assert 2 <= len(new) <= 6 and int(new.max()) < len(tokenizer)
    # the tokenizer is trained afresh for the model and for the synthetic set: the same vocabulary both times
    synth_tokenizer = AutoTokenizer.from_pretrained(str(synth_set / "tokenizer"), local_files_only=True)
    assert tokenizer.get_vocab() == synth_tokenizer.get_vocab() and len(tokenizer) == model.config.vocab_size
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_random_llama(folder) == folder and (folder / "model.safetensors").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("scenario", ["Offline", "Server", "SingleStream", "Interactive"])
def test_oracle_manifest_scores_100_end_to_end(run_cli, tmp_path, scenario):
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", "llama3.1-8b-oracle", "--scenario", scenario, "--mode", "accuracy",
                   "--count", "8", "--output", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = checker_values((out / "accuracy.txt").read_text())
    assert all(values[k] == 100.0 for k in ("rouge1", "rouge2", "rougeL", "rougeLsum")), values


def load(name: str):
    from mlharness.manifest.loader import load_manifest

    return load_manifest(name)


@pytest.mark.parametrize("name, lg_model, benchmark, file", [
    ("llama3.1-8b", "llama3_1-8b", "llama3.1-8b", "cnn_eval.json"),
    ("llama3.1-8b-edge", "llama3_1-8b-edge", "llama3.1-8b-edge", "sample_cnn_eval_5000.json"),
    ("llama3.1-8b-oracle", "llama3_1-8b", "llama3.1-8b", "cnn_eval.json"),
    ("llama3.1-8b-edge-oracle", "llama3_1-8b-edge", "llama3.1-8b-edge", "sample_cnn_eval_5000.json"),
    ("llama3.1-8b-random", "llama3_1-8b", "llama3.1-8b", "cnn_eval.json")])
def test_manifests(name, lg_model, benchmark, file):
    m = load(name).model
    assert (m.mlperf.model, m.mlperf.benchmark) == (lg_model, benchmark)
    assert m.response.element_type == "int32" and m.accuracy.metric == "cnndm_rouge"
    assert m.accuracy.options["dataset_file"] == file and m.accuracy.options["dtype"] == "int32"
    assert m.generation.max_new_tokens == 128 and m.generation.min_new_tokens >= 2


def test_oracle_manifest_through_its_hooks_scores_100(tmp_path, monkeypatch):
    """The oracle manifest as a run uses it, without LoadGen: dataset init, preprocess, the generated table, the
    predictor's streams, the manifest's metric over a log of the streamed ids."""
    load("llama3.1-8b-oracle")
    from mlharness.measurement.direct import DirectModel
    from mlharness.tasks import METRICS
    from mlharness.tasks.base import AccuracyContext

    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    session = DirectModel("llama3.1-8b-oracle", count=10)
    try:
        assert session.load() == 10
        prompts = [session.batch(np.array([i]))[0][0] for i in range(10)]
        assert all(p.dtype == np.int32 and p.ndim == 1 for p in prompts)
        streams = [Recorder() for _ in prompts]
        session.predictor.submit([TokenRequest(i, p) for i, p in enumerate(prompts)], streams)
        assert session.predictor.drain(timeout_s=10)
    finally:
        session.close()
    answers = {i: s.calls[-1][1].tolist() for i, s in enumerate(streams)}
    log = accuracy_log(tmp_path / "mlperf_log_accuracy.json", answers)
    spec = session.loaded.model.accuracy
    result = METRICS.get(spec.metric)().score(log, AccuracyContext(Path(session.ctx["dataset_path"]), 10,
                                                                   dict(spec.options)))
    assert checker_values(result.text) == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0, "rougeLsum": 100.0,
                                           "gen_len": float(result.details["gen_len"]),
                                           "tokens_per_sample": result.details["tokens_per_sample"]}
    assert result.details["gen_num"] == 10


def test_dataset_helper_reads_the_file_the_manifest_names(synth_set, tmp_path):
    from mlharness.errors import DatasetError
    from mlharness.tasks.cnndm.hooks import cnndm_dataset

    ctx = {"dataset_path": str(synth_set), "dataset_attributes": {"file": "cnn_eval.json"},
           "attributes": {"dataset_file": "sample_cnn_eval_5000.json"}}
    edge = cnndm_dataset(ctx)  # the model's attributes.dataset_file (the edge manifest) wins
    edge_records = json.loads((synth_set / "sample_cnn_eval_5000.json").read_text())
    assert [p.tolist() for p in edge.prompts] == [r["tok_input"] for r in edge_records]
    assert ctx["dataset_path"] == str(synth_set)
    ctx = {"dataset_path": str(synth_set / "cnn_eval.json"), "dataset_attributes": {"file": "cnn_eval.json"}}
    full = cnndm_dataset(ctx)  # the file itself as the dataset path
    assert len(full) == 24 and full.prompt(3).dtype == np.int32 and ctx["dataset_path"] == str(synth_set)
    with pytest.raises(DatasetError, match="--dataset-path"):
        cnndm_dataset({"dataset_path": None, "dataset_attributes": {}, "attributes": {}})
    bad = tmp_path / "cnn_eval.json"
    bad.write_text(json.dumps([{"instruction": {}, "input": "a", "output": "b"}]))
    with pytest.raises(DatasetError, match="sample 0 lacks the field.*tok_input"):
        cnndm_dataset({"dataset_path": str(tmp_path), "dataset_attributes": {}, "attributes": {}})


def test_oracle_close_mid_stream_fails_each_running_sample_once(synth_set, table):
    from mlharness.tasks.cnndm.dataset import CnnDm

    data = CnnDm(synth_set / "cnn_eval.json")
    p = oracle(table, token_delay_ms=20)
    streams = [Recorder() for _ in range(6)]
    p.submit([TokenRequest(i, data.prompt(i)) for i in range(6)], streams)
    time.sleep(0.1)  # every sample has its first token, none is done
    p.close()
    assert p.drain(timeout_s=1)
    for s in streams:
        assert s.kinds() == ["first", "fail"], s.kinds()


def test_oracle_builds_its_table_from_a_dataset_option(synth_set):
    from mlharness.predictors import PREDICTORS
    from mlharness.tasks.cnndm.dataset import CnnDm

    data = CnnDm(synth_set / "cnn_eval.json")
    p = PREDICTORS.get("token-oracle")(PredictorConfig(
        model_path=None, input_names=["input_ids"], output_names=["output_ids"],
        options={"dataset": str(synth_set / "cnn_eval.json"), "tokenizer": str(synth_set / "tokenizer")}))
    p.load()
    s = Recorder()
    p.submit([TokenRequest(5, data.prompt(5))], [s])
    assert p.drain(timeout_s=10)
    p.close()
    assert s.kinds() == ["first", "done"] and s.calls[1][1].tolist() == p.answer(data.prompt(5)).tolist()


def test_metric_reads_the_log_loadgen_writes_for_token_streams(synth_set, table, tmp_path):
    """LoadGen itself (Offline, accuracy mode, token latencies on) logs the oracle's streamed ids; the metric
    scores that log 100. The minimal SUT here only forwards the oracle's ids."""
    lg = pytest.importorskip("mlperf_loadgen")
    from mlharness.tasks.cnndm.dataset import CnnDm
    from mlharness.tasks.cnndm.metric import score_log

    data = CnnDm(synth_set / "cnn_eval.json")
    p = oracle(table)
    keep: list[np.ndarray] = []

    class Stream:
        def __init__(self, query_id: int):
            self.query_id = query_id

        def first(self, ids):
            pass

        def done(self, ids):
            keep.append(ids)
            lg.QuerySamplesComplete([lg.QuerySampleResponse(self.query_id, ids.ctypes.data, ids.nbytes, len(ids))])

        def fail(self, error):
            raise AssertionError(error)

    def issue(samples):
        p.submit([TokenRequest(s.index, data.prompt(s.index)) for s in samples], [Stream(s.id) for s in samples])

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Offline
    settings.mode = lg.TestMode.AccuracyOnly
    settings.use_token_latencies = True
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(tmp_path)
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(len(data), len(data), lambda s: None, lambda s: None)
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        p.close()
    entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())
    assert len(entries) == len(data) and all(e["data"] == e["data"].upper() for e in entries)
    result = score_log(tmp_path / "mlperf_log_accuracy.json", synth_set / "cnn_eval.json", synth_set / "tokenizer")
    assert {k: result.details[k] for k in ("rouge1", "rougeLsum", "gen_num")} == {
        "rouge1": "100.0", "rougeLsum": "100.0", "gen_num": len(data)}
    assert result.details["gen_tok_len"] == sum(len(k) for k in keep)
