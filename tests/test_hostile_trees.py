"""``report``, ``compare`` and ``sweep --resume`` over hostile result trees: a FIFO or a device where LoadGen's
summary should be, JSON of the wrong shape, a folder name that is mathtext or holds a newline and ESC, ``--force``
aimed at a device node. Each case runs the real CLI in a subprocess with a deadline: one ``error:`` paragraph
naming the file, exit 2, no traceback, no hang; or, for names, a report that shows them literally and escaped."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

DEADLINE = 60  # seconds: a case that blocks on a FIFO or reads a device without end fails here, never hangs
RUN = Path("sys/demo/Offline/performance/run_1")
SUMMARY = """================================================
MLPerf Results Summary
================================================
SUT name : mlharness
Scenario : Offline
Mode     : PerformanceOnly
Samples per second: 1234.5
Result is : VALID
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: Yes

================================================
Additional Stats
================================================
Min latency (ns)                : 1000000
Max latency (ns)                : 9000000
Mean latency (ns)               : 3000000
50.00 percentile latency (ns)   : 2000000
90.00 percentile latency (ns)   : 4000000
99.00 percentile latency (ns)   : 8000000
"""
SWEEP = {"kind": "mlharness-sweep", "version": 1, "manifest": "demo", "scenario": "Server", "axis": "target_qps",
         "slo": {}, "points": [{"label": "qps-000150.000-r1", "value": 150.0, "repeat": 1, "valid": True,
                                "throughput": 149.5, "latency_ms": {"p50": 1.0, "p99": 2.0}, "dir": "points/x"}],
         "aggregates": [], "knee": None, "max_valid": 150.0, "complete": False, "options": {}}


def tree(root: Path) -> Path:
    """A results tree of one Offline performance run, as LoadGen and mlharness leave it."""
    run = root / RUN
    run.mkdir(parents=True)
    (run / "mlperf_log_summary.txt").write_text(SUMMARY)
    (run / "mlharness_run.json").write_text(json.dumps({"benchmark": "demo", "scenario": "Offline",
                                                         "mode": "performance"}))
    return root


def device(path: Path) -> None:
    """A character device with /dev/zero's numbers, inside the test's folder (needs root)."""
    path.unlink(missing_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))


def can_mknod(tmp_path: Path) -> bool:
    try:
        device(tmp_path / "probe")
    except OSError:
        return False
    (tmp_path / "probe").unlink()
    return True


def cli(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=DEADLINE, env={**os.environ, "MLHARNESS_CACHE": str(cwd / "cache")})


def refused(proc: subprocess.CompletedProcess, *words: str, rc: int = 2) -> str:
    """The error of a refused command: its exit status, one ``error:`` paragraph holding ``words``, no traceback."""
    err = proc.stderr
    assert proc.returncode == rc, (proc.returncode, err, proc.stdout[-2000:])
    assert "Traceback" not in err + proc.stdout, err
    assert err.count("error:") == 1 and "\n\n" not in err[err.index("error:"):].strip(), err
    for w in words:
        assert w in err, (w, err)
    return err


def _fifo_summary(root: Path) -> None:
    (root / RUN / "mlperf_log_summary.txt").unlink()
    os.mkfifo(root / RUN / "mlperf_log_summary.txt")


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / rel).write_text(text)
    return make


# (id, what to do to a good tree, the words its error must hold)
REPORT_CASES = [
    ("fifo-summary", _fifo_summary, [f"{RUN}/mlperf_log_summary.txt is a FIFO, not a regular file"]),
    ("folder-summary", lambda r: ((r / RUN / "mlperf_log_summary.txt").unlink(),
                                  (r / RUN / "mlperf_log_summary.txt").mkdir()), ["summary", "is a folder"]),
    ("broken-link-accuracy", lambda r: (r / RUN / "accuracy.txt").symlink_to(r / "nowhere"),
     [f"{RUN}/accuracy.txt is a broken symbolic link"]),
    ("fifo-telemetry", lambda r: os.mkfifo(r / RUN / "mlharness_telemetry.json"),
     ["mlharness_telemetry.json is a FIFO"]),
    ("list-run-json", _write(f"{RUN}/mlharness_run.json", "[1, 2]"),
     [f"{RUN}/mlharness_run.json: its top level is a list, expected an object"]),
    ("host-list-run-json", _write(f"{RUN}/mlharness_run.json", '{"host": ["x"]}'),
     ["mlharness_run.json: field 'host' is a list, expected an object"]),
    ("telemetry-string-run-json", _write(f"{RUN}/mlharness_run.json", json.dumps(
        {"telemetry": {"enabled": True, "host": {"process_rss_mib": {"min": "low", "mean": 1, "max": 2}}}})),
     ["mlharness_run.json: field 'telemetry.host.process_rss_mib.min' is a string, expected a number"]),
    ("huge-summary", lambda r: os.truncate(r / RUN / "mlperf_log_summary.txt", 1 << 30),  # sparse: no disk used
     ["mlperf_log_summary.txt is larger than 16 MiB"]),
    ("trace-a-fifo", lambda r: os.mkfifo(r / RUN / "mlharness_trace.json"), ["mlharness_trace.json is a FIFO"]),
    ("not-json-run-json", _write(f"{RUN}/mlharness_run.json", "{"), ["mlharness_run.json is not valid JSON"]),
    ("string-in-sweep", _write("sweep.json", json.dumps(
        {**SWEEP, "points": [{**SWEEP["points"][0], "tokens_per_s": "many"}]})),
     ["sweep.json: field 'points[0].tokens_per_s' is a string, expected a number"]),
    ("slo-string-in-sweep", _write("sweep.json", json.dumps({**SWEEP, "slo": {"latency_p99": "fast"}})),
     ["sweep.json: field 'slo.latency_p99' is a string"]),
]


@pytest.mark.parametrize("case_id, make, words", REPORT_CASES, ids=[c[0] for c in REPORT_CASES])
def test_report_refuses_a_hostile_tree(tmp_path: Path, case_id: str, make, words: list[str]) -> None:
    make(tree(tmp_path / "t"))
    refused(cli("report", "t", cwd=tmp_path), *words)


def test_report_layers_names_a_span_of_the_wrong_shape(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "op", "name": "Conv",
                                                                      "ts": "soon", "dur": 3}]}))
    refused(cli("report", "layers", "trace.json", cwd=tmp_path),
            "trace.json: field 'traceEvents[0].ts' is a string, expected a number")


def test_a_fifo_summary_stops_compare_too(tmp_path: Path) -> None:
    tree(tmp_path / "a")
    _fifo_summary(tree(tmp_path / "b"))
    refused(cli("compare", "a", "b", cwd=tmp_path), f"b/{RUN}/mlperf_log_summary.txt is a FIFO")


def test_a_device_summary_is_named_not_read(tmp_path: Path) -> None:
    if not can_mknod(tmp_path):
        pytest.skip("making a device node needs root")
    device(tree(tmp_path / "t") / RUN / "mlperf_log_summary.txt")
    refused(cli("report", "t", cwd=tmp_path), "mlperf_log_summary.txt is a character device, not a regular file")
    refused(cli("compare", "t", "t", cwd=tmp_path), "mlperf_log_summary.txt is a character device")


def test_force_never_replaces_a_device_node_or_a_fifo(tmp_path: Path) -> None:
    tree(tmp_path / "t")
    os.mkfifo(tmp_path / "out.md")
    refused(cli("report", "t", "--md", "out.md", "--force", cwd=tmp_path), "out.md is a FIFO, not a regular file",
            "--force replaces only a regular file")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "out.md").st_mode)
    if not can_mknod(tmp_path):
        pytest.skip("making a device node needs root")
    device(tmp_path / "out.html")
    refused(cli("report", "t", "--html", "out.html", "--force", cwd=tmp_path),
            "out.html is a character device, not a regular file")
    st = os.lstat(tmp_path / "out.html")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 5)
    refused(cli("compare", "t", "t", "--html", "out.html", "--force", cwd=tmp_path),
            "out.html is a character device, not a regular file")
    # and every other writer of a user-named file goes through the same refusal
    from mlharness.userfiles import OutputExists, replace_text

    with pytest.raises(OutputExists, match="is a character device, not a regular file"):
        replace_text(tmp_path / "out.html", "x")
    st = os.lstat(tmp_path / "out.html")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 5)


def test_a_mathtext_folder_name_is_drawn_literally(tmp_path: Path) -> None:
    name = r"math$\undefinedcmd{x}$"
    (tree(tmp_path / "t") / "sys" / "demo").rename(tmp_path / "t" / "sys" / name)
    proc = cli("report", "t", "--html", "out.html", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert name in proc.stdout
    page = (tmp_path / "out.html").read_text()
    assert "<svg" in page and page.count(name) >= 2  # the table and the figure's legend, both literal


def test_names_with_a_newline_or_esc_are_printed_escaped(tmp_path: Path) -> None:
    evil = "evil\n\x1b[31mERROR forged"
    (tree(tmp_path / "t") / "sys" / "demo").rename(tmp_path / "t" / "sys" / evil)
    proc = cli("report", "t", "--md", "out.md", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout and not any(x.startswith("ERROR") for x in proc.stdout.splitlines())
    assert repr(evil) in proc.stdout
    summary = tmp_path / "t" / "sys" / evil / "Offline" / "performance" / "run_1" / "mlperf_log_summary.txt"
    summary.unlink()
    os.mkfifo(summary)
    err = refused(cli("report", "t", cwd=tmp_path), repr(evil), "is a FIFO")
    assert "\x1b" not in err and "\nERROR" not in err


SWEEP_CASES = [
    ("a-list", "[]", "its top level is a list, expected an object"),
    ("points-not-a-list", json.dumps({**SWEEP, "points": {"a": 1}}), "field 'points' is an object, expected a list"),
    ("a-point-not-an-object", json.dumps({**SWEEP, "points": [7]}), "field 'points[0]' is a number"),
    ("value-a-string", json.dumps({**SWEEP, "points": [{**SWEEP["points"][0], "value": "150"}]}),
     "field 'points[0].value' is a string, expected a number"),
    ("repeat-missing", json.dumps({**SWEEP, "points": [{k: v for k, v in SWEEP["points"][0].items()
                                                         if k != "repeat"}]}), "field 'points[0].repeat' is missing"),
    ("valid-null", json.dumps({**SWEEP, "points": [{**SWEEP["points"][0], "valid": None}]}),
     "field 'points[0].valid' is null"),
    ("options-a-list", json.dumps({**SWEEP, "options": [1]}), "field 'options' is a list"),
    ("not-json", '{"kind": ', "is not valid JSON"),
]


def test_sweep_resume_refuses_a_corrupt_sweep_json(tmp_path: Path) -> None:
    """``sweep --resume`` reads sweep.json through the report's reader: each corrupt file is one error naming the
    file and the field, before any run starts."""
    failures = []
    for case_id, text, words in SWEEP_CASES:
        out = tmp_path / case_id
        out.mkdir()
        (out / "sweep.json").write_text(text)
        proc = cli("sweep", "--manifest", "demo", "--qps", "150", "--seconds", "0.2", "--output", out, "--resume",
                   cwd=tmp_path)
        try:
            refused(proc, f"{out}/sweep.json", words)
        except AssertionError as e:
            failures.append(f"{case_id}: {e}")
        assert not (out / "points").exists() or not any((out / "points").iterdir()), case_id
    os.mkfifo(tmp_path / "fifo-sweep.json")
    (tmp_path / "fifo").mkdir()
    os.rename(tmp_path / "fifo-sweep.json", tmp_path / "fifo" / "sweep.json")
    proc = cli("sweep", "--manifest", "demo", "--qps", "150", "--output", tmp_path / "fifo", "--resume", cwd=tmp_path)
    try:
        refused(proc, "sweep.json is a FIFO")
    except AssertionError as e:
        failures.append(f"fifo: {e}")
    assert not failures, "\n".join(failures)
