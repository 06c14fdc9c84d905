"""The generic accuracy metrics, each against a value computed here independently of mlharness."""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mlharness.tasks import METRICS
from mlharness.tasks.base import AccuracyContext


def _log(path: Path, responses: list[tuple[int, bytes]]) -> Path:
    path.write_text(json.dumps([{"seq_id": s, "qsl_idx": i, "data": d.hex().upper()}
                                for s, (i, d) in enumerate(responses)]))
    return path


def _score(name: str, log: Path, root: Path, **options):
    return METRICS.get(name)().score(log, AccuracyContext(dataset_path=root, count=0, options=options))


def test_top1_and_top5_of_score_vectors_with_file_label_lines(tmp_path):
    rng = np.random.default_rng(1)
    n, classes = 40, 12
    names = [f"s{i:03d}.jpg" for i in range(n)]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    truth = rng.integers(classes, size=n)
    order = rng.permutation(n)  # the labels file lists the files in another order: matched by name
    (tmp_path / "labels.txt").write_text("".join(f"{names[i]} {truth[i]}\n" for i in order))
    scores = rng.random((n, classes)).astype(np.float32)
    responses = [(i, scores[i].tobytes()) for i in range(n)]
    responses.append((0, np.eye(classes, dtype=np.float32)[(truth[0] + 1) % classes].tobytes()))  # repeat: ignored
    log = _log(tmp_path / "log.json", responses)
    good1 = sum(int(max(range(classes), key=lambda c: scores[i][c]) == truth[i]) for i in range(n))
    good5 = sum(int(truth[i] in sorted(range(classes), key=lambda c: -scores[i][c])[:5]) for i in range(n))
    r1 = _score("top1", log, tmp_path)
    assert r1.text == f"accuracy={100.0 * good1 / n:.3f}%, good={good1}, total={n}\n"
    r5 = _score("top5", log, tmp_path)
    assert r5.text == f"top5_accuracy={100.0 * good5 / n:.3f}%, good={good5}, total={n}\n"
    assert good5 > good1


def test_top1_of_labels_as_values_csv_and_class_names(tmp_path):
    truth = [3, 1, 4, 1, 5, 9]
    predicted = [3, 1, 0, 1, 5, 2]
    (tmp_path / "labels.csv").write_text("file,label\n" + "".join(f"f{i},n{t:04d}\n" for i, t in enumerate(truth)))
    (tmp_path / "synset.txt").write_text("".join(f"n{k:04d} class number {k}\n" for k in range(10)))
    log = _log(tmp_path / "log.json", [(i, np.array([p], np.int64).tobytes()) for i, p in enumerate(predicted)])
    good = sum(p == t for p, t in zip(predicted, truth, strict=True))
    r = _score("top1", log, tmp_path, labels="labels.csv", features="synset.txt", dtype="int64")
    assert r.text == f"accuracy={100.0 * good / len(truth):.3f}%, good={good}, total={len(truth)}\n"
    with pytest.raises(Exception, match="class names"):
        _score("top1", log, tmp_path, labels="labels.csv", dtype="int64")


def test_label_offset_skips_a_background_class(tmp_path):
    (tmp_path / "labels.txt").write_text("2\n0\n")
    scores = np.zeros((2, 4), np.float32)
    scores[0, 3] = scores[1, 1] = 1  # background first: position 3 is class 2, position 1 is class 0
    log = _log(tmp_path / "log.json", [(0, scores[0].tobytes()), (1, scores[1].tobytes())])
    assert _score("top1", log, tmp_path, label_offset=-1).value == 100.0
    assert _score("top1", log, tmp_path).value == 0.0


def _normalise(text: str) -> list[str]:
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return re.sub(r"\b(a|an|the)\b", " ", text).split()


def _f1(pred: str, truth: str) -> float:
    p, t = _normalise(pred), _normalise(truth)
    same = sum((Counter(p) & Counter(t)).values())
    return 0.0 if same == 0 else 2 * (same / len(p)) * (same / len(t)) / (same / len(p) + same / len(t))


def test_exact_match_and_token_f1(tmp_path):
    answers = ["The Eiffel Tower", "Paris, France", "1889", "gustave eiffel"]
    predicted = ["eiffel tower", "Paris", "in 1889", "Gustave Eiffel!"]
    (tmp_path / "labels.txt").write_text("\n".join(answers) + "\n")
    log = _log(tmp_path / "log.json", [(i, p.encode()) for i, p in enumerate(predicted)])
    em = 100.0 * sum(_normalise(p) == _normalise(a) for p, a in zip(predicted, answers, strict=True)) / 4
    f1 = 100.0 * sum(_f1(p, a) for p, a in zip(predicted, answers, strict=True)) / 4
    r = _score("exact_match", log, tmp_path)
    assert r.value == pytest.approx(em) and em == 50.0
    assert json.loads(r.text) == pytest.approx({"exact_match": em, "f1": f1})
    assert _score("token_f1", log, tmp_path).value == pytest.approx(f1)


def test_mean_absolute_and_squared_error(tmp_path):
    targets = [1.5, -2.0, 0.25, 10.0]
    predicted = [1.0, -2.5, 0.25, 12.0]
    (tmp_path / "labels.txt").write_text("\n".join(map(str, targets)) + "\n")
    log = _log(tmp_path / "log.json", [(i, np.array([p], np.float32).tobytes()) for i, p in enumerate(predicted)])
    mae = sum(abs(p - t) for p, t in zip(predicted, targets, strict=True)) / 4
    mse = sum((p - t) ** 2 for p, t in zip(predicted, targets, strict=True)) / 4
    assert _score("mean_absolute_error", log, tmp_path).text == f"mae={mae:.6f}, total=4\n"
    assert _score("mean_squared_error", log, tmp_path).text == f"mse={mse:.6f}, total=4\n"


def test_detection_map_half_the_objects_found(tmp_path):
    """Two images with one object each; a perfect box on the first, nothing on the second: recall reaches 0.5
    at precision 1, so COCO's 101-point AP is 51/101 at every IoU threshold."""
    from mlharness.tasks.detection.boxes import encode

    images = [{"id": 1, "file_name": "a.jpg", "height": 100, "width": 200},
              {"id": 2, "file_name": "b.jpg", "height": 100, "width": 200}]
    anns = [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [20, 10, 80, 40], "area": 3200, "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 3, "bbox": [50, 50, 60, 30], "area": 1800, "iscrowd": 0}]
    (tmp_path / "ann.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                   "categories": [{"id": 3, "name": "car"}]}))
    box = np.array([[10 / 100, 20 / 200, 50 / 100, 100 / 200]])  # ymin, xmin, ymax, xmax, normalised
    log = _log(tmp_path / "log.json", [(0, encode(0, box, [0.9], [3]).tobytes()), (1, b"")])
    r = _score("detection_map", log, tmp_path, annotations="ann.json")
    assert r.text.splitlines()[0] == f"mAP={100.0 * 51 / 101:.3f}%"


def test_the_accuracy_command(run_cli, tmp_path):
    (tmp_path / "labels.txt").write_text("0\n1\n1\n")
    log = _log(tmp_path / "log.json", [(i, np.array([p], np.float32).tobytes()) for i, p in enumerate([0, 1, 0])])
    proc = run_cli("accuracy", "generic", "--metric", "top1", "--log", str(log), "--labels",
                   str(tmp_path / "labels.txt"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"accuracy={200 / 3:.3f}%, good=2, total=3\n"


def test_generic_metrics_are_registered():
    for name in ("top1", "top5", "exact_match", "token_f1", "mean_absolute_error", "mean_squared_error",
                 "detection_map"):
        assert name in METRICS.names() and METRICS.get(name).name == name
