"""An image+text model other than the MLPerf one plugs in by manifest alone: a tiny random LLaVA (another
transformers class than Qwen3-VL, with its own processor and chat template, built offline) and the synthetic
image+question set scored by exact match."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlharness.predictors.chat import ChatLimits, parse_chat
from mlharness.tasks import METRICS
from mlharness.tasks.base import AccuracyContext
from mlharness.tasks.generic import vlm_data

pytest.importorskip("transformers")
pytest.importorskip("PIL")


def test_vlm_questions_set_and_its_oracle_table(tmp_path):
    root = vlm_data.write_vlm_questions(tmp_path / "set", count=6)
    rows = vlm_data.read_questions(root)
    answers = (root / vlm_data.ANSWERS_FILE).read_text().splitlines()
    assert [r["answer"] for r in rows] == answers and len(rows) == 6
    prompts = [parse_chat(vlm_data.messages(root, r), i, ChatLimits(max_image_bytes=1 << 20)) for i, r in
               enumerate(rows)]
    assert all(len(p.images) == 1 and p.images[0].mime == "image/png" for p in prompts)
    # the image's own bytes, never re-encoded
    assert prompts[0].images[0].data == (root / rows[0]["image"]).read_bytes()
    table = vlm_data.oracle_table(root)
    assert table["chat"] == {p.key: r["answer"] for p, r in zip(prompts, rows, strict=True)}
    assert len(table["chat"]) == 6  # every conversation its own key (image bytes differ)


def test_exact_match_reads_a_text_token_stream_as_utf8(tmp_path):
    """LoadGen logs token_count for token streams; a stream answered as uint8 text is still scored as text."""
    (tmp_path / "answers.txt").write_text("red\nsquare\n")
    entries = [{"seq_id": i, "qsl_idx": i, "data": t.encode().hex().upper(), "token_count": len(t)}
               for i, t in enumerate(["Red", "circle"])]
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text(json.dumps(entries))
    ctx = AccuracyContext(dataset_path=tmp_path, count=2, options={"labels": "answers.txt"}, response_dtype="uint8")
    result = METRICS.get("exact_match")().score(log, ctx)
    assert result.value == 50.0 and result.details["decoded_with"] == "utf-8"


def test_tiny_llava_builds_offline_and_answers_through_its_processor(tmp_path):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from mlharness.tasks.generic import vlm

    ckpt = vlm.ensure_random_llava(tmp_path / "ckpt")
    processor = AutoProcessor.from_pretrained(ckpt)
    model = AutoModelForImageTextToText.from_pretrained(ckpt).eval()
    assert type(model).__name__ == "LlavaForConditionalGeneration" and processor.chat_template
    root = vlm_data.write_vlm_questions(tmp_path / "set", count=2)
    prompt = parse_chat(vlm_data.messages(root, vlm_data.read_questions(root)[0]), 0)
    enc = processor.apply_chat_template(prompt.template_messages(), add_generation_prompt=True, tokenize=True,
                                        return_dict=True, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    patches = (vlm.IMAGE_SIZE // vlm.PATCH_SIZE) ** 2  # one token per patch ("default": no CLS token)
    assert ids.count(model.config.image_token_index) == patches
    assert tuple(enc["pixel_values"].shape) == (1, 3, vlm.IMAGE_SIZE, vlm.IMAGE_SIZE)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape[1] == len(ids) + 4
    # seeded: the same checkpoint when built again, so its answers are reproducible
    again = vlm.build_random_llava(tmp_path / "again")
    a = AutoModelForImageTextToText.from_pretrained(again).eval()
    assert np.array_equal(a.lm_head.weight.detach().numpy(), model.lm_head.weight.detach().numpy())
