"""Submission rules of the LLM benchmarks (llama3.1-8b, llama3.1-8b-edge): TEST06's verification, the tables
`submission run` takes its audits from, and the checker's LLM rules on a results tree written here in LoadGen's
formats (one well-formed tree, then one broken rule at a time)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mlharness.rounds import ROUNDS
from mlharness.submission.checker import check
from mlharness.submission.rules import SYSTEM_DESC_REQUIRED_FIELDS, compliance_tests_for_model
from mlharness.submission.test06 import check_entries, eos_ids_of, verify
from tests.helpers.loadgen_logs import write_run

EOS = {128001, 128008, 128009}


def entry(i: int, tokens: list[int], first: int = 1, token_count: int | None = None) -> dict:
    data = np.asarray(tokens, dtype=np.int32)
    return {"seq_id": i, "qsl_idx": i, "data": data.tobytes().hex().upper(),
            "token_data": data[:first].tobytes().hex().upper(),
            "token_count": len(tokens) if token_count is None else token_count}


def answers(n: int = 5) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [[int(t) for t in rng.integers(10, 1000, size=int(rng.integers(2, 12)))] + [128009] for _ in range(n)]


def write_log(folder: Path, entries: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    return folder


# -- TEST06 -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["Server", "Interactive", "SingleStream"])
def test_test06_passes_on_correct_streams(tmp_path, scenario):
    run = write_log(tmp_path / "run", [entry(i, a) for i, a in enumerate(answers())])
    result = verify(run, tmp_path / "results" / scenario, scenario, EOS)
    assert result.passed, result.problems
    text = (tmp_path / "results" / scenario / "TEST06" / "verify_accuracy.txt").read_text()
    assert text.splitlines() == ["First token check pass: True", "EOS check pass: True",
                                 "Sample length check pass: True", "TEST06 verification complete"]
    assert (tmp_path / "results" / scenario / "TEST06" / "accuracy" / "mlperf_log_accuracy.json").is_file()


def test_test06_fails_on_outputs_padded_with_two_eos(tmp_path):
    padded = [a + [128009] for a in answers()]  # each answer already ends with one EOS
    run = write_log(tmp_path / "run", [entry(i, a) for i, a in enumerate(padded)])
    result = verify(run, tmp_path / "out", "Offline", EOS)
    assert not result.passed and result.eos is False and result.first_token is None
    lines = (tmp_path / "out" / "TEST06" / "verify_accuracy.txt").read_text().splitlines()
    assert "EOS check pass: False" in lines and "First token check pass: Skipped" in lines
    assert lines[-1] == "TEST06 verification failed"
    # two different EOS ids of the same tokenizer count as repeated EOS too
    mixed = [a + [128001] for a in answers()]
    assert check_entries([entry(i, a) for i, a in enumerate(mixed)], "Offline", EOS).eos is False
    # the reference's single id would miss that tail
    assert check_entries([entry(i, a) for i, a in enumerate(mixed)], "Offline", {128009}).eos is True


def test_test06_first_token_and_length_checks(tmp_path):
    good = answers()
    wrong_first = [entry(i, a) for i, a in enumerate(good)]
    wrong_first[2]["token_data"] = np.asarray([7], dtype=np.int32).tobytes().hex()
    r = check_entries(wrong_first, "Server", EOS)
    assert r.first_token is False and r.eos and r.length and "sample 2" in r.problems[0]
    assert check_entries(wrong_first, "Offline", EOS).passed  # Offline skips the first-token check
    bad_count = [entry(i, a, token_count=len(a) + 1 if i == 1 else None) for i, a in enumerate(good)]
    assert check_entries(bad_count, "Offline", EOS).length is False


def test_eos_ids_come_from_the_generation_config_and_tokenizer(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [128001, 128008, 128009]}))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 128009}))
    assert eos_ids_of(tmp_path) == EOS


def test_llm_audits_are_test06_only():
    assert compliance_tests_for_model("llama3_1-8b") == ("TEST06",)
    assert compliance_tests_for_model("llama3_1-8b-edge") == ()
    assert compliance_tests_for_model("resnet50") == ("TEST01", "TEST04")
    from mlharness.submission.orchestrate import audit_config

    text = audit_config("TEST06", "llama3_1-8b").read_text()
    assert "*.*.accuracy_log_sampling_target = 100" in text and "*.*.mode = 2" in text


# -- the checker -------------------------------------------------------------------------------------------------
ROUND = "v6.1"
SEEDS = {f"effective_{k}": v for k, v in ROUNDS[ROUND].seeds.items()}
ACCURACY_LINE = ("{'rouge1': '38.9', 'rouge2': '16.0', 'rougeL': '24.6', 'rougeLsum': '35.9', "
                 "'gen_len': 8167644, 'gen_num': 13368, 'tokens_per_sample': 610.9}")
SERVER_LAT = {"Server": (1_500_000_000, 80_000_000), "Interactive": (400_000_000, 25_000_000)}


def perf_values(scenario: str) -> dict:
    lg = "Server" if scenario == "Interactive" else scenario
    v = {**SEEDS, "effective_min_duration_ms": 600000, "effective_performance_sample_count": 13368,
         "effective_sample_concatenate_permutation": True, "requested_use_token_latencies": True,
         "effective_target_latency_ns": 0, "early_stopping_met": True, "effective_min_query_count": 100}
    if lg == "Offline":
        v.update(effective_samples_per_query=13368, result_tokens_per_second=2500.0)
    elif lg == "SingleStream":
        v.update({"result_90.00_percentile_latency_ns": 900_000_000})
    else:
        ttft, tpot = SERVER_LAT[scenario]
        v.update({"result_first_token_99.00_percentile_latency_ns": ttft,
                  "result_time_per_output_token_99.00_percentile_ns": tpot,
                  "result_completed_tokens_per_second": 1800.0})
    return v


def llm_scenario(scen_dir: Path, scenario: str) -> None:
    lg = "Server" if scenario == "Interactive" else scenario
    write_run(scen_dir / "performance" / "run_1", lg, 5.0, **perf_values(scenario))
    acc = scen_dir / "accuracy"
    write_run(acc, lg, 5.0, effective_test_mode="AccuracyOnly", effective_accuracy_sample_count=13368)
    (acc / "mlperf_log_accuracy.json").write_text("[]")
    (acc / "accuracy.txt").write_text(f"\nResults\n\n{ACCURACY_LINE}\nhash=abc123\n")
    for name, text in (("user.conf", "*.Server.target_qps = 1\n"), ("README.md", "x\n")):
        (scen_dir / name).write_text(text)
    (scen_dir / "measurements.json").write_text(json.dumps(
        {k: "x" for k in ("input_data_types", "retraining", "starting_weights_filename", "weight_data_types",
                          "weight_transformations")}))
    if lg != "SingleStream" and scen_dir.parent.name == "llama3.1-8b":
        run = write_log(scen_dir.parents[5] / ".raw" / scenario, [entry(i, a) for i, a in enumerate(answers())])
        verify(run, scen_dir, scenario, EOS)


@pytest.fixture
def tree(tmp_path) -> Path:
    sub = tmp_path / "closed" / "Acme"
    system = {k: "x" for k in SYSTEM_DESC_REQUIRED_FIELDS}
    system.update(division="closed", submitter="Acme", status="available", system_type="datacenter",
                  system_name="box", number_of_nodes=1)
    (sub / "systems").mkdir(parents=True)
    (sub / "systems" / "box.json").write_text(json.dumps(system))
    (sub / "src").mkdir()
    (sub / "src" / "README.md").write_text("x\n")
    for scenario in ("Offline", "Server", "Interactive"):
        llm_scenario(sub / "results" / "box" / "llama3.1-8b" / scenario, scenario)
    return tmp_path


def errors(root: Path) -> list[str]:
    return [str(f) for f in check(root, round_name=ROUND).errors]


def test_a_well_formed_llama_tree_passes(tree):
    report = check(tree, round_name=ROUND)
    assert report.passed, [str(f) for f in report.errors]
    rows = {r.scenario: r for r in report.rows}
    assert set(rows) == {"Offline", "Server", "Interactive"}
    assert rows["Offline"].result == "2,500.0 tokens/s" and rows["Server"].result == "1,800.0 tokens/s"
    assert "ROUGE1 38.9" in rows["Offline"].accuracy and rows["Interactive"].compliance == "TEST06 PASS"


SCEN = Path("closed/Acme/results/box/llama3.1-8b")


def detail_set(tree: Path, scenario: str, **changes) -> None:
    path = tree / SCEN / scenario / "performance" / "run_1"
    values = {**perf_values(scenario), **changes}
    write_run(path, "Server" if scenario == "Interactive" else scenario, 5.0, **values)


def test_each_llm_rule_is_named(tree):
    detail_set(tree, "Offline", requested_use_token_latencies=False)
    detail_set(tree, "Server", **{"result_first_token_99.00_percentile_latency_ns": 2_000_000_000})
    detail_set(tree, "Interactive", **{"result_time_per_output_token_99.00_percentile_ns": 31_000_000})
    acc = tree / SCEN / "Offline" / "accuracy" / "accuracy.txt"
    acc.write_text(acc.read_text().replace("'rouge2': '16.0'", "'rouge2': '15.0'")
                   .replace("'gen_len': 8167644", "'gen_len': np.int64(8167644)"))
    acc = tree / SCEN / "Server" / "accuracy" / "accuracy.txt"
    acc.write_text(acc.read_text().replace("'gen_len': 8167644", "'gen_len': 9000000"))
    found = "\n".join(errors(tree))
    assert f"{SCEN}/Offline/performance/run_1/mlperf_log_detail.txt: requested_use_token_latencies is False" in found
    assert "p99 TTFT 2000 ms is not under the Server limit 2000 ms" in found
    assert "p99 TPOT 31 ms is not under the Interactive limit 30 ms" in found
    assert "ROUGE2 15 is below the closed-division target 15.74843" in found
    assert "holds no GEN_LEN figure" in found
    assert "GEN_LEN 9e+06 is above the upper limit 8984408" in found


def test_scenario_and_audit_rules(tree):
    shutil.rmtree(tree / SCEN / "Server")
    shutil.rmtree(tree / SCEN / "Interactive")
    assert any("missing required scenario(s) for datacenter systems: at least one of Server / Interactive" in e
               for e in errors(tree))
    llm_scenario(tree / SCEN / "Server", "Server")
    padded = [entry(i, a + [128009]) for i, a in enumerate(answers())]
    verify(write_log(tree / "t06", padded), tree / SCEN / "Server", "Server", EOS)
    found = errors(tree)
    assert any("Server/TEST06/verify_accuracy.txt: TEST06 did not pass (EOS check pass: False)" in e for e in found)
    shutil.rmtree(tree / SCEN / "Server" / "TEST06")
    assert any("Server/TEST06: missing: llama3.1-8b results need the TEST06 audit" in e for e in errors(tree))


def test_interactive_directory_must_hold_a_server_run(tree):
    write_run(tree / SCEN / "Interactive" / "performance" / "run_1", "Offline", 5.0, **perf_values("Offline"))
    assert any("is a Offline run in the Interactive directory" in e for e in errors(tree))


def test_edge_tree_needs_no_audit(tree):
    root = tree / "closed" / "Acme"
    desc = json.loads((root / "systems" / "box.json").read_text())
    (root / "systems" / "box.json").write_text(json.dumps({**desc, "system_type": "edge"}))
    shutil.rmtree(root / "results" / "box" / "llama3.1-8b")
    for scenario in ("SingleStream", "Offline"):
        llm_scenario(root / "results" / "box" / "llama3.1-8b-edge" / scenario, scenario)
    for scenario in ("SingleStream", "Offline"):
        detail = root / "results" / "box" / "llama3.1-8b-edge" / scenario / "performance" / "run_1"
        write_run(detail, scenario, 5.0, **{**perf_values(scenario), "effective_performance_sample_count": 5000,
                                            "effective_samples_per_query": 5000})
        acc = root / "results" / "box" / "llama3.1-8b-edge" / scenario / "accuracy"
        write_run(acc, scenario, 5.0, effective_test_mode="AccuracyOnly", effective_accuracy_sample_count=5000)
        (acc / "accuracy.txt").write_text("{'rouge1': '39.1', 'rouge2': '16.2', 'rougeL': '24.7', "
                                          "'rougeLsum': '36.2', 'gen_len': 3051113, 'gen_num': 5000}\nhash=ab\n")
    report = check(tree, round_name=ROUND)
    assert report.passed, [str(f) for f in report.errors]
    assert {r.scenario for r in report.rows} == {"SingleStream", "Offline"}


def test_submission_verification_of_a_test06_directory(tmp_path):
    """What `submission run` does after the TEST06 run placed its sampled log in TEST06/accuracy/."""
    from mlharness.submission.compliance import verify_scenario

    scen = tmp_path / "Server"
    write_log(scen / "TEST06" / "accuracy", [entry(i, a) for i, a in enumerate(answers())])
    (verdict,) = verify_scenario(scen, ["TEST06"], eos_ids=EOS)
    assert verdict.passed and verdict.test == "TEST06"
    write_log(scen / "TEST06" / "accuracy", [entry(i, a + [128008]) for i, a in enumerate(answers())])
    (verdict,) = verify_scenario(scen, ["TEST06"], eos_ids=EOS)
    assert not verdict.passed and "EOS check pass: False" in (scen / "TEST06" / "verify_accuracy.txt").read_text()
    with pytest.raises(Exception, match="EOS token id"):
        verify_scenario(scen, ["TEST06"])


def test_interactive_user_conf_lines_use_the_interactive_model_name():
    from mlharness.loadgen.settings import effective_user_conf

    text = effective_user_conf(None, "llama3_1-8b", "Interactive", {"target_qps": 2.5, "min_duration_ms": 1000})
    assert "llama3_1-8b-interactive.Server.target_qps = 2.5" in text
    assert "llama3_1-8b-interactive.Server.min_duration = 1000" in text
    assert "llama3_1-8b.Server.target_qps = 2.5" in effective_user_conf(None, "llama3_1-8b", "Server",
                                                                        {"target_qps": 2.5})
