"""Chat prompts with images over an OpenAI-compatible endpoint: the ``/v1/chat/completions`` body (messages
serialised once per sample, the images as data URLs of the dataset's own bytes), text answers counted by the
server's usage, prefix caching said or refused where the server reports it, and whole runs against the local fake
server (which decodes every image and answers from a table keyed by conversation, or with each image's sha256)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from mlharness.errors import PredictorError
from mlharness.measurement.fake_openai import FakeOpenAI
from mlharness.paths import MANIFESTS_DIR
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.chat import parse_chat
from mlharness.predictors.generative import GenerationConfig, TokenRequest
from mlharness.predictors.openai.chat_body import chat_body, payload

pytest.importorskip("PIL")


def png(colour: tuple[int, int, int], size: int = 8) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, "PNG")
    return buf.getvalue()


def prompt(i: int, **extra):
    messages = [{"role": "system", "content": "Answer with one word."},
                {"role": "user", "content": [{"type": "image", "image": png((i, 2, 3))},
                                             {"type": "text", "text": f"question {i}"}]}]
    return parse_chat({"messages": messages, **extra} if extra else messages, i)


class Recorder:
    def __init__(self) -> None:
        self.ids = self.response = self.error = None
        self.firsts = 0
        self.calls = 0
        self.finished = threading.Event()

    def first(self, ids: np.ndarray) -> None:
        self.firsts += 1

    def done(self, ids: np.ndarray, response: np.ndarray | None = None) -> None:
        self.calls += 1
        self.ids, self.response = ids, response
        self.finished.set()

    def fail(self, error: BaseException) -> None:
        self.calls += 1
        self.error = error
        self.finished.set()


def predictor(url: str, text: bool = True, **options):
    g = GenerationConfig(max_new_tokens=200)
    g.text = text
    p = PREDICTORS.get("openai")(PredictorConfig(model_path=None, input_names=[], output_names=[], generation=g,
                                                 options={"endpoints": [url], **options}))
    p.load()
    return p


def generate(p, prompts):
    streams = [Recorder() for _ in prompts]
    p.submit([TokenRequest(pr.index, pr) for pr in prompts], streams)
    assert p.drain(timeout_s=30)
    assert all(s.calls == 1 for s in streams)  # each request reported exactly once
    return streams


def test_chat_body_splices_the_messages_serialised_once_per_sample():
    pr = prompt(1, response_format={"type": "json_object"}, note="the dataset's own")
    first = payload(pr)
    assert payload(pr) is first  # built once, reused by every request of the sample
    fields = {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 9}
    raw = chat_body(first, fields)
    assert chat_body(first, dict(fields)) is raw  # the run's fields unchanged: the same body, not copied again
    assert json.loads(first.messages) == pr.openai_messages  # still at hand (client processes get it pickled)
    assert json.loads(chat_body(first, {**fields, "max_tokens": 3}))["max_tokens"] == 3
    body = json.loads(raw)
    assert body["messages"] == pr.openai_messages and body["max_tokens"] == 9 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["response_format"] == {"type": "json_object"} and "note" not in body
    url = body["messages"][1]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    import base64

    assert base64.b64decode(url.split(",", 1)[1]) == pr.images[0].data  # the dataset's bytes, not re-encoded


@pytest.mark.parametrize("processes", [1, 2])
def test_images_reach_the_server_as_their_bytes_and_the_text_is_the_answer(processes):
    prompts = [prompt(i) for i in range(3)]
    with FakeOpenAI(delay_s=0.0) as srv:
        p = predictor(srv.url, client_processes=processes)
        try:
            streams = generate(p, prompts * 2)  # each sample twice: the second time only its index crosses
        finally:
            p.close()
        stats = srv.stats()
    assert stats["chats"] == 6 and stats["images"] == 6
    for pr, s in zip(prompts * 2, streams, strict=True):
        assert s.error is None, s.error
        text = bytes(s.response).decode("utf-8")
        assert text == f"images {hashlib.sha256(pr.images[0].data).hexdigest()}; text question {pr.index}"
        assert len(s.ids) == len(text)  # the server's usage.completion_tokens: one token a character
        assert s.firsts == 1


def test_without_text_responses_a_text_only_chat_needs_a_tokenizer():
    with FakeOpenAI(delay_s=0.0) as srv:
        p = predictor(srv.url, text=False)
        try:
            (s,) = generate(p, [prompt(0)])
        finally:
            p.close()
    assert s.error is not None and "tokenizer" in str(s.error)


def test_the_fake_server_refuses_an_image_that_does_not_decode():
    with FakeOpenAI(delay_s=0.0) as srv:
        body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}
        req = urllib.request.Request(f"{srv.url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and b"does not decode" in e.value.read()


def test_prefix_caching_is_said_and_recorded(caplog):
    caplog.set_level(logging.INFO, logger="mlharness.predictors.openai.prefix_cache")
    with FakeOpenAI(delay_s=0.0, prefix_cache=True) as srv:
        p = predictor(srv.url)
        try:
            streams = generate(p, [prompt(i) for i in range(3)])
            described = p.describe()["prefix_cache"]
        finally:
            p.close()
    assert all(s.error is None for s in streams)
    assert described["metrics_enabled"] == {f"{srv.url}/v1": True}
    assert described["requests_with_cached_tokens"] == 2 and described["cached_prompt_tokens"] == 16
    on, reused = (r for r in caplog.records if "prefix caching" in r.getMessage())
    assert "has prefix caching on" in on.getMessage() and on.levelno == logging.INFO  # on: vLLM's default
    assert "reused 8 cached prompt token" in reused.getMessage() and reused.levelno == logging.WARNING


def test_require_no_prefix_cache_refuses_a_server_that_caches():
    from mlharness.predictors.openai.prefix_cache import PrefixCacheWatch

    with pytest.raises(PredictorError, match=r"sample 3 \(qsl_idx\).*8 cached prompt token"):
        PrefixCacheWatch(required_off=True).answered(8, 3, "http://x/v1/chat/completions")  # its answer's usage
    with FakeOpenAI(delay_s=0.0, prefix_cache=True) as srv:
        with pytest.raises(PredictorError, match="require_no_prefix_cache"):
            predictor(srv.url, require_no_prefix_cache=True)
    with FakeOpenAI(delay_s=0.0) as srv:  # /metrics says it is off: the run goes on
        p = predictor(srv.url, require_no_prefix_cache=True)
        try:
            (s,) = generate(p, [prompt(0)])
            assert s.error is None and p.describe()["prefix_cache"]["metrics_enabled"] == {f"{srv.url}/v1": False}
        finally:
            p.close()


# -- whole runs: the tiny image+question set, the openai framework, the fake server -----------------------------

ORACLE = MANIFESTS_DIR / "tiny-vlm" / "tiny-vlm-oracle.yaml"


def _entries(out):
    return {e["qsl_idx"]: e for e in json.loads((out / "mlperf_log_accuracy.json").read_text())}


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_accuracy_with_the_endpoint_scores_what_the_oracle_does(run_cli, tmp_path, scenario):
    from mlharness.tasks.generic import vlm_data

    root = vlm_data.write_vlm_questions(tmp_path / "set", count=4)
    table = tmp_path / "answers.json"
    table.write_text(json.dumps(vlm_data.oracle_table(root)["chat"]))
    out = tmp_path / "out"
    with FakeOpenAI(delay_s=0.0, chat_answers=table) as srv:
        proc = run_cli("run", "--manifest", str(ORACLE), "--endpoint", srv.url, "--dataset-path", str(root),
                       "--scenario", scenario, "--mode", "accuracy", "--output", str(out), "--no-progress",
                       timeout=120)
        stats = srv.stats()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((out / "accuracy.txt").read_text()) == {"exact_match": 100.0, "f1": 100.0}
    assert stats["chats"] >= 4 and stats["images"] == stats["chats"]  # a warm-up may come before LoadGen's
    answers = (root / vlm_data.ANSWERS_FILE).read_text().splitlines()
    for i, e in _entries(out).items():  # the server's text, as UTF-8; its usage counted the tokens
        assert bytes.fromhex(e["data"]).decode() == answers[i] and e["token_count"] == len(answers[i])
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["predictor"]["prefix_cache"]["requests_with_cached_tokens"] == 0


def test_a_chat_manifest_with_the_openai_framework_sends_each_image_byte_for_byte(run_cli, tmp_path):
    from mlharness.tasks.generic import vlm_data

    root = vlm_data.write_vlm_questions(tmp_path / "set", count=3)
    rows = vlm_data.read_questions(root)
    out = tmp_path / "out"
    with FakeOpenAI(delay_s=0.001, prefix_cache=True) as srv:
        text = ORACLE.read_text()
        assert text.count("  name: token-oracle\n") == 1 and text.count("max_new_tokens: 32") == 1
        manifest = tmp_path / "chat.yaml"
        manifest.write_text(text.replace("  name: token-oracle\n", "  name: openai\n  options: {endpoints: [\""
                                         f"{srv.url}\"], require_no_prefix_cache: false}}\n")
                            .replace("max_new_tokens: 32", "max_new_tokens: 128"))
        args = ("--dataset-path", str(root), "--scenario", "Offline", "--mode", "accuracy", "--no-progress")
        proc = run_cli("run", "--manifest", str(manifest), "--output", str(out), *args, timeout=120)
        strict = tmp_path / "strict.yaml"  # the rules want prefix caching off: this server has it on
        strict.write_text(manifest.read_text().replace("require_no_prefix_cache: false",
                                                       "require_no_prefix_cache: true"))
        refused = run_cli("run", "--manifest", str(strict), "--output", str(tmp_path / "strict"), *args,
                          timeout=120)
    assert refused.returncode != 0 and "require_no_prefix_cache" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "strict").exists()
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i, e in _entries(out).items():  # the echo names the sha256 of what the server decoded
        sha = hashlib.sha256((root / rows[i]["image"]).read_bytes()).hexdigest()
        assert bytes.fromhex(e["data"]).decode() == f"images {sha}; text {rows[i]['question']}"
    assert "cached prompt token(s)" in proc.stderr  # said once on the terminal
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["predictor"]["prefix_cache"]["requests_with_cached_tokens"] >= 2  # all but the first answer


# -- the in-process vllm predictor's chat input ----------------------------------------------------------------

def test_vllm_chat_input_is_the_templates_text_and_the_decoded_images():
    """What vLLM's multi-modal input is made of, with the tiny Qwen3-VL's own processor (vLLM itself not needed)."""
    from mlharness.predictors.vllm import chat_input
    from mlharness.tasks.qwen3_vl import random_model

    processor = random_model.build_processor(random_model.build_tokenizer())
    pr = prompt(5)
    got = chat_input(processor, pr)
    assert got["prompt"].count("<|vision_start|><|image_pad|><|vision_end|>") == 1
    assert got["prompt"].index("<|image_pad|>") < got["prompt"].index("question 5")
    assert got["prompt"].rstrip().endswith("<|im_start|>assistant")  # the generation prompt
    (image,) = got["multi_modal_data"]["image"]
    assert image.size == (8, 8) and image.getpixel((0, 0)) == (5, 2, 3)  # the PNG's pixels, decoded


VLLM_PYTHON = __import__("os").environ.get("MLHARNESS_VLLM_PYTHON")


def _vllm_runs_image_models(python: str | None) -> bool:
    """vLLM's Python has LoadGen and vLLM's image+text models (their image processors need torchvision, which the
    text-only CI environment leaves out)."""
    import subprocess
    from pathlib import Path

    if not python or not Path(python).is_file():
        return False
    probe = subprocess.run([python, "-c", "import mlperf_loadgen\n"
                            "from vllm.model_executor.models.llava import LlavaForConditionalGeneration"],
                           capture_output=True, timeout=120)
    return probe.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_runs_image_models(VLLM_PYTHON),
                    reason="vLLM with its image+text models (torchvision) and LoadGen is not in MLHARNESS_VLLM_PYTHON")
def test_vllm_runs_the_image_question_set_with_text_answers(tmp_path, shared_cache):
    """The tiny random LLaVA of tiny-vlm-random through the in-process vllm predictor (vLLM's CPU build)."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    text = (MANIFESTS_DIR / "tiny-vlm" / "tiny-vlm-random.yaml").read_text()
    old = "framework:\n  name: transformers\n  version: \"*\"\n"
    assert text.count(old) == 1
    manifest = tmp_path / "vlm-vllm.yaml"
    manifest.write_text(text.replace(old, "framework:\n  name: vllm\n  version: \"*\"\n  options: {dtype: float32, "
                                          "enforce_eager: true, kv_cache_memory_bytes: 268435456, "
                                          "require_no_prefix_cache: true}\n"))
    out = tmp_path / "out"
    env = {**os.environ, "MLHARNESS_CACHE": str(shared_cache), "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([VLLM_PYTHON, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario",
                           "Offline", "--mode", "accuracy", "--output", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=repo)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    entries = _entries(out)
    assert len(entries) == 8  # the set's samples, each once
    for e in entries.values():
        bytes.fromhex(e["data"]).decode("utf-8")
        assert 2 <= e["token_count"] <= 8
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["predictor"]["prefix_caching"] is False


def test_qwen3_vl_oracle_answers_from_the_endpoint_score_its_maximum(run_cli, tmp_path):
    """The product catalogue's chat prompts (system prompt, product image, response_format) through the endpoint:
    the fake server answers each conversation's ground truth, as the token-oracle does, and F1 is 1.0 as there."""
    from mlharness.tasks.qwen3_vl.models import oracle_table
    from mlharness.tasks.qwen3_vl.synth import write_synthetic_qwen3_vl

    root = write_synthetic_qwen3_vl(tmp_path / "catalogue", count=6)
    table = tmp_path / "answers.json"
    table.write_text(json.dumps(oracle_table(root)["chat"]))
    out = tmp_path / "out"
    with FakeOpenAI(delay_s=0.0, chat_answers=table) as srv:
        proc = run_cli("run", "--manifest", "qwen3-vl-235b-a22b-oracle", "--endpoint", srv.url, "--dataset-path",
                       str(root), "--scenario", "Offline", "--mode", "accuracy", "--output", str(out),
                       "--no-progress", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '{"f1": 1.0}' in (out / "accuracy.txt").read_text()
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["framework"]["name"] == "openai"


def test_an_endpoint_run_keeps_the_rules_of_the_manifests_openai_variant(tmp_path):
    from mlharness.manifest.loader import load_manifest
    from mlharness.predictors.openai import endpoint_manifest

    manifest = tmp_path / "ruled.yaml"
    manifest.write_text(ORACLE.read_text() + 'frameworks:\n  openai:\n    framework:\n      name: openai\n'
                        '      version: "*"\n      options: {model: served-name, require_no_prefix_cache: true}\n')
    options = endpoint_manifest(load_manifest(str(manifest)), ["http://127.0.0.1:9"]).model.framework.options
    assert options["require_no_prefix_cache"] is True  # the rule holds for --endpoint too
    assert "model" not in options  # the served name is the endpoint's to tell (GET /v1/models)
