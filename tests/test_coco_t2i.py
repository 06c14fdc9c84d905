"""stable-diffusion-xl's task: CLIP score and FID byte-identical to the official accuracy_coco.py (run on the same
stand-in networks, tests/fixtures/coco_t2i), the captions layout, the CLIP tokenizer, and an image log read one
entry at a time."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError
from mlharness.tasks.coco_t2i.clip_net import VOCAB_FILE

FIXTURES = Path(__file__).parent / "fixtures" / "coco_t2i"
spec = importlib.util.find_spec("open_clip")
HAS_VOCAB = bool(spec and any((Path(p) / VOCAB_FILE).is_file() for p in spec.submodule_search_locations or []))
pytestmark = pytest.mark.skipif(not HAS_VOCAB, reason="CLIP's BPE vocabulary comes from open-clip-torch "
                                                      "(pip install --no-deps open-clip-torch)")


def _make_inputs():
    spec = importlib.util.spec_from_file_location("coco_t2i_make_inputs", FIXTURES / "make_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("coco_t2i_inputs")
    _make_inputs().make_inputs(out)
    return out


def test_inputs_are_those_the_official_script_scored(inputs):
    """The generated inputs hash to what official_output.txt was computed from (else regenerate the fixture)."""
    for line in (FIXTURES / "inputs.sha256").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((inputs / name).read_bytes()).hexdigest() == digest, f"{name} changed"


@pytest.mark.slow
def test_clip_and_fid_equal_the_official_script(inputs, run_cli):
    proc = run_cli("accuracy", "coco-t2i", "--log", str(inputs / "mlperf_log_accuracy.json"),
                   "--caption-path", str(inputs / "ds" / "captions" / "captions.tsv"),
                   "--statistics-path", str(inputs / "ds" / "val2014.npz"), "--networks", str(inputs / "networks"),
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    expected = (FIXTURES / "official_output.txt").read_text()

    def figures(text: str) -> dict[str, str]:
        head, _, body = text.partition(": ")
        assert head == "Accuracy Results" and text.endswith("}\n"), text
        return json.loads(body.replace("'", '"'))

    got, official = figures(proc.stdout), figures(expected)
    assert list(got) == list(official)
    # CLIP to the byte; FID to 1e-9 of itself: the square root of the product of two rank-deficient covariances
    # (four images) moves in its tenth digit with the BLAS kernel and thread count of the machine (1791963.8793 in
    # the fixture, .8785 with 2 OpenBLAS threads and .8784 with 1 on another CPU), for the official script as much
    # as for mlharness, which run the same numpy and scipy calls
    assert got["CLIP_SCORE"] == official["CLIP_SCORE"]
    assert abs(float(got["FID_SCORE"]) - float(official["FID_SCORE"])) <= 1e-9 * float(official["FID_SCORE"])
    assert float(official["CLIP_SCORE"]) > 0


def test_synthetic_layout_is_the_references(inputs):
    import torch
    from PIL import Image

    from mlharness.tasks.coco_t2i.dataset import COLUMNS, caption_set, read_latents

    ds = inputs / "ds"
    header, *rows = (ds / "captions" / "captions.tsv").read_text().splitlines()
    assert tuple(header.split("\t")) == COLUMNS and len(rows) == 4
    latents = torch.load(ds / "latents" / "latents.pt", weights_only=True)
    assert latents.shape == (1, 4, 128, 128) and latents.dtype == torch.float32  # as tools/latents.pt
    assert torch.equal(read_latents(ds / "latents" / "latents.pt"), latents)
    captions = caption_set(ds)
    assert any('"' in c or "&amp;" in c or "ï" in c for c in captions.captions)  # what the tokenizer cleans
    with Image.open(captions.image_path(0)) as img:
        assert img.size == (1024, 1024) and img.mode == "RGB"


def test_tokenizer_gives_clips_ids():
    from mlharness.tasks.coco_t2i.clip_net import Tokenizer

    tok = Tokenizer()
    ids = tok("a photo of a cat")
    assert ids.shape == (1, 77) and ids[0, :7].tolist() == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert not ids[0, 7:].any()
    assert tok("  A   PHOTO of a &amp;amp; cat ").tolist() == tok("a photo of a & cat").tolist()
    long = tok("word " * 200)[0]
    assert long[0] == 49406 and long[-1] == 49407 and long.count_nonzero() == 77


def _image_log(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        f.write("[")
        for i in range(n):
            data = rng.integers(0, 256, 1024 * 1024 * 3, dtype=np.uint8).tobytes().hex()
            f.write(("," if i else "") + json.dumps({"seq_id": i, "qsl_idx": i, "data": data}))
        f.write("]")


def test_log_is_read_one_image_at_a_time(tmp_path):
    from mlharness.tasks.coco_t2i.imagelog import log_images

    log = tmp_path / "mlperf_log_accuracy.json"
    _image_log(log, 8)
    one_entry = 3 * 1024 * 1024 * 3  # its hex text and its bytes
    tracemalloc.start()
    try:
        seen = [(idx, img.shape) for _, idx, img in log_images(log)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == [(i, (1024, 1024, 3)) for i in range(8)]
    assert peak < 2.5 * one_entry, f"reading 8 images peaked at {peak / 2**20:.1f} MiB"


def test_a_response_of_the_wrong_size_is_named(tmp_path):
    from mlharness.tasks.coco_t2i.imagelog import log_images

    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"seq_id": 0, "qsl_idx": 3, "data": "00" * 100}]))
    with pytest.raises(AccuracyError, match=r"entry 0 \(qsl_idx 3\): 100 bytes is no square RGB image"):
        list(log_images(log))
    with pytest.raises(AccuracyError, match=r"entry 0 \(qsl_idx 3\): 100 bytes; an image response is 3145728"):
        list(log_images(log, [1024, 1024, 3]))


@pytest.mark.slow
def test_scores_do_not_depend_on_the_callers_thread_count(inputs):
    """A run's process has set torch's thread count for its model (1 in a CPU run), the accuracy command has
    not; the float32 Inception features change in their last bits with it. Scoring runs at the count a fresh
    process gets (the official script's), so both give the same line."""
    import torch

    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.coco_t2i.metric import CocoT2IMetric

    ctx = AccuracyContext(dataset_path=None, count=0, options={
        "captions": str(inputs / "ds" / "captions" / "captions.tsv"),
        "statistics": str(inputs / "ds" / "val2014.npz"), "networks": str(inputs / "networks")})
    before = torch.get_num_threads()
    lines = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            lines.append(CocoT2IMetric().score(inputs / "mlperf_log_accuracy.json", ctx).text)
            assert torch.get_num_threads() == threads  # the caller's count is given back
    finally:
        torch.set_num_threads(before)
    assert lines[0] == lines[1]


def test_clip_stand_in_survives_the_official_float16_rounding():
    from mlharness.tasks.coco_t2i.clip_net import random_state_dict

    state = random_state_dict(3)
    assert all(torch_equal_half(v) for v in state.values() if v.is_floating_point())


def torch_equal_half(v) -> bool:
    import torch

    return v.dtype == torch.float32 and torch.equal(v, v.half().float())
