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
# ... and at most its upper limit
LLM_ACCURACY_UPPER: dict[str, dict[str, float]] = {
    "llama3.1-8b": {"GEN_LEN": 8167644 * 1.1},
    "llama3.1-8b-edge": {"GEN_LEN": 3051113 * 1.1},
}

# p99 time to first token / time per output token (ns) a run must stay strictly under (LLM_LATENCY_LIMITS)
LLM_LATENCY_LIMITS: dict[str, dict[str, dict[str, int]]] = {
    "llama3.1-8b": {"Server": {"ttft": 2000 * 1000000, "tpot": 100 * 1000000},
                    "Interactive": {"ttft": 500 * 1000000, "tpot": 30 * 1000000}},
}

# Scenario directories of LLM benchmarks that LoadGen runs as another scenario, and the conf model name it uses.
RESULT_SCENARIOS = {"Interactive": "Server"}
INTERACTIVE_MODEL = {"llama3_1-8b": "llama3_1-8b-interactive"}

# datacenter systems: Offline plus at least one of these
DATACENTER_ONE_OF = {"llama3.1-8b": ("Server", "Interactive")}

# LoadGen conf model name -> the benchmarks' results directory name (model_mapping)
LLM_MODELS = {"llama3_1-8b": "llama3.1-8b", "llama3_1-8b-edge": "llama3.1-8b-edge",
              "llama3_1-8b-interactive": "llama3.1-8b"}
# Models whose results need TEST06 (models_TEST06); the edge benchmark needs no audit.
TEST06_MODELS = frozenset({"llama3_1-8b", "llama3_1-8b-interactive"})

TEST06_LINES = ("First token check pass", "EOS check pass", "Sample length check pass")


def is_llm(benchmark: str | None) -> bool:
    return benchmark in LLM_ACCURACY_TARGETS


def loadgen_scenario(scenario_dir: str) -> str:
    """The LoadGen scenario a results directory holds (Interactive -> Server)."""
    return RESULT_SCENARIOS.get(scenario_dir, scenario_dir)


def conf_model_for(model: str, scenario_dir: str) -> str:
    """The LoadGen conf model name of a directory's runs (llama3_1-8b in Interactive -> llama3_1-8b-interactive)."""
    return INTERACTIVE_MODEL.get(model, model) if scenario_dir == "Interactive" else model
