"""The transformers predictor on a tiny random-weight Llama (built here from a LlamaConfig, with a tokenizer made
locally with the tokenizers library: no download) through the real CLI and LoadGen, in the four scenarios of a
generative model, in accuracy and performance modes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlharness.loadgen.logs import detail_values

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

VOCAB, PROMPT_LEN, NEW_TOKENS, COUNT = 96, 12, 6, 10

MANIFEST = """\
name: tiny_llama
framework:
  name: transformers
  warmup: 1
inputs: [{{name: input_ids, element_type: int64, shape: [-1]}}]
outputs: [{{name: tokens, element_type: int32, shape: [-1]}}]
model: {{graph_path: "{checkpoint}"}}
response: {{kind: tokens}}
generation: {{max_new_tokens: {new_tokens}, min_new_tokens: {new_tokens}}}
batching: {{max_batchsize: 4}}
dataset:
  name: tiny_prompts
  init: |
    def init(count):
        return min(count or {count}, {count})
  load: |
    def load(sample_list):
        pass
preprocess: |
  import numpy as np

  def preprocess(ctx, index):
      return np.random.default_rng(index).integers(3, {vocab}, size={prompt_len}).astype(np.int64)
"""

PERF = {
    "Offline": ["--min-duration-ms", "100", "--min-query-count", "8", "--target-qps", "1000"],
    "Server": ["--min-duration-ms", "300", "--min-query-count", "8", "--target-qps", "20"],
    "Interactive": ["--min-duration-ms", "300", "--min-query-count", "8", "--target-qps", "20"],
    "SingleStream": ["--min-duration-ms", "200", "--min-query-count", "8", "--target-latency-ms", "1"],
}


def prompt(index: int) -> np.ndarray:
    return np.random.default_rng(index).integers(3, VOCAB, size=PROMPT_LEN).astype(np.int64)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    from tests.helpers.tiny_llama import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), VOCAB)


@pytest.fixture(scope="module")
def manifest(checkpoint, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("manifest") / "tiny_llama.yaml"
    path.write_text(MANIFEST.format(checkpoint=checkpoint, new_tokens=NEW_TOKENS, count=COUNT, vocab=VOCAB,
                                    prompt_len=PROMPT_LEN))
    return path


def reference_tokens(checkpoint: Path, index: int) -> list[int]:
    """Greedy generation of one prompt with plain transformers, no harness."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    ids = torch.from_numpy(prompt(index))[None]
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                         min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=2)
    return out[0, PROMPT_LEN:].tolist()


@pytest.mark.parametrize("scenario", ["Offline", "Server", "SingleStream", "Interactive"])
def test_accuracy_log_holds_the_greedy_tokens(run_cli, tmp_path, checkpoint, manifest, scenario):
    out = tmp_path / "acc"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", scenario, "--mode", "accuracy", "--output",
                   str(out), "--no-progress", timeout=180)
    assert proc.returncode == 0, proc.stderr
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(COUNT))
    assert not detail_values(out / "mlperf_log_detail.txt").get("errors")
    by_index = {e["qsl_idx"]: e for e in entries}
    for e in entries:
        ids = np.frombuffer(bytes.fromhex(e["data"]), dtype=np.int32)
        assert e["token_count"] == len(ids) == NEW_TOKENS
        assert ((ids >= 0) & (ids < VOCAB)).all()
    for index in (0, 7):  # the same tokens as plain greedy generation (equal prompt lengths: no padding)
        ids = np.frombuffer(bytes.fromhex(by_index[index]["data"]), dtype=np.int32).tolist()
        assert ids == reference_tokens(checkpoint, index)


@pytest.mark.parametrize("scenario", ["Offline", "Server", "SingleStream", "Interactive"])
def test_performance_measures_tokens(run_cli, tmp_path, manifest, scenario):
    out = tmp_path / "perf"
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", scenario, "--mode", "performance", "--output",
                   str(out), "--no-progress", *PERF[scenario], timeout=180)
    assert proc.returncode == 0, proc.stderr
    d = detail_values(out / "mlperf_log_detail.txt")
    assert not d.get("errors"), d.get("errors")
    assert d["requested_use_token_latencies"] is True
    tps = d.get("result_tokens_per_second") or d.get("result_completed_tokens_per_second")
    assert tps and tps > 0
    assert "tokens/s" in proc.stdout
    if scenario != "Offline":
        ttft, e2e = d["result_first_token_mean_latency_ns"], d["result_mean_latency_ns"]
        assert 0 < ttft < e2e
        if scenario == "SingleStream":  # nothing queues: the first of 6 tokens is reported well before the last
            assert ttft < 0.8 * e2e, (ttft, e2e)
        assert "TTFT" in proc.stdout and "TPOT" in proc.stdout
