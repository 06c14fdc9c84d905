"""The checker's rules for generative (LLM) benchmarks, as data: llama3.1-8b (datacenter) and llama3.1-8b-edge.

Source: the MLCommons submission checker v6.0/v6.1 (``constants.py``: accuracy targets and upper limits,
``LLM_LATENCY_LIMITS``, dataset sizes, required scenarios, ``models_TEST06``; ``checks/performance_check.py``
``llm_check``) and ``compliance/TEST06``. An Interactive result is a LoadGen Server run made with the
``<model>-interactive`` conf model name, filed in an ``Interactive`` directory.
"""

from __future__ import annotations

# accuracy.txt patterns of language/llama3.1-8b/evaluation.py output (constants.py ACC_PATTERN)
LLM_ACC_PATTERNS = {
    "ROUGE1": r".*'rouge1':\s+'?([\d.]+)'?.*",
    "ROUGE2": r".*'rouge2':\s+'?([\d.]+)'?.*",
    "ROUGEL": r".*'rougeL':\s+'?([\d.]+)'?.*",
    "ROUGELSUM": r".*'rougeLsum':\s+'?([\d.]+)'?.*",
    "GEN_LEN": r".*'gen_len':\s([\d.]+).*",
    "TOKENS_PER_SAMPLE": r".*'tokens_per_sample':\s([\d.]+).*",
}

# closed division: every figure at least its target ...
LLM_ACCURACY_TARGETS: dict[str, dict[str, float]] = {
    "llama3.1-8b": {"ROUGE1": 38.7792 * 0.99, "ROUGE2": 15.9075 * 0.99, "ROUGEL": 24.4957 * 0.99,
                    "ROUGELSUM": 35.793 * 0.99, "GEN_LEN": 8167644 * 0.9},
    "llama3.1-8b-edge": {"ROUGE1": 39.06 * 0.99, "ROUGE2": 16.1147 * 0.99, "ROUGEL": 24.6375 * 0.99,
                         "ROUGELSUM": 36.124 * 0.99, "GEN_LEN": 3051113 * 0.9},
}
# llama2-70b-99.9: ROUGE at 99.9 % of the reference, and tokens per sample within 0.9-1.1x of its 294.45
LLM_ACCURACY_TARGETS["llama2-70b-99.9"] = {"ROUGE1": 44.4312 * 0.999, "ROUGE2": 22.0352 * 0.999,
                                           "ROUGEL": 28.6162 * 0.999, "TOKENS_PER_SAMPLE": 294.45 * 0.9}
# ... and at most its upper limit
LLM_ACCURACY_UPPER: dict[str, dict[str, float]] = {
    "llama3.1-8b": {"GEN_LEN": 8167644 * 1.1},
    "llama3.1-8b-edge": {"GEN_LEN": 3051113 * 1.1},
}
LLM_ACCURACY_UPPER["llama2-70b-99.9"] = {"TOKENS_PER_SAMPLE": 294.45 * 1.1}

# p99 time to first token / time per output token (ns) a run must stay strictly under (LLM_LATENCY_LIMITS)
LLM_LATENCY_LIMITS: dict[str, dict[str, dict[str, int]]] = {
    "llama3.1-8b": {"Server": {"ttft": 2000 * 1000000, "tpot": 100 * 1000000},
                    "Interactive": {"ttft": 500 * 1000000, "tpot": 30 * 1000000}},
}
LLM_LATENCY_LIMITS["llama2-70b-99.9"] = {"Server": {"ttft": 2000 * 1000000, "tpot": 200 * 1000000},
                                         "Interactive": {"ttft": 450 * 1000000, "tpot": 40 * 1000000}}

# Scenario directories of LLM benchmarks that LoadGen runs as another scenario, and the conf model name it uses.
RESULT_SCENARIOS = {"Interactive": "Server"}
INTERACTIVE_MODEL = {"llama3_1-8b": "llama3_1-8b-interactive"}
INTERACTIVE_MODEL["llama2-70b"] = "llama2-70b-interactive"

# datacenter systems: Offline plus at least one of Server / Interactive (both optional in the checker's tables)

# LoadGen conf model name -> the benchmarks' results directory name (model_mapping)
LLM_MODELS = {"llama3_1-8b": "llama3.1-8b", "llama3_1-8b-edge": "llama3.1-8b-edge",
              "llama3_1-8b-interactive": "llama3.1-8b"}
LLM_MODELS.update({"llama2-70b": "llama2-70b-99.9", "llama2-70b-interactive": "llama2-70b-99.9"})
# Models whose results need TEST06 (models_TEST06); the edge benchmark needs no audit.
TEST06_MODELS = frozenset({"llama3_1-8b", "llama3_1-8b-interactive"})
TEST06_MODELS |= {"llama2-70b", "llama2-70b-interactive"}  # llama2-70b-99.9 (and -interactive-99.9) in models_TEST06

# deepseek-r1 (language/deepseek-r1/eval_accuracy.py prints exact_match and tokens_per_sample): exact_match at
# 99 % of 81.3582, tokens per sample within 0.9-1.1x of 3886.2274; Server TTFT 2 s / TPOT 80 ms, Interactive
# (conf model deepseek-r1-interactive) 1.5 s / 15 ms; Offline plus Server or Interactive; in models_TEST06.
LLM_ACC_PATTERNS["exact_match"] = r".*'exact_match':\s([\d.]+).*"
LLM_ACCURACY_TARGETS["deepseek-r1"] = {"exact_match": 0.99 * 81.3582, "TOKENS_PER_SAMPLE": 0.9 * 3886.2274}
LLM_ACCURACY_UPPER["deepseek-r1"] = {"TOKENS_PER_SAMPLE": 1.1 * 3886.2274}
LLM_LATENCY_LIMITS["deepseek-r1"] = {"Server": {"ttft": 2000 * 1000000, "tpot": 80 * 1000000},
                                     "Interactive": {"ttft": 1500 * 1000000, "tpot": 15 * 1000000}}
INTERACTIVE_MODEL["deepseek-r1"] = "deepseek-r1-interactive"
LLM_MODELS.update({"deepseek-r1": "deepseek-r1", "deepseek-r1-interactive": "deepseek-r1"})
TEST06_MODELS |= {"deepseek-r1", "deepseek-r1-interactive"}

# gpt-oss-120b (language/gpt-oss-120b/eval_mlperf_accuracy.py prints 'exact_match'): exact_match at 99 % of 83.13;
# the checker's tokens-per-sample upper limit is a placeholder (1.1 x 9999) matched by nothing the script prints;
# Server TTFT 3 s / TPOT 80 ms, Interactive (conf model gpt-oss-120b-interactive) 2 s / 15 ms; Offline plus Server
# or Interactive; TEST07 and TEST09 (models_TEST07, models_TEST09), no TEST06.
LLM_ACC_PATTERNS.setdefault("exact_match", r".*'exact_match':\s([\d.]+).*")
LLM_ACCURACY_TARGETS["gpt-oss-120b"] = {"exact_match": 83.13 * 0.99}
LLM_ACCURACY_UPPER["gpt-oss-120b"] = {"TOKENS_PER_SAMPLE": 1.1 * 9999}
LLM_LATENCY_LIMITS["gpt-oss-120b"] = {"Server": {"ttft": 3000 * 1000000, "tpot": 80 * 1000000},
                                      "Interactive": {"ttft": 2000 * 1000000, "tpot": 15 * 1000000}}
INTERACTIVE_MODEL["gpt-oss-120b"] = "gpt-oss-120b-interactive"
LLM_MODELS.update({"gpt-oss-120b": "gpt-oss-120b", "gpt-oss-120b-interactive": "gpt-oss-120b"})
TEST07_TEST09_MODELS = frozenset({"gpt-oss-120b", "gpt-oss-120b-interactive"})

# qwen3-vl-235b-a22b is no LLM here (end-to-end latency, its rules in rules.py)

# whisper (speech2text/accuracy_eval.py prints "Word Error Rate: X%, accuracy=Y%"): accuracy = 100 - WER at 99 % of
# 100 - 2.0671; Offline only for edge and datacenter; measured with token latencies (mlperf.conf
# whisper.*.use_token_latencies = 1), its Offline result in tokens/s (RESULT_FIELD_BENCHMARK_OVERWRITE); TEST01.
LLM_ACC_PATTERNS["ACCURACY"] = r"Word Error Rate\:.*, accuracy=([0-9\.]+)%"
LLM_ACCURACY_TARGETS["whisper"] = {"ACCURACY": (100.0 - 2.0671) * 0.99}
LLM_MODELS["whisper"] = "whisper"

TEST06_LINES = ("First token check pass", "EOS check pass", "Sample length check pass")


def is_llm(benchmark: str | None) -> bool:
    return benchmark in LLM_ACCURACY_TARGETS


def loadgen_scenario(scenario_dir: str) -> str:
    """The LoadGen scenario a results directory holds (Interactive -> Server)."""
    return RESULT_SCENARIOS.get(scenario_dir, scenario_dir)


def conf_model_for(model: str, scenario_dir: str) -> str:
    """The LoadGen conf model name of a directory's runs (llama3_1-8b in Interactive -> llama3_1-8b-interactive)."""
    return INTERACTIVE_MODEL.get(model, model) if scenario_dir == "Interactive" else model
