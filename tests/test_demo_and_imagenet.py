"""The embedded demo (dataset, oracle model, pre-processing) and the ImageNet top-1 metric."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from PIL import Image

from mlharness.errors import AccuracyError, DatasetError
from mlharness.tasks.base import AccuracyContext
from mlharness.tasks.demo.dataset import (
    DEMO_CLASSES,
    DEMO_COLORS,
    DEMO_SIZE,
    demo_root,
    ensure_demo_dataset,
    preprocess_demo,
)
from mlharness.tasks.demo.models import ensure_demo_model
from mlharness.tasks.imagenet.dataset import read_val_map
from mlharness.tasks.imagenet.metric import ImagenetTop1Metric

VAL_MAP_LINE = re.compile(r"^ILSVRC2012_val_\d{8}\.JPEG \d+$")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("demo")
    return ensure_demo_dataset(base / "data", count=64), ensure_demo_model(base / "model.onnx")


def _run(model: Path, batch: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return sess.run(["label"], {"image": batch})[0]


def _batch(root: Path, swap_rb: bool = False) -> tuple[np.ndarray, np.ndarray]:
    names, labels = read_val_map(root / "val_map.txt")
    x = np.stack([preprocess_demo(root / n) for n in names])
    if swap_rb:
        x = np.ascontiguousarray(x[:, ::-1])
    return x, labels


# ---------------------------------------------------------------- colour table


def test_colour_table_is_well_separated_and_bgr_sensitive() -> None:
    c = DEMO_COLORS.astype(np.float64)
    assert c.shape == (DEMO_CLASSES, 3) and DEMO_COLORS.dtype == np.uint8
    dist = np.linalg.norm(c[:, None] - c[None], axis=2)
    np.fill_diagonal(dist, np.inf)
    assert dist.min() >= 60
    swapped = c[:, ::-1]
    nearest = np.argmin(np.linalg.norm(swapped[:, None] - c[None], axis=2), axis=1)
    assert (nearest != np.arange(DEMO_CLASSES)).sum() >= 8


# ---------------------------------------------------------------- oracle model


def test_oracle_model_is_100_percent(demo: tuple[Path, Path]) -> None:
    root, model = demo
    x, labels = _batch(root)
    assert x.shape == (64, 3, DEMO_SIZE, DEMO_SIZE) and x.dtype == np.float32
    pred = _run(model, x)
    assert pred.dtype == np.int64 and pred.shape == (64,)
    assert (pred == labels).all()
    assert set(labels.tolist()) == set(range(DEMO_CLASSES))  # every class is exercised


def test_bgr_mistake_is_visible(demo: tuple[Path, Path]) -> None:
    root, model = demo
    x, labels = _batch(root, swap_rb=True)
    assert (_run(model, x) == labels).mean() < 0.5


def test_model_shape_and_batch_dim(demo: tuple[Path, Path]) -> None:
    _, model = demo
    m = onnx.load(str(model))
    onnx.checker.check_model(m)
    inp = m.graph.input[0]
    assert inp.name == "image"
    dims = inp.type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [3, DEMO_SIZE, DEMO_SIZE]
    assert [o.name for o in m.graph.output] == ["logits", "label"]
    assert _run(model, np.zeros((1, 3, DEMO_SIZE, DEMO_SIZE), np.float32)).shape == (1,)


def test_ensure_demo_model_reuses_and_is_atomic(tmp_path: Path) -> None:
    path = ensure_demo_model(tmp_path / "sub" / "m.onnx")
    mtime = path.stat().st_mtime_ns
    assert ensure_demo_model(path) == path
    assert path.stat().st_mtime_ns == mtime
    # the model and the stamp that lets the next run reuse it without importing onnx; no temporary file
    assert sorted(p.name for p in path.parent.iterdir()) == [".m.onnx.generated", "m.onnx"]


def test_atomic_write_keeps_the_old_file_and_no_temporary_on_failure(tmp_path: Path) -> None:
    from mlharness.tasks.files import atomic_write, atomic_write_bytes

    path = atomic_write_bytes(tmp_path / "sub" / "f.bin", b"old")
    seen: list[str] = []

    def fail(tmp: str) -> None:
        seen.append(tmp)
        Path(tmp).write_bytes(b"half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        atomic_write(path, fail, suffix=".npz")
    assert Path(seen[0]).parent == path.parent and seen[0].endswith(".npz")  # same folder: os.replace is atomic
    assert path.read_bytes() == b"old"
    assert [p.name for p in path.parent.iterdir()] == ["f.bin"]
    assert atomic_write(path, lambda tmp: Path(tmp).write_bytes(b"new")) == path and path.read_bytes() == b"new"
    assert [p.name for p in path.parent.iterdir()] == ["f.bin"]


def test_preprocess_layouts(demo: tuple[Path, Path]) -> None:
    root, _ = demo
    f = root / "ILSVRC2012_val_00000001.JPEG"
    chw = preprocess_demo(f)
    hwc = preprocess_demo(f, layout="NHWC")
    assert chw.shape == (3, DEMO_SIZE, DEMO_SIZE) and hwc.shape == (DEMO_SIZE, DEMO_SIZE, 3)
    np.testing.assert_array_equal(chw, hwc.transpose(2, 0, 1))
    assert -0.5 <= chw.min() and chw.max() <= 0.5
    with pytest.raises(DatasetError, match="layout"):
        preprocess_demo(f, layout="CHWN")


# ---------------------------------------------------------------- dataset


def test_dataset_format(demo: tuple[Path, Path]) -> None:
    root, _ = demo
    lines = (root / "val_map.txt").read_text().splitlines()
    assert len(lines) == 64
    assert all(VAL_MAP_LINE.match(line) for line in lines)
    assert lines[0].startswith("ILSVRC2012_val_00000001.JPEG ")
    for line in lines[:5]:
        with Image.open(root / line.split()[0]) as im:
            assert im.format == "JPEG" and im.mode == "RGB" and im.size == (DEMO_SIZE, DEMO_SIZE)
            assert np.asarray(im).std() > 3  # not a flat patch


def test_dataset_idempotent_and_atomic(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    assert ensure_demo_dataset(root, count=12) == root
    mtimes = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    assert len(mtimes) == 13
    ensure_demo_dataset(root, count=12)
    ensure_demo_dataset(root, count=5)  # a smaller request is satisfied by the existing dataset
    assert {p.name: p.stat().st_mtime_ns for p in root.iterdir()} == mtimes
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]  # no temp folder left

    # A larger request extends it in place, keeping unrelated files (e.g. the demo model).
    (root / "keep.txt").write_text("x")
    ensure_demo_dataset(root, count=20)
    assert len((root / "val_map.txt").read_text().splitlines()) == 20
    assert (root / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]


def test_dataset_regenerated_when_a_file_is_missing(tmp_path: Path) -> None:
    root = ensure_demo_dataset(tmp_path / "demo", count=4)
    (root / "ILSVRC2012_val_00000003.JPEG").unlink()
    ensure_demo_dataset(root, count=4)
    assert (root / "ILSVRC2012_val_00000003.JPEG").is_file()


def test_dataset_is_deterministic(tmp_path: Path) -> None:
    a = ensure_demo_dataset(tmp_path / "a", count=6)
    b = ensure_demo_dataset(tmp_path / "b", count=6)
    for p in a.iterdir():
        assert p.read_bytes() == (b / p.name).read_bytes()


def test_demo_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLHARNESS_DEMO_DIR", str(tmp_path / "d"))
    assert demo_root() == tmp_path / "d"
    monkeypatch.delenv("MLHARNESS_DEMO_DIR")
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "c"))
    assert demo_root() == tmp_path / "c" / "demo"
    monkeypatch.delenv("MLHARNESS_CACHE")
    assert demo_root() == Path.home() / ".cache" / "mlharness" / "demo"


# ---------------------------------------------------------------- imagenet top-1


def _write_val_map(root: Path, labels: list[int]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"ILSVRC2012_val_{i + 1:08d}.JPEG {label}\n" for i, label in enumerate(labels)]
    (root / "val_map.txt").write_text("".join(lines))


def _write_log(path: Path, entries: list[tuple[int, int, int]], dtype: str = "float32") -> Path:
    """entries: (seq_id, qsl_idx, predicted label); data as LoadGen writes it (uppercase hex)."""
    body = [
        {"seq_id": s, "qsl_idx": q, "data": np.array([label], dtype=dtype).tobytes().hex().upper()}
        for s, q, label in entries
    ]
    path.write_text(json.dumps(body))
    return path


def _ctx(root: Path | None, **options: object) -> AccuracyContext:
    return AccuracyContext(dataset_path=root, count=5, options=dict(options))


def test_top1_exact_text_with_duplicates(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_val_map(root, [65, 970, 230, 809, 516])
    # qsl 0 right, qsl 1 right, qsl 2 wrong, qsl 3 right; duplicates of 2 (right, ignored) and 0 (wrong, ignored).
    log = _write_log(
        tmp_path / "mlperf_log_accuracy.json",
        [(0, 0, 65), (1, 1, 970), (2, 2, 1), (3, 2, 230), (4, 3, 809), (5, 0, 7)],
    )
    res = ImagenetTop1Metric().score(log, _ctx(root))
    good, total = 3, 4
    assert res.text == f"accuracy={100.0 * good / total:.3f}%, good={good}, total={total}\n"
    assert res.text == "accuracy=75.000%, good=3, total=4\n"
    assert res.value == 75.0 and res.name == "top1"
    assert ImagenetTop1Metric.name == "imagenet_top1"


def test_top1_accepts_what_the_official_script_accepts(tmp_path: Path, run_cli) -> None:
    """accuracy-imagenet.py reads only qsl_idx and data, skips a repeated sample before decoding it, and the line
    it prints is the same; mlharness also skips blank lines at the end of val_map.txt (the official script stops
    with an IndexError there), which cannot move any label."""
    root = tmp_path / "data"
    _write_val_map(root, [65, 970, 230])
    with open(root / "val_map.txt", "a") as f:
        f.write("\n  \n")
    good = {i: np.array([label], np.float32).tobytes().hex().upper() for i, label in enumerate([65, 970, 1])}
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps([
        {"qsl_idx": 0, "data": good[0]},                    # no seq_id
        {"seq_id": 1, "qsl_idx": 1, "data": good[1]},
        {"seq_id": 2, "qsl_idx": 1, "data": "not hex"},     # a malformed repeat of a sample already scored
        {"seq_id": 3, "qsl_idx": 0},                        # a repeat without data
        {"seq_id": 4, "qsl_idx": 2, "data": good[2]},
    ]))
    res = ImagenetTop1Metric().score(log, _ctx(root))
    assert res.text == "accuracy=66.667%, good=2, total=3\n" and res.details["dupes"] == 2
    proc = run_cli("accuracy", "imagenet", "--log", str(log), "--val-map", str(root / "val_map.txt"))
    assert proc.returncode == 0 and proc.stdout == res.text, proc.stderr
    # where the official script crashes, a clear error naming the entry
    log.write_text(json.dumps([{"qsl_idx": 0, "data": good[0]}, {"seq_id": 7, "qsl_idx": 2, "data": "zz"}]))
    with pytest.raises(AccuracyError, match=r"entry 1 \(seq_id 7, qsl_idx 2\): 'data' is not hex"):
        ImagenetTop1Metric().score(log, _ctx(root))
    log.write_text(json.dumps([{"seq_id": 0, "data": good[0]}]))
    with pytest.raises(AccuracyError, match=r"entry 0 is malformed: expected an object with an integer 'qsl_idx'"):
        ImagenetTop1Metric().score(log, _ctx(root))


def test_top1_int64_and_custom_val_map(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_val_map(root, [1, 2, 3])
    (root / "val_map.txt").rename(root / "labels.txt")
    log = _write_log(tmp_path / "acc.json", [(0, 0, 1), (1, 1, 5), (2, 2, 3)], dtype="int64")
    res = ImagenetTop1Metric().score(log, _ctx(root, dtype="int64", val_map="labels.txt"))
    assert res.text == "accuracy=66.667%, good=2, total=3\n"
    # Decoding int64 bytes as float32 gives the wrong labels (like the official script would).
    assert ImagenetTop1Metric().score(log, _ctx(root, val_map="labels.txt")).value == 0.0


def test_top1_on_demo_dataset(demo: tuple[Path, Path], tmp_path: Path) -> None:
    root, model = demo
    x, _ = _batch(root)
    pred = _run(model, x)
    log = _write_log(tmp_path / "acc.json", [(i, i, int(p)) for i, p in enumerate(pred)], dtype="int64")
    res = ImagenetTop1Metric().score(log, _ctx(root, dtype="int64"))
    assert res.text == "accuracy=100.000%, good=64, total=64\n"


def test_top1_errors(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_val_map(root, [1, 2])
    metric = ImagenetTop1Metric()

    log = _write_log(tmp_path / "out_of_range.json", [(0, 0, 1), (1, 2, 2)])
    with pytest.raises(AccuracyError, match=r"qsl_idx 2.*2 entries.*val_map\.txt"):
        metric.score(log, _ctx(root))

    with pytest.raises(AccuracyError, match=r"val map .*missing\.txt not found"):
        metric.score(log, _ctx(root, val_map="missing.txt"))

    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(AccuracyError, match="no entries"):
        metric.score(empty, _ctx(root))

    with pytest.raises(AccuracyError, match="dtype 'float16'"):
        metric.score(log, _ctx(root, dtype="float16"))

    short = tmp_path / "short.json"
    short.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 0, "data": "0100"}]))
    with pytest.raises(AccuracyError, match="cannot decode 2 response bytes as float32"):
        metric.score(short, _ctx(root))


def test_malformed_val_map_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "val_map.txt"
    bad.write_text("ILSVRC2012_val_00000001.JPEG 65\nILSVRC2012_val_00000002.JPEG\n")
    with pytest.raises(DatasetError, match=r"val_map\.txt, line 2: expected"):
        read_val_map(bad)
    bad.write_text("a.JPEG 1\nb.JPEG 2\nc.JPEG cat\n")
    with pytest.raises(DatasetError, match=r"val_map\.txt, line 3: label 'cat'"):
        read_val_map(bad)
    log = _write_log(tmp_path / "acc.json", [(0, 0, 1)])
    with pytest.raises(AccuracyError, match=r"val_map\.txt, line 3"):
        ImagenetTop1Metric().score(log, _ctx(tmp_path))

    # Trailing blank lines are tolerated; labels are int64.
    bad.write_text("a.JPEG 1\nb.JPEG 2\n\n\n")
    names, labels = read_val_map(bad)
    assert names == ["a.JPEG", "b.JPEG"] and labels.dtype == np.int64 and labels.tolist() == [1, 2]
