"""A text-to-image model of its own at 256x256, from docs/image-generation.md's example as written there: a tiny
Stable Diffusion 1.x pipeline with random weights built from configs (2 steps) over the built-in coco-captions
dataset. Its accuracy run scores FID and CLIP, recorded as not official with the images' size; its first Offline
performance run with only --min-duration-ms 2000 is VALID. A size the benchmark cannot score is refused before
the model loads, naming the field."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError
from mlharness.manifest.loader import find_builtin
from mlharness.tasks.coco_t2i.clip_net import VOCAB_FILE
from mlharness.tasks.coco_t2i.dataset import CAPTIONS

DOC = Path(__file__).resolve().parents[1] / "docs" / "image-generation.md"
_BLOCK = re.compile(r"^```(?:yaml|python)\n(# file: (\S+)\n.*?)^```", re.M | re.S)
spec = importlib.util.find_spec("open_clip")
HAS_VOCAB = bool(spec and any((Path(p) / VOCAB_FILE).is_file() for p in spec.submodule_search_locations or []))
pytestmark = [pytest.mark.skipif(not HAS_VOCAB, reason="CLIP's BPE vocabulary comes from open-clip-torch "
                                                       "(pip install --no-deps open-clip-torch)"),
              pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="needs diffusers")]
SIZE = 256 * 256 * 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from mlharness.cli import main

    out = tmp_path_factory.mktemp("t2i") / "coco"
    assert main(["dataset", "synth", "coco-captions", "--out", str(out), "--count", "3",
                 "--stand-in-networks"]) == 0
    return out


@pytest.fixture(scope="module")
def example(dataset) -> Path:
    """The doc's files, written beside the dataset as they are in the doc; the manifest's path."""
    files = dict((name, text) for text, name in _BLOCK.findall(DOC.read_text()))
    assert set(files) == {"tiny_sd.py", "tiny-sd-256.yaml"}, files.keys()
    for name, text in files.items():
        (dataset.parent / name).write_text(text)
    return dataset.parent / "tiny-sd-256.yaml"


def refused(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_the_captions_dataset_is_found_by_name():
    path = find_builtin("coco-captions", "dataset")
    assert path is not None and path.parent.name == "datasets"


@pytest.mark.slow
def test_accuracy_run_scores_fid_and_clip_of_256_images_not_official(run_cli, dataset, example, tmp_path):
    out = tmp_path / "acc"
    proc = run_cli("run", "--manifest", str(example), "--dataset-path", str(dataset), "--scenario", "Offline",
                   "--mode", "accuracy", "--output", str(out), "--no-progress", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == [0, 1, 2]
    assert {len(e["data"]) for e in entries} == {2 * SIZE}  # 256x256x3 uint8 images, nothing resized
    images = [np.frombuffer(bytes.fromhex(e["data"]), np.uint8) for e in entries]
    assert not np.array_equal(images[0], images[1])  # each caption makes its own image
    text = (out / "accuracy.txt").read_text()
    assert text.startswith("256x256 images (the benchmark's are 1024x1024"), text
    figures = dict(re.findall(r"'(\w+_SCORE)': '([-\d.e]+)'", text))
    assert set(figures) == {"FID_SCORE", "CLIP_SCORE"}
    assert all(np.isfinite(float(v)) for v in figures.values()) and float(figures["FID_SCORE"]) > 0
    accuracy = json.loads((out / "mlharness_run.json").read_text())["accuracy"]
    assert accuracy["official"] is False and accuracy["name"] == "CLIP_SCORE"
    assert accuracy["value"] == pytest.approx(float(figures["CLIP_SCORE"]))


def test_first_offline_performance_run_with_a_short_duration_is_valid(run_cli, dataset, example, tmp_path):
    out = tmp_path / "perf"
    proc = run_cli("run", "--manifest", str(example), "--dataset", "coco-captions", "--dataset-path",
                   str(dataset), "--scenario", "Offline", "--mode", "performance", "--min-duration-ms", "2000",
                   "--output", str(out), "--no-progress", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert "Result is : VALID" in summary, summary


def test_benchmark_manifest_of_another_size_is_refused_before_the_model_loads(run_cli, dataset, tmp_path):
    text = find_builtin("stable-diffusion-xl-random").read_text()
    assert text.count("shape: [1024, 1024, 3]") == 1
    manifest = tmp_path / "sdxl-512.yaml"
    manifest.write_text(text.replace("shape: [1024, 1024, 3]", "shape: [512, 512, 3]"))
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(dataset), "--scenario", "Offline",
                   "--mode", "accuracy", "--output", str(out), "--no-progress", timeout=120)
    refused(proc, "outputs[0].shape", "declares [512, 512, 3] (512x512)", "scores 1024x1024 images only",
            "drop the manifest's 'mlperf' section")
    assert not out.exists()


@pytest.mark.parametrize("change, needles", [
    (("    shape: [256, 256, 3]\n", ""), ("outputs[0].shape", "declares the shape of its image")),
    (("shape: [256, 256, 3]", "shape: [256, 256, 4]"), ("outputs[0].shape", "[height, width, 3]")),
    (("shape: [256, 256, 3]", "shape: [8192, 8192, 3]"), ("outputs[0].shape", "from 1 to 4096")),
    (("shape: [512]", "shape: [77]"), ("inputs[0]", "shape [512]")),
])
def test_a_declared_image_the_metric_cannot_read_is_refused_before_the_model_loads(run_cli, dataset, example,
                                                                                  tmp_path, change, needles):
    text = example.read_text()
    assert change[0] in text
    manifest = example.parent / f"changed-{tmp_path.name}.yaml"  # beside tiny_sd.py
    manifest.write_text(text.replace(change[0], change[1], 1))
    proc = run_cli("run", "--manifest", str(manifest), "--dataset-path", str(dataset), "--scenario", "Offline",
                   "--mode", "accuracy", "--output", str(tmp_path / "run"), "--no-progress", timeout=120)
    refused(proc, *needles)
    assert "hook 'init' of" in proc.stderr  # the dataset's opening refused it: no model was built
    assert not (tmp_path / "run").exists()


def _log(path: Path, images: list[np.ndarray]) -> Path:
    path.write_text(json.dumps([{"seq_id": i, "qsl_idx": i, "data": img.tobytes().hex()}
                                for i, img in enumerate(images)]))
    return path


def _score(dataset: Path, log: Path, **options):
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.coco_t2i.metric import CocoT2IMetric

    ctx = AccuracyContext(dataset_path=dataset, count=0, options={"networks": "networks", **options})
    return CocoT2IMetric().score(log, ctx)


@pytest.mark.slow
def test_a_non_square_log_is_scored_with_its_declared_shape(run_cli, dataset, tmp_path):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (24, 40, 3), dtype=np.uint8) for _ in range(3)]
    log = _log(tmp_path / "log.json", images)
    result = _score(dataset, log, image_shape=[24, 40, 3])
    assert result.details["image_size"] == "40x24" and result.details["images"] == 3
    assert result.official is False and result.text.startswith("40x24 images")
    with pytest.raises(AccuracyError, match=r"2880 bytes is no square RGB image; set "
                                            r"accuracy.options.image_shape"):
        _score(dataset, log)  # without the option, its size cannot be told from its bytes
    proc = run_cli("accuracy", "coco-t2i", "--log", str(log), "--caption-path", str(dataset / CAPTIONS),
                   "--statistics-path", str(dataset / "val2014.npz"), "--networks", str(dataset / "networks"),
                   "--image-shape", "32", "32", "3")
    refused(proc, "entry 0 (qsl_idx 0): 2880 bytes; an image response is 3072 bytes (32x32x3 uint8")


def test_a_log_is_read_at_the_size_of_its_first_image_and_every_image_must_match(tmp_path):
    from mlharness.tasks.coco_t2i.imagelog import log_images

    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(3)]
    read = list(log_images(_log(tmp_path / "log.json", images)))
    assert [(idx, image.shape) for _, idx, image in read] == [(i, (64, 64, 3)) for i in range(3)]
    assert all(np.array_equal(image, images[i]) for _, i, image in read)
    images[2] = images[2][:32]  # a later image of another size is named, not reshaped
    with pytest.raises(AccuracyError, match=r"entry 2 \(qsl_idx 2\): 6144 bytes; an image response is 12288"):
        list(log_images(_log(tmp_path / "mixed.json", images)))
