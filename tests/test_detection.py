"""Object detection in process: the mAP metric against pycocotools called directly, the official scripts'
log handling (duplicates, empty responses, payload index), the synthetic sets' layout, and the oracles through
the reference pre/post-processing — exactly 100% when everything is right, far less for each mistake the
oracle exists to catch (shifted boxes, labels off by one, x/y swapped, BGR input, no 80 -> 91 map)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks import METRICS
from mlharness.tasks.base import AccuracyContext
from mlharness.tasks.coco import dataset as coco_dataset
from mlharness.tasks.coco import models as coco_models
from mlharness.tasks.coco import postprocess as coco_post
from mlharness.tasks.coco import preprocess as coco_pre
from mlharness.tasks.coco import synth as coco_synth
from mlharness.tasks.coco.metric import CocoMapMetric
from mlharness.tasks.detection.boxes import COCO_80_TO_91, decode, encode
from mlharness.tasks.openimages import dataset as oi_dataset
from mlharness.tasks.openimages import models as oi_models
from mlharness.tasks.openimages import postprocess as oi_post
from mlharness.tasks.openimages import preprocess as oi_pre
from mlharness.tasks.openimages import synth as oi_synth
from mlharness.tasks.openimages.metric import OpenImagesMapMetric

COUNT = 12


def write_log(path: Path, responses: list[tuple[int, np.ndarray]]) -> Path:
    """An mlperf_log_accuracy.json with one entry per (qsl_idx, float32 response)."""
    entries = [{"seq_id": i, "qsl_idx": int(q), "data": np.asarray(r, np.float32).tobytes().hex().upper()}
               for i, (q, r) in enumerate(responses)]
    path.write_text(json.dumps(entries))
    return path


def pycocotools_map(gt_doc: dict, detections: list[dict], image_ids: list[int]) -> float:
    """stats[0] computed here with pycocotools alone, independently of mlharness."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = json.loads(json.dumps(gt_doc))
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(detections), iouType="bbox")
        ev.params.imgIds = image_ids
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return 100.0 * float(ev.stats[0])


# -- the metric ----------------------------------------------------------------------------------------------------

FIXED_GT = {
    "images": [{"id": 7, "file_name": "a.jpg", "height": 200, "width": 400},
               {"id": 3, "file_name": "b.jpg", "height": 300, "width": 300},
               {"id": 11, "file_name": "c.jpg", "height": 100, "width": 250}],
    "categories": [{"id": 0, "name": "zero"}, {"id": 5, "name": "five"}, {"id": 9, "name": "nine"}],
    "annotations": [
        {"id": 1, "image_id": 7, "category_id": 0, "bbox": [10, 20, 100, 80], "area": 8000, "iscrowd": 0},
        {"id": 2, "image_id": 7, "category_id": 5, "bbox": [200, 50, 150, 100], "area": 15000, "iscrowd": 0},
        {"id": 3, "image_id": 3, "category_id": 9, "bbox": [30, 30, 200, 120], "area": 24000, "iscrowd": 0},
        {"id": 4, "image_id": 3, "category_id": 0, "bbox": [0, 160, 90, 130], "area": 11700, "iscrowd": 0},
        {"id": 5, "image_id": 11, "category_id": 5, "bbox": [40, 10, 60, 50], "area": 3000, "iscrowd": 0},
    ],
}
# (qsl_idx, x, y, w, h, score, category) in pixels: some exact, some off, one false positive, one miss
FIXED_DETECTIONS = [
    (0, 10, 20, 100, 80, 0.9, 0), (0, 210, 55, 140, 90, 0.8, 5), (0, 50, 60, 60, 60, 0.7, 9),
    (1, 30, 30, 200, 120, 0.95, 9), (1, 5, 150, 100, 140, 0.4, 0), (1, 100, 100, 50, 50, 0.3, 5),
    (2, 45, 12, 50, 45, 0.6, 5),
]


def fixed_set(tmp_path: Path) -> tuple[Path, list[tuple[int, np.ndarray]]]:
    root = tmp_path / "fixed"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(FIXED_GT))
    responses: dict[int, list[np.ndarray]] = {}
    for q, x, y, w, h, score, cat in FIXED_DETECTIONS:
        im = FIXED_GT["images"][q]
        box = np.array([[y / im["height"], x / im["width"], (y + h) / im["height"], (x + w) / im["width"]]])
        responses.setdefault(q, []).append(encode(q, box, [score], [cat]))
    return root, [(q, np.concatenate(parts)) for q, parts in sorted(responses.items())]


def test_metric_equals_pycocotools_directly(tmp_path):
    root, responses = fixed_set(tmp_path)
    log = write_log(tmp_path / "acc.json", responses)
    result = CocoMapMetric().score(log, AccuracyContext(root, 3, {}))
    detections = []
    for q, x, y, w, h, score, cat in FIXED_DETECTIONS:
        detections.append({"image_id": FIXED_GT["images"][q]["id"], "category_id": cat, "bbox": [x, y, w, h],
                           "score": score})
    expected = pycocotools_map(FIXED_GT, detections, [7, 3, 11])
    assert 20 < expected < 95  # a set with real misses, so the comparison means something
    assert result.value == pytest.approx(expected, abs=1e-9)
    assert result.text.splitlines()[0] == f"mAP={expected:.3f}%"
    assert "Average Precision  (AP) @[ IoU=0.50:0.95" in result.text  # pycocotools' summary, as the script prints
    assert result.details["detections"] == len(FIXED_DETECTIONS)
    # the same log scored as OpenImages (same computation, other annotation path) through the registry
    oi_root = tmp_path / "oi"
    (oi_root / "annotations").mkdir(parents=True)
    (oi_root / "annotations" / "openimages-mlperf.json").write_text(json.dumps(FIXED_GT))
    assert METRICS.get("openimages_map")().score(log, AccuracyContext(oi_root, 3, {})).value == result.value


def test_metric_dedupes_counts_empty_responses_and_flags_payload_index(tmp_path):
    root, responses = fixed_set(tmp_path)
    empty = np.zeros(0, np.float32)
    # image 2 answered empty first (counted as "no results"), then again with a detection (a dupe: ignored)
    log = write_log(tmp_path / "acc.json", [responses[0], responses[1], (2, empty), responses[2]])
    result = CocoMapMetric().score(log, AccuracyContext(root, 3, {}))
    detections = [{"image_id": FIXED_GT["images"][q]["id"], "category_id": c, "bbox": [x, y, w, h], "score": s}
                  for q, x, y, w, h, s, c in FIXED_DETECTIONS if q != 2]
    assert result.value == pytest.approx(pycocotools_map(FIXED_GT, detections, [7, 3, 11]), abs=1e-9)
    assert result.details["no_results"] == 1 and result.details["dupes"] == 1
    # a payload whose first float is not LoadGen's qsl_idx: the script's ERROR line, the score unchanged
    wrong = responses[0][1].copy()
    wrong[0] = 2
    result2 = CocoMapMetric().score(write_log(tmp_path / "b.json", [(0, wrong), *responses[1:]]),
                                    AccuracyContext(root, 3, {}))
    assert "ERROR: loadgen(0) and payload(2) disagree on image_idx" in result2.text


def test_metric_errors_name_the_file(tmp_path):
    root, responses = fixed_set(tmp_path)
    with pytest.raises(AccuracyError, match="qsl_idx 5, outside the 3 images"):
        CocoMapMetric().score(write_log(tmp_path / "a.json", [(5, responses[0][1])]), AccuracyContext(root, 3, {}))
    nothing = CocoMapMetric().score(write_log(tmp_path / "b.json", [(0, np.zeros(0))]), AccuracyContext(root, 3, {}))
    assert nothing.value == 0.0 and nothing.text.startswith("mAP=0.000%\n")  # no detection at all: every AP is 0
    with pytest.raises(AccuracyError, match="annotations file .*openimages-mlperf.json not found"):
        OpenImagesMapMetric().score(write_log(tmp_path / "c.json", responses), AccuracyContext(root, 3, {}))


# -- synthetic sets and oracles --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def coco_set(tmp_path_factory) -> Path:
    return coco_synth.write_synthetic_coco(tmp_path_factory.mktemp("coco"), COUNT)


@pytest.fixture(scope="module")
def oi_set(tmp_path_factory) -> Path:
    return oi_synth.write_synthetic_openimages(tmp_path_factory.mktemp("oi"), COUNT)


def test_synthetic_sets_have_the_official_layout(coco_set, oi_set):
    doc = json.loads((coco_set / "annotations" / "instances_val2017.json").read_text())
    assert [c["id"] for c in doc["categories"]] == list(COCO_80_TO_91)
    assert [im["file_name"] for im in doc["images"]][:2] == ["000000000139.jpg", "000000000176.jpg"]
    assert all((coco_set / "val2017" / im["file_name"]).is_file() for im in doc["images"])
    assert {a["category_id"] for a in doc["annotations"]} <= set(COCO_80_TO_91)
    assert not any(a["image_id"] == doc["images"][4]["id"] for a in doc["annotations"])  # an empty image
    doc = json.loads((oi_set / "annotations" / "openimages-mlperf.json").read_text())
    assert [c["id"] for c in doc["categories"]] == list(range(264))
    assert all((oi_set / "validation" / "data" / im["file_name"]).is_file() for im in doc["images"])
    assert 0 in {a["category_id"] for a in doc["annotations"]}
    images = oi_dataset.validation_images(oi_set, 5)
    assert len(images) == 5 and images.sizes[0] == (doc["images"][0]["height"], doc["images"][0]["width"])
    (oi_set / "validation" / "data" / doc["images"][1]["file_name"]).rename(oi_set / "moved.jpg")
    try:
        with pytest.raises(DatasetError, match="1 image\\(s\\) listed in .* are missing"):
            oi_dataset.validation_images(oi_set)
    finally:
        (oi_set / "moved.jpg").rename(oi_set / "validation" / "data" / doc["images"][1]["file_name"])


def _session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def yolo_outputs(coco_set, tmp_path_factory):
    """The YOLO oracle's raw output0 per sample, after the reference letterbox (and after a BGR one)."""
    sess = _session(coco_models.ensure_oracle_model(tmp_path_factory.mktemp("m") / "yolo_oracle_640.onnx"))
    images = coco_dataset.validation_images(coco_set)
    rgb, bgr = [], []
    for f in images.files:
        x = coco_pre.yolo_file(f)
        rgb.append(sess.run(None, {"images": x[None]})[0])
        bgr.append(sess.run(None, {"images": np.ascontiguousarray(x[::-1])[None]})[0])
    return images, rgb, bgr


@pytest.fixture(scope="module")
def retinanet_responses(oi_set, tmp_path_factory):
    sess = _session(oi_models.ensure_oracle_model(tmp_path_factory.mktemp("m") / "retinanet_oracle_800.onnx"))
    images = oi_dataset.validation_images(oi_set)
    return [oi_post.retinanet_batch(sess.run(None, {"images": oi_pre.retinanet_file(f)[None]}), [i])[0]
            for i, f in enumerate(images.files)]


def _score(metric, root: Path, tmp_path: Path, responses: list[np.ndarray], name: str) -> float:
    log = write_log(tmp_path / f"{name}.json", list(enumerate(responses)))
    return metric.score(log, AccuracyContext(root, len(responses), {})).value


def _perturb(responses: list[np.ndarray], how: str) -> list[np.ndarray]:
    out = []
    for r in responses:
        d = decode(r.tobytes()).copy()
        if how == "shift":  # boxes moved right by half their width
            w = d[:, 4] - d[:, 2]
            d[:, 2] += w / 2
            d[:, 4] += w / 2
        elif how == "label":
            d[:, 6] += 1
        elif how == "swap":
            d[:, [1, 2, 3, 4]] = d[:, [2, 1, 4, 3]]
        out.append(d.reshape(-1))
    return out


def test_yolo_oracle_scores_100_and_mistakes_drop_it(coco_set, yolo_outputs, tmp_path):
    images, rgb, bgr = yolo_outputs
    responses = [coco_post.yolo_batch(o, [i], images.sizes)[0] for i, o in enumerate(rgb)]
    lengths = {len(r) // 7 for r in responses}
    assert 0 in lengths and len(lengths) >= 3  # variable-size responses, one empty image
    metric = CocoMapMetric()
    assert _score(metric, coco_set, tmp_path, responses, "ok") == 100.0
    for how in ("shift", "label", "swap"):
        assert _score(metric, coco_set, tmp_path, _perturb(responses, how), how) < 60, how
    wrong_input = [coco_post.yolo_batch(o, [i], images.sizes)[0] for i, o in enumerate(bgr)]
    assert _score(metric, coco_set, tmp_path, wrong_input, "bgr") < 60
    unmapped = []  # the 80 contiguous classes written as category ids (no COCO_80_TO_91)
    for r in responses:
        d = decode(r.tobytes()).copy()
        d[:, 6] = [COCO_80_TO_91.index(int(c)) for c in d[:, 6]]
        unmapped.append(d.reshape(-1))
    assert _score(metric, coco_set, tmp_path, unmapped, "unmapped") < 60
    # no letterbox undo: boxes scaled by the plain resize ratio instead
    plain = []
    for i, o in enumerate(rgb):
        boxes, scores, cls = coco_post.detect(o[0])
        h, w = images.sizes[i]
        boxes = boxes * np.array([w / 640, h / 640, w / 640, h / 640], np.float32)
        plain.append(encode(i, np.stack([boxes[:, 1] / h, boxes[:, 0] / w, boxes[:, 3] / h, boxes[:, 2] / w], 1),
                            scores, coco_post.LABEL_MAP[cls]))
    assert _score(metric, coco_set, tmp_path, plain, "plain") < 60


def test_retinanet_oracle_scores_100_and_mistakes_drop_it(oi_set, retinanet_responses, tmp_path):
    metric = OpenImagesMapMetric()
    assert _score(metric, oi_set, tmp_path, retinanet_responses, "ok") == 100.0
    for how in ("shift", "label", "swap"):
        assert _score(metric, oi_set, tmp_path, _perturb(retinanet_responses, how), how) < 60, how


def test_letterbox_matches_ultralytics_arithmetic():
    # 480x640 -> gain 1.0, 80 px of gray above and below; 300x500 -> gain 1.28, 128 x 640 band
    assert coco_pre.letterbox_params(480, 640) == (1.0, 480, 640, 80, 0)
    gain, nh, nw, top, left = coco_pre.letterbox_params(300, 500)
    assert (nh, nw, top, left) == (384, 640, 128, 0) and gain == pytest.approx(1.28)
    img = np.full((300, 500, 3), 200, np.uint8)
    out = coco_pre.letterbox(img)
    assert out.shape == (640, 640, 3) and (out[:128] == 114).all() and (out[128:512] == 200).all()
    boxes = coco_post.scale_boxes(np.array([[0.0, 128.0, 640.0, 512.0]]), 300, 500)
    np.testing.assert_allclose(boxes, [[0, 0, 500, 300]], atol=1e-4)


def test_nms_keeps_the_best_of_overlapping_boxes_per_class():
    pred = np.zeros((84, 4), np.float32)
    pred[:4] = np.array([[50, 52, 200, 50], [50, 50, 200, 50], [40, 40, 200, 40], [40, 40, 200, 40]], np.float32).T
    pred[4 + 3, 0], pred[4 + 3, 1], pred[4 + 3, 2], pred[4 + 7, 3] = 0.9, 0.8, 0.0005, 0.6
    boxes, scores, cls = coco_post.detect(pred)
    # anchor 1 overlaps anchor 0 (same class) and is suppressed; anchor 2 is under conf; anchor 3 is another class
    assert scores.tolist() == pytest.approx([0.9, 0.6]) and cls.tolist() == [3, 7]


# -- the SUT: postprocess with the batch's sample indices, variable-size responses -----------------------------------

class _Hooks:
    manifest = "detector.yaml"

    def __init__(self, postprocess):
        self._post = postprocess

    def get(self, name):
        return self._post if name == "postprocess" else None

    def runtime_error(self, name, exc, when=""):
        from mlharness.errors import HookError

        return HookError(name, self.manifest, f"raised {type(exc).__name__}: {exc}")


class _Echo:
    def predict(self, inputs):
        return [inputs[0]]


def _pipeline(postprocess):
    from mlharness.loadgen.batch import Pipeline
    from mlharness.loadgen.qsl import SampleStore

    store = SampleStore(6, 1)
    store.put_all({i: (np.full((2,), 10 * i, np.float32),) for i in range(6)})
    return Pipeline(_Echo(), _Hooks(postprocess), {}, store, np.dtype(np.float32))


def test_postprocess_gets_the_sample_indices_and_may_answer_unpadded_sizes():
    def detections(ctx, outputs, indices):
        # sample i answers i % 3 boxes (0 included), each a 7-tuple carrying its index
        return [encode(int(i), np.full((int(i) % 3, 4), 0.5), np.ones(int(i) % 3), np.zeros(int(i) % 3))
                for i in indices]

    buf, offsets = _pipeline(detections).run(np.array([5, 0, 4, 2]))
    assert np.diff(offsets).tolist() == [2 * 28, 0, 1 * 28, 2 * 28]
    first = decode(buf[offsets[0]:offsets[1]].tobytes())
    assert first[:, 0].tolist() == [5, 5]
    # a two-parameter postprocess is called as before
    buf, offsets = _pipeline(lambda ctx, outputs: outputs[0][:, 0]).run(np.array([3, 1]))
    assert np.frombuffer(buf.tobytes(), np.float32).tolist() == [30.0, 10.0]


def test_submission_rules_know_both_benchmarks():
    import re

    from mlharness.submission import rules

    for name, model, size in (("retinanet", "retinanet", 24781), ("yolo-95", "yolo", 1525), ("yolo-99", "yolo", 1525)):
        b = rules.BENCHMARKS[name]
        assert (b.model, b.dataset_size, b.accuracy_kind, b.compliance) == (model, size, "mAP", ("TEST01",))
        # the embedded mlperf.conf knows the LoadGen model name (its performance sample count, not the default 0)
        assert rules.conf_minimums(model, "SingleStream")["performance_sample_count"] == 64
    assert rules.DEFAULT_BENCHMARK_FOR_MODEL["yolo"] == "yolo-99"
    v60 = rules.rules_for("v6.0").required_scenarios
    assert v60["edge"]["yolo-95"] == ("SingleStream", "MultiStream", "Offline")
    assert "retinanet" not in v60["edge"]  # v6.0: a datacenter,edge benchmark only
    assert set(v60["datacenter,edge"]["retinanet"]) == {"SingleStream", "MultiStream", "Offline", "Server"}
    assert re.match(rules.ACC_PATTERNS["mAP"], "mAP=37.123%").group(1) == "37.123"


def test_nms_stopping_at_max_det_keeps_the_same_boxes():
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 600, size=(2000, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(5, 80, size=(2000, 2)).astype(np.float32)], axis=1)
    scores = np.sort(rng.random(2000).astype(np.float32))[::-1]
    full = coco_post.nms(boxes, scores, 0.5)
    assert len(full) > 300
    assert coco_post.nms(boxes, scores, 0.5, 300).tolist() == full[:300].tolist()
