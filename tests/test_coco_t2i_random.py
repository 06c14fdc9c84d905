"""stable-diffusion-xl-random: the diffusers SDXL pipeline with tiny random networks, fed as the benchmark feeds
it (caption bytes and the fixed latent), answers 1024x1024 uint8 images through LoadGen."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mlharness.tasks.coco_t2i.clip_net import VOCAB_FILE

spec = importlib.util.find_spec("open_clip")
HAS_VOCAB = bool(spec and any((Path(p) / VOCAB_FILE).is_file() for p in spec.submodule_search_locations or []))
pytestmark = [pytest.mark.skipif(not HAS_VOCAB,
                                 reason="the tokenizer's BPE vocabulary comes from open-clip-torch"),
              pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="needs diffusers")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from mlharness.tasks.coco_t2i.synth import write_synthetic_captions

    return write_synthetic_captions(tmp_path_factory.mktemp("captions") / "ds", count=2)


def test_pipeline_turns_a_caption_and_the_latent_into_an_image(dataset, monkeypatch, tmp_path):
    import torch

    from mlharness.tasks.coco_t2i.dataset import LATENTS, caption_set, read_latents
    from mlharness.tasks.coco_t2i.models import decode_caption, encode_caption, random_sdxl

    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    caption = caption_set(dataset).captions[1]
    encoded = encode_caption(caption)
    assert encoded.shape == (512,) and decode_caption(torch.from_numpy(encoded)) == caption
    latent = read_latents(dataset / LATENTS)
    model = random_sdxl(seed=0, steps=1).eval()
    assert model.pipe.tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    with torch.inference_mode():
        image = model(torch.from_numpy(encoded)[None], latent)
        again = model(torch.from_numpy(encoded)[None], latent)
    assert image.shape == (1, 1024, 1024, 3) and image.dtype == torch.uint8
    assert torch.equal(image, again)  # the fixed latent: the same caption gives the same image
    assert np.asarray(image).std() > 1


def test_random_model_single_stream(run_cli, dataset, tmp_path):
    out = tmp_path / "run"
    proc = run_cli("run", "--manifest", "stable-diffusion-xl-random", "--dataset-path", str(dataset),
                   "--scenario", "SingleStream", "--mode", "performance", "--count", "1", "--min-query-count", "2",
                   "--min-duration-ms", "100", "--no-calibrate", "--output", str(out), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert "Scenario : SingleStream" in summary
