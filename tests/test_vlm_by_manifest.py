"""An image+text model other than the MLPerf one plugs in by manifest alone: a tiny random LLaVA (another
transformers class than Qwen3-VL, with its own processor and chat template, built offline) and the synthetic
image+question set scored by exact match."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from mlharness.paths import MANIFESTS_DIR
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



# -- through the real CLI, the manifests alone ------------------------------------------------------------------

ORACLE = MANIFESTS_DIR / "tiny-vlm" / "tiny-vlm-oracle.yaml"


def _run(run_cli, manifest, out, *args):
    return run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(out), "--no-progress", *args, timeout=120)


def test_oracle_scores_exact_match_100_with_text_responses(run_cli, tmp_path):
    out = tmp_path / "out"
    proc = _run(run_cli, ORACLE, out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "accuracy.txt").read_text()) == {"exact_match": 100.0, "f1": 100.0}
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    texts = {e["qsl_idx"]: bytes.fromhex(e["data"]).decode("utf-8") for e in entries}
    assert len(texts) == vlm_data.DEFAULT_COUNT
    assert set(texts.values()) <= set(vlm_data.COLOURS) | set(vlm_data.SHAPES)
    # the response is the answer's UTF-8 text; LoadGen counted the tokens streamed (one a byte for the oracle)
    assert all(e["token_count"] == len(texts[e["qsl_idx"]].encode()) for e in entries)


def test_random_llava_runs_offline_accuracy_by_manifest_alone(run_cli, tmp_path):
    """The transformers predictor takes the checkpoint's own processor and chat template: no LLaVA code here."""
    out = tmp_path / "out"
    proc = _run(run_cli, MANIFESTS_DIR / "tiny-vlm" / "tiny-vlm-random.yaml", out)
    assert proc.returncode == 0, proc.stderr
    scores = json.loads((out / "accuracy.txt").read_text())
    assert set(scores) == {"exact_match", "f1"}  # noise answers: the path is what counts
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(vlm_data.DEFAULT_COUNT))
    for e in entries:  # UTF-8 text of the generated ids, their count (2..max_new_tokens) as LoadGen's tokens
        bytes.fromhex(e["data"]).decode("utf-8")
        assert 2 <= e["token_count"] <= 8


def _bad_set(tmp_path, shared_cache):
    """A copy of the synthetic set the oracle's table was made from (in the session's cache)."""
    import shutil

    src = shared_cache / "vlm_questions_synth"
    assert (src / vlm_data.MARKER).is_file(), "the oracle run makes the set first"
    return Path(shutil.copytree(src, tmp_path / "set"))


# an image named by its path in a dataset folder (tests/test_chat_prompts.py covers roles, part types and the
# byte cap with messages made in the hook)
BAD = {
    "image file that does not decode": (
        lambda root: (root / "images" / "vq_0002.png").write_bytes(b"\x89PNG not really"),
        r"sample 2, message 1, part 0: the image does not decode"),
    "image over the pixel cap": (
        lambda root: __import__("PIL.Image").Image.new("RGB", (1100, 1000)).save(root / "images" / "vq_0001.png"),
        r"sample 1, message 1, part 0: the image is 1100x1000 pixels, over the input's cap of 1,000,000"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_image_in_the_dataset_is_refused_naming_sample_and_part(run_cli, shared_cache, tmp_path, case):
    break_set, message = BAD[case]
    if not (shared_cache / "vlm_questions_synth" / vlm_data.MARKER).is_file():
        assert _run(run_cli, ORACLE, tmp_path / "first").returncode == 0
    root = _bad_set(tmp_path, shared_cache)
    break_set(root)
    proc = _run(run_cli, ORACLE, tmp_path / "out", "--dataset-path", str(root))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert re.search(r"error: .*" + message, proc.stderr), proc.stderr
    assert proc.returncode == 2, proc.stderr  # bad input, not a failed run
