"""SQuAD logs that do not hold every feature score as the official accuracy-squad.py scores them: every question
of the dataset counts, one without any logged feature is answered "empty" (0), and the line is the official one;
the fully logged questions are given on a second line labelled as a subset that no checker pattern reads.

The expected figures come from an independent implementation of the official rule (evaluate-v1.1.py over every
question of dev-v1.1.json, in tests/helpers/squad_official.py), not from mlharness's scorer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.submission.rules import ACC_PATTERNS
from mlharness.tasks.squad import dataset as squad
from mlharness.tasks.squad import models as squad_models
from mlharness.tasks.squad import synth as squad_synth
from tests.helpers.squad_official import official_line

QUESTIONS = 24


def _no_pattern_reads(line: str) -> bool:
    return not any(re.match(p, line) for p in ACC_PATTERNS.values()) and "Accuracy:" not in line


@pytest.fixture(scope="module")
def oracle_logits(tmp_path_factory: pytest.TempPathFactory):
    """(dataset folder, features, per-feature (L, 2) oracle logits) on the synthetic set, without LoadGen."""
    import onnxruntime as ort

    root = squad_synth.write_synthetic_squad(tmp_path_factory.mktemp("squad"), count=QUESTIONS)
    features = squad.load_features(root / "dev-v1.1.json", root / "vocab.txt",
                                   cache=tmp_path_factory.mktemp("cache"))
    session = ort.InferenceSession(str(squad_models.ensure_oracle_model(root / "oracle.onnx")))
    start, end = session.run(None, dict(zip(squad_models.INPUT_NAMES, (
        features.input_ids.astype(np.int64), features.input_mask.astype(np.int64),
        features.segment_ids.astype(np.int64)), strict=True)))
    return root, features, np.stack([start, end], axis=-1).astype(np.float32)


def test_every_third_entry_dropped_scores_every_question(run_cli, oracle_logits, tmp_path: Path) -> None:
    root, features, logits = oracle_logits
    n = len(features)
    for seed in range(100):  # an Offline log's order is shuffled; drop every third entry of it, the last feature too
        order = np.random.default_rng(seed).permutation(n).tolist()
        order.remove(n - 1)
        order.insert(2, n - 1)
        kept = [f for i, f in enumerate(order) if i % 3 != 2]
        complete = [e for e in range(QUESTIONS) if set(np.flatnonzero(features.example_index == e)) <= set(kept)]
        if complete:
            break
    assert max(kept) < n - 1 and 0 < len(complete) < QUESTIONS
    log = tmp_path / "mlperf_log_accuracy.json"  # entries without seq_id: the official script never reads it
    log.write_text(json.dumps([{"qsl_idx": f, "data": logits[f].tobytes().hex().upper()} for f in kept]))
    proc = run_cli("accuracy", "squad", "--log", str(log), "--val-data", str(root / "dev-v1.1.json"), "--vocab",
                   str(root / "vocab.txt"), "--out-file", str(tmp_path / "predictions.json"))
    assert proc.returncode == 0, proc.stderr
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    dev = json.loads((root / "dev-v1.1.json").read_text())
    first, second = proc.stdout.splitlines()
    assert first == official_line(dev, predictions)  # byte for byte the official line
    assert re.match(ACC_PATTERNS["F1"], first)
    # every question has an answer (the official script answers one without a usable span "empty")
    ids = [qa["id"] for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert list(predictions) == ids
    assert json.loads(first)["f1"] < 100.0  # the dropped features cost answers over the whole dataset
    # the questions whose every feature was logged, as a labelled subset that no checker reads as the figure
    subset = {q: predictions[q] for i, q in enumerate(ids) if i in complete}
    sub = json.loads(official_line({"data": [{"paragraphs": [{"qas": [
        qa for a in dev["data"] for p in a["paragraphs"] for qa in p["qas"] if qa["id"] in subset]}]}]}, subset))
    assert second == (f"subset of {len(complete)} of {QUESTIONS} questions, not comparable: exact_match "
                      f"{sub['exact_match']:.3f}, f1 {sub['f1']:.3f} over the questions whose every feature was logged")
    assert _no_pattern_reads(second)


def test_full_log_prints_only_the_official_line(run_cli, oracle_logits, tmp_path: Path) -> None:
    root, features, logits = oracle_logits
    log = tmp_path / "mlperf_log_accuracy.json"
    entries = [{"seq_id": f, "qsl_idx": f, "data": logits[f].tobytes().hex()} for f in range(len(features))]
    # a repeated sample: the later response counts, as in the official script
    entries.append({"seq_id": len(entries), "qsl_idx": 0, "data": logits[0].tobytes().hex()})
    log.write_text(json.dumps(entries))
    proc = run_cli("accuracy", "squad", "--log", str(log), "--val-data", str(root / "dev-v1.1.json"), "--vocab",
                   str(root / "vocab.txt"), "--out-file", str(tmp_path / "predictions.json"))
    assert proc.returncode == 0, proc.stderr
    predictions = json.loads((tmp_path / "predictions.json").read_text())
    dev = json.loads((root / "dev-v1.1.json").read_text())
    assert proc.stdout == official_line(dev, predictions) + "\n" == '{"exact_match": 100.0, "f1": 100.0}\n'


def test_empty_log_scores_zero_like_the_official_script(run_cli, oracle_logits, tmp_path: Path) -> None:
    root, _, _ = oracle_logits
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]")
    proc = run_cli("accuracy", "squad", "--log", str(log), "--val-data", str(root / "dev-v1.1.json"), "--vocab",
                   str(root / "vocab.txt"), "--out-file", str(tmp_path / "predictions.json"))
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert first == '{"exact_match": 0.0, "f1": 0.0}'
    assert second.startswith(f"subset of 0 of {QUESTIONS} questions, not comparable") and _no_pattern_reads(second)
