"""Chat prompts (an input of ``type: chat``: messages mixing text and images) through the real CLI and LoadGen: the
tiny random Qwen3-VL (built here, no download) in-process with transformers, its text as UTF-8 responses; the
token-oracle answering chat prompts from its table; bad messages refused with exit status 2 naming the sample,
message and part."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.loadgen.logs import detail_values

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

COUNT = 4

MANIFEST = """\
name: tiny_chat
framework: {{name: {framework}, warmup: 1}}
inputs: [{{name: messages, type: chat, parameters: {{max_image_bytes: {cap}}}}}]
outputs: [{{name: text, element_type: uint8, shape: [-1]}}]
model: {{graph_path: "{model}"}}
response: {{kind: tokens, text: {text}}}
generation: {{max_new_tokens: 8, min_new_tokens: 8}}
batching: {{max_batchsize: 2}}
dataset:
  name: tiny_pictures
  init: |
    def init(count):
        return min(count or {count}, {count})
  load: |
    def load(sample_list):
        pass
preprocess: |
  import io

  from PIL import Image

  BAD = {bad!r}

  def preprocess(ctx, index):
      buf = io.BytesIO()
      picture = Image.new("RGB", (64, 64), (40 * index % 256, 90, 200))
      if index == 2 and BAD == "cap":  # noise does not compress: about 200 KB as a PNG
          picture = Image.merge("RGB", [Image.effect_noise((256, 256), 100)] * 3)
      picture.save(buf, format="PNG")
      image = {{"type": "image", "image": buf.getvalue()}}
      question = {{"type": "text", "text": f"What colour is picture {{index}}?"}}
      user = {{"role": "user", "content": [image, question]}}
      if index == 2 and BAD == "undecodable":
          image["image"] = b"\\x89PNG not really"
      if index == 2 and BAD == "role":
          user["role"] = "narrator"
      if index == 2 and BAD == "part":
          user["content"] = [image, {{"type": "audio", "audio": b""}}]
      return [{{"role": "system", "content": "Answer briefly."}}, user]
"""


def write_manifest(folder: Path, model: Path, framework: str = "transformers", text: bool = True,
                   bad: str = "", cap: int = 1 << 17) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny_chat.yaml"
    path.write_text(MANIFEST.format(framework=framework, model=model, text=str(text).lower(), bad=bad, cap=cap,
                                    count=COUNT))
    return path


def prompt(index: int):
    """The chat prompt the manifest's preprocess makes for ``index`` (checked as the QSL checks it)."""
    from PIL import Image

    from mlharness.predictors.chat import parse_chat

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (40 * index % 256, 90, 200)).save(buf, format="PNG")
    user = {"role": "user", "content": [{"type": "image", "image": buf.getvalue()},
                                        {"type": "text", "text": f"What colour is picture {index}?"}]}
    return parse_chat([{"role": "system", "content": "Answer briefly."}, user], index)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from mlharness.tasks.qwen3_vl.random_model import ensure_random_model

    return ensure_random_model(tmp_path_factory.mktemp("qwen3-vl") / "random")


def entries_of(out: Path) -> dict[int, dict]:
    return {e["qsl_idx"]: e for e in json.loads((out / "mlperf_log_accuracy.json").read_text())}


def test_random_qwen3_vl_answers_in_text(run_cli, tmp_path, checkpoint):
    """Offline accuracy: every sample's response is the text the model's own processor and greedy generation give
    for that conversation, as UTF-8 bytes; token_count is the number of generated ids."""
    from transformers import AutoModelForImageTextToText

    from mlharness.predictors.transformers_chat import encode, load_processor
    from mlharness.predictors.transformers_checks import read_config

    manifest = write_manifest(tmp_path / "m", checkpoint)
    out = tmp_path / "acc"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(out), "--no-progress", timeout=240)
    assert proc.returncode == 0, proc.stderr
    entries = entries_of(out)
    assert sorted(entries) == list(range(COUNT))
    processor = load_processor(checkpoint, read_config(checkpoint, None), None)
    model = AutoModelForImageTextToText.from_pretrained(checkpoint).eval()
    for index in (0, 3):  # the same text as plain greedy generation on the same conversation
        inputs = encode(processor, [prompt(index)], "cpu")
        with torch.inference_mode():
            ids = model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, do_sample=False)
        new = ids[0, inputs["input_ids"].shape[1]:].tolist()
        text = processor.tokenizer.decode(new, skip_special_tokens=True)
        data = bytes.fromhex(entries[index]["data"])
        assert data.decode("utf-8") == text
        assert entries[index]["token_count"] == len(new) == 8


def test_random_qwen3_vl_performance(run_cli, tmp_path, checkpoint):
    manifest = write_manifest(tmp_path / "m", checkpoint)
    out = tmp_path / "perf"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "performance",
                   "--output", str(out), "--no-progress", "--min-duration-ms", "100", "--min-query-count", "8",
                   "--target-qps", "200", timeout=240)
    assert proc.returncode == 0, proc.stderr
    d = detail_values(out / "mlperf_log_detail.txt")
    assert not d.get("errors"), d.get("errors")
    assert (d.get("result_tokens_per_second") or d.get("result_completed_tokens_per_second") or 0) > 0


@pytest.mark.parametrize("bad, said", [
    ("undecodable", ("message 1, part 0", "does not decode")),
    ("role", ("message 1", "unknown role 'narrator'")),
    ("part", ("message 1, part 1", "unknown content part type 'audio'")),
    ("cap", ("message 1, part 0", "max_image_bytes")),
])
def test_bad_chat_input_is_refused_naming_sample_and_part(run_cli, tmp_path, bad, said):
    """Refused at load time with exit status 2, one error paragraph naming the manifest, the sample and the part
    (the token-oracle: no model loads; the messages are checked before any generation)."""
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"chat": {}}))
    manifest = write_manifest(tmp_path / "m", table, framework="token-oracle", bad=bad)
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(tmp_path / "out"), "--no-progress", timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err and "error:" in err
    for text in (str(manifest), "preprocess", "sample 2", *said):
        assert text in err, (text, err)


def test_token_oracle_answers_chat_prompts(run_cli, tmp_path):
    """The oracle streams each conversation's answer from its table (keyed by ChatPrompt.key) as UTF-8 bytes,
    one id per byte, and with response.text writes the text itself."""
    answers = {prompt(i).key: f"picture {i} is blue \u00e9" for i in range(COUNT)}
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"chat": answers}))
    for text in (True, False):
        manifest = write_manifest(tmp_path / f"m{text}", table, framework="token-oracle", text=text)
        out = tmp_path / f"acc{text}"
        proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy",
                       "--output", str(out), "--no-progress", timeout=120)
        assert proc.returncode == 0, proc.stderr
        for index, e in entries_of(out).items():
            answer = f"picture {index} is blue \u00e9".encode()
            data = bytes.fromhex(e["data"])
            assert e["token_count"] == len(answer)
            got = data if text else np.frombuffer(data, dtype=np.int32).astype(np.uint8).tobytes()
            assert got == answer


TOY = """\
name: toy_text
framework: {name: token-toy, warmup: 0}
inputs: [{name: ids, element_type: int64, shape: [-1]}]
outputs: [{name: text, element_type: uint8, shape: [-1]}]
response: {kind: tokens, text: true}
dataset:
  name: toy
  init: |
    def init(count):
        return 4
  load: |
    def load(sample_list):
        pass
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.arange(3, 9, dtype=np.int64)
"""


def test_a_predictor_without_text_responses_is_refused_naming_it(run_cli, tmp_path):
    """response.text on a predictor that gives only ids: the run fails (exit 3) naming the predictor."""
    manifest = tmp_path / "toy.yaml"
    manifest.write_text(TOY)
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy", "--output",
                   str(tmp_path / "out"), "--no-progress", timeout=120)
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert "'token-toy'" in proc.stderr and "response.text" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("change, said", [
    ({"response": {"kind": "tokens", "text": True, "element_type": "int32"}}, "element_type uint8"),
    ({"response": {"kind": "tensor", "text": True, "element_type": "uint8"}}, "need kind 'tokens'"),
    ({"inputs": [{"name": "messages", "type": "chat"}, {"name": "ids", "element_type": "int64"}]},
     "'chat'"),
    ({"response": {"kind": "tensor"}}, "'chat'"),
])
def test_schema_refuses_what_a_chat_model_cannot_be(run_cli, tmp_path, change, said):
    import yaml

    data = {"name": "m", "framework": {"name": "token-oracle"}, "inputs": [{"name": "messages", "type": "chat"}],
            "outputs": [{"name": "text", "element_type": "uint8"}], "response": {"kind": "tokens", "text": True},
            **change}
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(data))
    proc = run_cli("manifest", "validate", str(manifest), timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert said in proc.stderr and str(manifest) in proc.stderr and "Traceback" not in proc.stderr


def test_chat_prompts_are_kept_whole_in_the_sample_store():
    """One object per sample: gathered singly (the token SUT) and as a batch, the ChatPrompt itself comes back."""
    from mlharness.kinds.chat.input import chat_sample
    from mlharness.loadgen.qsl import SampleStore

    store = SampleStore(6, 1)
    store.put_all({i: (chat_sample([{"role": "user", "content": f"q{i}"}], i, {}, "m.yaml"),) for i in (1, 4, 5)})
    assert store.gather(np.asarray([4]))[0][0].text == "q4"
    batch = store.gather(np.asarray([5, 1]))[0]
    assert [p.index for p in batch] == [5, 1]
    store.drop([4])
    assert store.loaded_count() == 2 and store.gather(np.asarray([1]))[0][0].messages[0].role == "user"
