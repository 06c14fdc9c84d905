"""qwen3.6-27b end to end, with the commands users take: the session oracle's SingleStream performance run is VALID
and its accuracy run scores BFCL v4 exactly 100; the tiny random Qwen3.6 (in-process transformers, its chat template
with tools) completes a performance run with every turn recorded and an accuracy run with a low, real score. Without
--dataset-path both use the synthetic folder in the cache (synthetic BFCL v4 entries and a small agentic trace). The
BFCL scores need bfcl-eval's environment (MLHARNESS_BFCL_PYTHON, which .ci/run sets)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mlharness.kinds.sessions.records import read_records
from mlharness.kinds.sessions.report import ms_text
from tests.helpers.cli import cli

pytest.importorskip("mlperf_loadgen")
needs_bfcl = pytest.mark.skipif(not os.environ.get("MLHARNESS_BFCL_PYTHON"),
                                reason="MLHARNESS_BFCL_PYTHON (bfcl-eval's environment) is not set")

SYNTHETIC_TURNS = 4  # turns of each synthetic agentic session (mlharness.tasks.qwen36.synth.AGENTIC_TURNS)


def _run(env: dict[str, str], out: Path, manifest: str, mode: str, *extra: str) -> Path:
    proc = cli(env, "run", "--manifest", manifest, "--scenario", "SingleStream", "--mode", mode,
               "--output", str(out), *extra, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (out.parent / f"{out.name}.stdout").write_text(proc.stdout)
    return out


def _log(out: Path) -> list[dict]:
    return [{"qsl_idx": e["qsl_idx"], **json.loads(bytes.fromhex(e["data"]).decode("utf-8"))}
            for e in json.loads((out / "mlperf_log_accuracy.json").read_text())]


def test_the_oracle_runs_singlestream_valid_over_the_agentic_sessions(env, tmp_path):
    """The round's settings play each agentic session once, as the reference does; LoadGen's own line reads INVALID
    for early stopping alone (64 sessions), which the round waives for this benchmark, and mlharness says so."""
    out = _run(env, tmp_path / "perf", "qwen3.6-27b-oracle", "performance", "--min-duration-ms", "0")
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert re.search(r"^Result is : INVALID\n.*: Yes\n.*: Yes\n  Early stopping satisfied: NO$", summary, re.M), summary
    records = read_records(out / "sessions.jsonl")
    # one permutation of the loaded sessions, each a whole agentic session answered as recorded
    assert sorted(r.session for r in records) == [f"synth-0-{k:03d}" for k in range(4)]
    assert all(r.ok and len(r.turns) == SYNTHETIC_TURNS and not any(t.error or t.diverged for t in r.turns)
               for r in records)
    assert all(r.turns[0].tool_calls >= 1 for r in records)  # the recorded first answers call the bash tool
    detail = (out / "mlperf_log_detail.txt").read_text()
    assert '"requested_min_query_count", "value": 1' in detail
    assert '"effective_sample_concatenate_permutation", "value": true' in detail
    # the terminal says what the sessions measured, from sessions_summary.json, and the verdict under the round
    printed = re.sub(r"[ \t]+", " ", (tmp_path / "perf.stdout").read_text())
    assert "VALID (early stopping waived; LoadGen's line: INVALID)" in printed, printed
    assert "early stopping waived for qwen3.6-27b results" in " ".join(printed.split()), printed
    figures = json.loads((out / "sessions_summary.json").read_text())
    assert f"sessions {len(records)} ok, 0 failed, {SYNTHETIC_TURNS * len(records)} turns" in printed, printed
    assert f"session latency p90 {ms_text(figures['session_latency_ms']['p90'])} ms" in printed
    assert re.search(r"^ ?per turn TTFT p90 [\d,.e-]+ ms", printed, re.M), printed
    assert "goodput" not in printed  # no service levels were given


@needs_bfcl
def test_the_oracle_scores_bfcl_v4_exactly_its_maximum(env, tmp_path):
    out = _run(env, tmp_path / "acc", "qwen3.6-27b-oracle", "accuracy")
    text = (out / "accuracy.txt").read_text()
    assert text.splitlines()[0] == "mAP=100.0", text
    log = _log(out)
    # accuracy mode plays the BFCL sessions (one one-turn session per entry of the MLPerf selection), once each
    assert sorted(e["qsl_idx"] for e in log) == list(range(len(log))) and len(log) == 36
    assert all(len(e["answers"]) == 1 for e in log)
    assert sum(bool(e["answers"][0]["tool_calls"]) for e in log) >= 24  # irrelevance entries answer in text


def test_the_random_model_plays_every_turn_of_its_sessions(env, tmp_path):
    out = _run(env, tmp_path / "rperf", "qwen3.6-27b-random", "performance", "--min-duration-ms", "100",
               "--min-query-count", "4")
    records = read_records(out / "sessions.jsonl")
    assert len(records) >= 4 and all(r.ok and len(r.turns) == SYNTHETIC_TURNS for r in records)
    for r in records:
        prompts = [t.prompt_tokens for t in r.turns]
        # each turn's history holds the earlier ones (recorded history): the prompts grow, counted by the tokenizer
        assert all(p and q and q > p for p, q in zip(prompts, prompts[1:], strict=False)), prompts
        assert all(1 <= t.completion_tokens <= 8 and t.sent <= t.first <= t.done for t in r.turns)
    assert {e["session"] for e in _log(out)} <= {r.session for r in records}


@needs_bfcl
def test_the_random_model_scores_bfcl_v4_low_but_scores(env, tmp_path):
    out = _run(env, tmp_path / "racc", "qwen3.6-27b-random", "accuracy", "--count", "12")
    text = (out / "accuracy.txt").read_text()
    figure = float(re.search(r"overall_accuracy=([\d.]+)", text).group(1))
    assert 0.0 <= figure < 100.0, text
    breakdown = json.loads(text.splitlines()[1])
    assert breakdown["total_samples"] == 12 and breakdown["overall_accuracy"] == figure


def test_the_run_mode_chooses_the_sessions_unless_a_manifest_says(env, monkeypatch):
    from mlharness.errors import DatasetError
    from mlharness.tasks.qwen36.hooks import chosen_sessions, qwen36_dataset

    monkeypatch.setenv("MLHARNESS_CACHE", env["MLHARNESS_CACHE"])
    synthetic = {"attributes": {"synthetic_qwen36": True}}
    acc = qwen36_dataset({**synthetic, "mode": "accuracy"})
    perf = qwen36_dataset({**synthetic, "mode": "performance"})
    assert (acc.kind, len(acc), acc.session(0).meta["source"]) == ("bfcl", 36, "bfcl_v4")
    assert (perf.kind, len(perf), len(perf.session(0).turns)) == ("agentic", 4, SYNTHETIC_TURNS)
    ctx = {**synthetic, "mode": "accuracy", "dataset_attributes": {"sessions": "agentic"}}
    assert qwen36_dataset(ctx).kind == "agentic" and ctx["dataset_path"].endswith("agentic_coding_2.5h.jsonl")
    assert chosen_sessions({"mode": "performance", "attributes": {"qwen36_sessions": "bfcl"},
                            "dataset_attributes": {"sessions": "agentic"}}) == "bfcl"
    with pytest.raises(DatasetError, match="attributes.qwen36_sessions is 'both'; use one of by_mode, bfcl"):
        chosen_sessions({"attributes": {"qwen36_sessions": "both"}})
    with pytest.raises(DatasetError, match="needs --dataset-path for its performance sessions"):
        qwen36_dataset({"mode": "performance"})


def test_dataset_synth_writes_the_folder_the_test_models_use(env, tmp_path, monkeypatch):
    from mlharness.tasks.qwen36.synth import ensure_synthetic_qwen36, synthetic_dir

    monkeypatch.setenv("MLHARNESS_CACHE", env["MLHARNESS_CACHE"])
    proc = cli(env, "dataset", "synth", "qwen3.6-27b", "--out", str(tmp_path / "synth"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cache = ensure_synthetic_qwen36(synthetic_dir())
    written = sorted(p.relative_to(tmp_path / "synth") for p in (tmp_path / "synth").rglob("*") if p.is_file())
    assert Path("agentic_coding_2.5h.jsonl") in written and Path("data/BFCL_v4_simple_python.json") in written
    for rel in written:  # the same bytes: the oracle's table answers a run given this folder as --dataset-path
        assert (tmp_path / "synth" / rel).read_bytes() == (cache / rel).read_bytes(), rel
