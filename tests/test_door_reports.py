"""Results folders may come from anywhere: a FIFO or a device where ``report``, ``explain`` or the submission steps
read a record (campaign.json, pipeline_summary.json, mlharness_run.json, step.json) is refused at once, exit 2,
naming the file; before, ``open`` of the FIFO waited for a writer for ever and /dev/zero was read without end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT = 60  # seconds: each command answers in a few; the old readers never answered at all


def _accuracy_run(root: Path) -> Path:
    """A finished accuracy run folder as ``mlharness run`` leaves it (LoadGen's summary, accuracy.txt, metadata)."""
    run = root / "sys" / "resnet50" / "Offline" / "accuracy"
    run.mkdir(parents=True)
    (run / "mlperf_log_summary.txt").write_text("No warnings encountered during test.\n")
    (run / "accuracy.txt").write_text("accuracy=76.000%, good=38, total=50\n")
    (run / "mlharness_run.json").write_text(json.dumps({
        "benchmark": "resnet50", "scenario": "Offline", "mode": "accuracy", "accuracy": None,
        "not_submittable_reasons": []}))
    return run


def _odd(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def _refused(proc: subprocess.CompletedProcess, path: Path, kind: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = " ".join((proc.stdout + proc.stderr).split())  # the message may wrap on the terminal
    assert path.name in said and ("a FIFO" if kind == "fifo" else "a character device") in said, said
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_report_refuses_an_odd_campaign_record(run_cli, tmp_path, kind):
    root = tmp_path / "res"
    _accuracy_run(root)
    _odd(root / "campaign.json", kind)
    proc = run_cli("report", str(root), "--md", str(tmp_path / "r.md"), timeout=TIMEOUT)
    _refused(proc, root / "campaign.json", kind)


def test_html_report_refuses_a_fifo_pipeline_summary(run_cli, tmp_path):
    root = tmp_path / "res"
    run = _accuracy_run(root)
    _odd(run / "pipeline_summary.json", "fifo")
    proc = run_cli("report", str(root), "--html", str(tmp_path / "r.html"), timeout=TIMEOUT)
    _refused(proc, run / "pipeline_summary.json", "fifo")


_READERS = {
    # what reads a run's record when a run is explained, sized or resumed in a submission
    "explain": "from mlharness.calibration.explain import explain_run; explain_run(run, 'Offline', 'resnet50')",
    "audit dtype": "from mlharness.submission.audits import response_dtype; response_dtype(run / 'mlharness_run.json')",
    "step resumed": ("from mlharness.submission.steps import failed_before\n"
                     "class T:\n    def record_dir(self, *a): return run\n"
                     "failed_before(T(), ('s', 'b', 'Offline'), 'TEST01')"),
}


@pytest.mark.parametrize("reader", sorted(_READERS))
def test_run_records_are_read_through_the_door(tmp_path, reader):
    run = _accuracy_run(tmp_path / "res")
    record = run / ("verdict.json" if reader == "step resumed" else "mlharness_run.json")  # steps.VERDICT_FILE
    if record.exists():
        record.unlink()
    os.mkfifo(record)
    code = ("import sys\nfrom pathlib import Path\nfrom mlharness.errors import MLHarnessError\n"
            f"run = Path({str(run)!r})\ntry:\n" + "".join(f"    {line}\n" for line in _READERS[reader].splitlines())
            + "except MLHarnessError as e:\n    print(e)\n    sys.exit(2)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    _refused(proc, record, "fifo")
