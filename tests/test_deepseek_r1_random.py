"""deepseek-r1-random: a tiny random-weight DeepseekV3ForCausalLM built from a config (no download) generating on
the synthetic deepseek-r1 prompts through LoadGen, Offline and Server, with token latencies measured."""

from __future__ import annotations

import json

import pytest

from mlharness.loadgen.logs import detail_values

pytest.importorskip("pandas")

PERF = {"Offline": ["--min-duration-ms", "100", "--min-query-count", "4", "--target-qps", "10"],
        "Server": ["--min-duration-ms", "300", "--min-query-count", "4", "--target-qps", "2"]}


def test_the_checkpoint_is_a_deepseek_v3_and_generates_offline(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from mlharness.tasks.deepseek_r1.models import ensure_random_deepseek

    folder = ensure_random_deepseek(tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "deepseek_v3" and config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert config["n_routed_experts"] == 4 and config["kv_lora_rank"] == 32  # MoE and latent attention
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True).eval()
    ids = torch.tensor([[128000 % model.config.vocab_size, 17, 42, 99]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                         do_sample=False)
    assert out.shape == (1, 8)
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert ensure_random_deepseek(folder) == folder and (folder / "model.safetensors").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_random_model_runs_with_token_latencies(run_cli, tmp_path, scenario):
    out = tmp_path / "perf"
    proc = run_cli("run", "--manifest", "deepseek-r1-random", "--scenario", scenario, "--mode", "performance",
                   "--count", "4", "--output", str(out), "--no-progress", *PERF[scenario], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = detail_values(out / "mlperf_log_detail.txt")
    assert not d.get("errors"), d.get("errors")
    assert d["requested_use_token_latencies"] is True
    tps = d.get("result_tokens_per_second") or d.get("result_completed_tokens_per_second")
    assert tps and tps > 0
    if scenario == "Server":  # the deepseek-r1 limits from mlperf.conf, and both latencies measured
        assert d["requested_server_ttft_latency"] == 2_000_000_000
        assert d["requested_server_tpot_latency"] == 80_000_000
        assert 0 < d["result_first_token_99.00_percentile_latency_ns"]
        assert 0 < d["result_time_per_output_token_99.00_percentile_ns"]
