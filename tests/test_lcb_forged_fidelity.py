"""deepseek-r1 and gpt-oss-120b accuracy on logs whose LiveCodeBench programs try to forge their own verdict,
against what the official scripts printed for the same logs.

``tests/fixtures/deepseek_r1_forged/`` and ``tests/fixtures/gpt_oss_forged/``: a few honest answers and the
``ADVERSARIAL`` programs of ``deepseek_r1_forged/make_fixture.py`` (a forged result line then ``_exit``, a patched
``os.write``, the expected output read from the grader's frames, the comparison replaced through frame globals, a
forged line on the real stdout, other processes' environments read, framed answers written to every inherited
pipe), the official stdout and per-entry verdicts. In the official run the programs' own writes to descriptor 1
went to the script's stdout: those lines (they start with ``make_fixture.MARK``) are not the script's and are left
out of the comparison. The environment-reading program passes only if it finds the secret this test puts in the
grader's environment (the official run had none, and scored it 0).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.helpers.cli import cli

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("pylatexenc")
pytest.importorskip("openai_harmony")

FIXTURES = Path(__file__).parent / "fixtures"
DS = FIXTURES / "deepseek_r1_forged"
GO = FIXTURES / "gpt_oss_forged"
GO_TOKENIZER = FIXTURES / "gpt_oss" / "tokenizer"
TIMEOUT = "5"


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORGED = _module("deepseek_r1_forged_fixture", DS / "make_fixture.py")
NAMES = list(FORGED.ADVERSARIAL)
FD_WRITER = "framed answers on every fd"
# "framed answers on every fd" writes reply frames into every inherited descriptor, the sandbox's channel among
# them: every request carries a nonce its reply must echo, so those frames are no reply and the program fails, as
# in the official scripts (which never read the descriptors it wrote to).


@pytest.fixture(scope="module", autouse=True)
def _isolation():
    from mlharness.tasks.deepseek_r1.isolation import find_bwrap, probe

    found = probe(find_bwrap())
    if isinstance(found, str):
        pytest.skip(f"generated code cannot be isolated here: {found}")


@pytest.fixture(scope="module")
def secret_env(env):
    return {**env, FORGED.SECRET_NAME: FORGED.SECRET}


def _script_lines(text: str) -> tuple[str, list[str]]:
    """The official stdout without the lines the programs themselves wrote to descriptor 1, and those lines."""
    lines = text.splitlines(keepends=True)
    return "".join(x for x in lines if not x.startswith(FORGED.MARK)), [x for x in lines if x.startswith(FORGED.MARK)]


def _ds_adversarial_rows() -> list[int]:
    rows = FORGED.rows(FORGED.base())
    return [i for i, row in enumerate(rows) if row[1] in {f"lcbf{n:02d}" for n in range(3, 3 + len(NAMES))}]


def test_deepseek_r1_prints_the_official_lines(secret_env):
    proc = cli(secret_env, "accuracy", "deepseek-r1", "--log", str(DS / "mlperf_log_accuracy.json"),
               "--dataset-file", str(DS / "dataset.pkl"), "--tokenizer", str(DS / "tokenizer"),
               "--code-timeout", TIMEOUT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    official, _ = _script_lines((DS / "official_stdout.txt").read_text())
    # LiveCodeBench's own prints come first in the official stdout; the accuracy block is its end
    assert proc.stdout.startswith("\nResults\n\n{'exact_match': ") and official.endswith(proc.stdout)


def test_gpt_oss_prints_the_official_lines(secret_env):
    proc = cli(secret_env, "accuracy", "gpt-oss", "--log", str(GO / "mlperf_log_accuracy.json"), "--reference-data",
               str(GO / "acc_eval_inputs.parquet"), "--tokenizer", str(GO_TOKENIZER), "--lcb-tests",
               str(GO / "lcb_tests.json"), "--code-timeout", TIMEOUT, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    official, _ = _script_lines((GO / "eval_mlperf_accuracy.stdout.txt").read_text())
    assert proc.stdout == official


def test_official_outputs_hold_the_honest_only_score():
    """Only the honest rows pass in the official runs: the fixtures hold these lines."""
    ds_official, ds_forged = _script_lines((DS / "official_stdout.txt").read_text())
    assert ds_official.endswith("\nResults\n\n{'exact_match': 16.666666666666668, 'tokens_per_sample': "
                                "129.75, 'num-samples': 12}\n")  # 2 of 12: the GPQA letter and the right program
    go_official, go_forged = _script_lines((GO / "eval_mlperf_accuracy.stdout.txt").read_text())
    # MATH500 1/1, the right program and its repeat 2/12: (1 + 2/3) / (1/5 + 12/3 + 1)
    assert "livecodebench_v6                 2       12        3       0.67     16.67%\n" in go_official
    assert go_official.endswith("\n'exact_match': 32.051\n")
    # what the two forged-line programs wrote to the official script's stdout
    assert len(ds_forged) == len(go_forged) == 2 and set(ds_forged + go_forged) == {FORGED.FORGED[:-2] + "\n"}


def test_deepseek_r1_verdicts_are_the_official_ones(monkeypatch):
    from mlharness.tasks.deepseek_r1.metric import score_log
    from mlharness.tasks.deepseek_r1.sandbox import Limits

    monkeypatch.setenv(FORGED.SECRET_NAME, FORGED.SECRET)
    result = score_log(DS / "mlperf_log_accuracy.json", DS / "dataset.pkl", DS / "tokenizer",
                       limits=Limits(timeout=int(TIMEOUT)))
    official = json.loads((DS / "official_verdicts.json").read_text())
    rows = _ds_adversarial_rows()
    assert len(rows) == len(NAMES)
    scores = dict(enumerate(result.details["scores"]))
    fd_writer_row = rows[NAMES.index(FD_WRITER)]
    assert {i: s for i, s in scores.items() if i != fd_writer_row} == \
           {i: s for i, s in enumerate(official["prompt_accuracy"]) if i != fd_writer_row}
    assert {NAMES[k]: scores[r] for k, r in enumerate(rows) if r != fd_writer_row} == \
           {n: 0.0 for n in NAMES if n != FD_WRITER}
    assert result.details["extracted"] == official["extracted_answer"]


def test_gpt_oss_verdicts_are_the_official_ones(monkeypatch):
    from mlharness.tasks.deepseek_r1.sandbox import Limits
    from mlharness.tasks.gpt_oss.metric import score_log

    monkeypatch.setenv(FORGED.SECRET_NAME, FORGED.SECRET)
    result = score_log(GO / "mlperf_log_accuracy.json", GO / "acc_eval_inputs.parquet", GO_TOKENIZER,
                       GO / "lcb_tests.json", limits=Limits(timeout=int(TIMEOUT)))
    official = json.loads((GO / "official_verdicts.json").read_text())
    verdicts = result.details["verdicts"]
    entries = json.loads((GO / "mlperf_log_accuracy.json").read_text())
    fd_writer_qsl = 4 + NAMES.index(FD_WRITER)  # four honest rows come first
    fd_writer_seq = [e["seq_id"] for e in entries if e["qsl_idx"] == fd_writer_qsl]
    assert len(verdicts) == len(official) == len(entries) and len(fd_writer_seq) == 1
    assert [v for i, v in enumerate(verdicts) if i not in fd_writer_seq] == \
           [official[str(i)] for i in range(len(official)) if i not in fd_writer_seq]
    adversarial = [i for i, e in enumerate(entries) if e["qsl_idx"] >= 4 and i not in fd_writer_seq]
    assert len(adversarial) == len(NAMES) - 1 and not any(verdicts[i] for i in adversarial)


def test_framed_answers_on_every_fd_score_0(monkeypatch):
    """Frames written blindly into every descriptor, the runner's channel among them, are no reply: it fails."""
    from mlharness.tasks.deepseek_r1.sandbox import Limits, run_program_tests

    base = FORGED.base()
    tests = base.ADD_TESTS
    report = run_program_tests(FORGED.ADVERSARIAL[FD_WRITER], tests["inputs"], tests["outputs"],
                               limits=Limits(timeout=int(TIMEOUT)))
    assert not report.passed, report
