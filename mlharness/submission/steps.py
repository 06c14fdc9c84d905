"""One LoadGen test of ``mlharness submission run``: run it in its own process, then move its files where
they belong (LoadGen logs into the results tree, the rest into the archive), or keep a failed attempt's output
and log under ``.mlharness/failed/``.

A compliance audit's record folder (``.mlharness/runs/<system>/<benchmark>/<scenario>/TEST0x/``) also keeps
LoadGen's raw output side by side, as LoadGen wrote it (mlperf_log_accuracy.json, mlperf_log_detail.txt,
mlperf_log_summary.txt; hard links to the files in the results tree where possible): it is the
``--compliance_dir`` the official ``compliance/TEST0x/run_verification.py`` scripts read."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlharness.calibration.explain import explain_run
from mlharness.errors import MLHarnessError
from mlharness.fileguard import open_regular
from mlharness.loadgen.interrupt import GUARD
from mlharness.loadgen.logs import parse_summary
from mlharness.submission.layout import Tree, replace_dir, stamp, unique
from mlharness.submission.rules import (
    ACCURACY_EXTRA_DIRS,
    OPTIONAL_LOG_FILES,
    REQUIRED_ACC_FILES,
    REQUIRED_PERF_FILES,
)
from mlharness.userfiles import LOG_LIMIT, read_log_text, read_optional_json

NO_METRIC_TEXT = "accuracy: not scored (the manifest declares no accuracy metric)\n"
# where each step's files land, relative to the scenario directory: (folder, required files)
STEP_FILES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "accuracy": [("accuracy", REQUIRED_ACC_FILES)],
    "performance": [("performance/run_1", REQUIRED_PERF_FILES)],
    "TEST01": [("TEST01/performance/run_1", REQUIRED_PERF_FILES), ("TEST01/accuracy", ("mlperf_log_accuracy.json",))],
    "TEST04": [("TEST04/performance/run_1", REQUIRED_PERF_FILES)],
    "TEST05": [("TEST05/performance/run_1", REQUIRED_PERF_FILES)],
    "TEST06": [("TEST06/accuracy", ("mlperf_log_accuracy.json",))],  # LLMs: sampled token streams only
    "TEST07": [("TEST07/performance/run_1", REQUIRED_PERF_FILES), ("TEST07/accuracy", ("mlperf_log_accuracy.json",))],
    "TEST09": [("TEST09/performance/run_1", REQUIRED_PERF_FILES), ("TEST09/accuracy", ("mlperf_log_accuracy.json",))],
    # dlrm-v3: the sampled responses, matched on (ts_idx, query_idx) by TEST08/verify_accuracy.txt
    "TEST08": [("TEST08/performance/run_1", REQUIRED_PERF_FILES), ("TEST08/accuracy", ("mlperf_log_accuracy.json",))],
}


class StepFailed(MLHarnessError):
    """A LoadGen test of the submission failed; the command exits with the run's status (2: the user's input,
    3: the run itself, 130/143: interrupted by SIGINT/SIGTERM)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code if exit_code in (2, 3, 128 + signal.SIGINT, 128 + signal.SIGTERM) else 3


def complete(tree: Tree, ids: tuple[str, str, str], step: str, signature: str) -> bool:
    """The step's files are in the results tree and were made by the same command, manifest and user.conf."""
    scen_dir = tree.scenario_dir(*ids)
    for folder, names in STEP_FILES[step]:
        if not all((scen_dir / folder / name).is_file() for name in names):
            return False
    info = tree.record_dir(*ids, step) / "step.json"
    record = read_optional_json(info, "step record")
    same = isinstance(record, dict) and record.get("signature") == signature
    # an audit that failed its verification is run again: on a busy host a second run may well pass
    return same and not failed_before(tree, ids, step)


VERDICT_FILE = "verdict.json"
FINDING_FILE = "development_finding.txt"


def record_verdict(tree: Tree, ids: tuple[str, str, str], test: str, checks: dict[str, bool]) -> None:
    """Keep an audit's verification outcome ({check: passed}) in its record folder, for ``--resume``."""
    record = tree.record_dir(*ids, test)
    if record.is_dir():
        (record / VERDICT_FILE).write_text(json.dumps(checks, indent=2) + "\n")


def record_finding(tree: Tree, ids: tuple[str, str, str], test: str, finding: str | None) -> None:
    """Keep the development finding an audit's failure is (in the words of ``submission check``) beside its
    verdict; an audit that passed or failed for real has none, and a finding of an earlier attempt goes."""
    path = tree.record_dir(*ids, test) / FINDING_FILE
    if finding and path.parent.is_dir():
        path.write_text(finding + "\n")
    elif not finding:
        path.unlink(missing_ok=True)


def failed_before(tree: Tree, ids: tuple[str, str, str], step: str) -> bool:
    """The audit ``step`` was verified and at least one of its checks failed."""
    if not step.startswith("TEST"):
        return False
    checks = read_optional_json(tree.record_dir(*ids, step) / VERDICT_FILE, "audit verdict")
    return isinstance(checks, dict) and not all(checks.values())


def run_step(tree: Tree, ids: tuple[str, str, str], step: str, argv: list[str], signature: str,
             child: Callable[[list[str], Any], int] | None = None) -> float:
    """Run one LoadGen test as a child process and put its files in place; returns its duration in seconds.
    ``child``: runs the command line elsewhere instead (``submission run --cluster``: a node of the executor,
    :mod:`mlharness.submission.dispatch`), writing the run folder at its ``--output`` and returning its status."""
    work = tree.work_dir(*ids)
    out = work / step
    if work.exists():  # what an interrupted earlier attempt left behind
        for stale in [p for p in work.iterdir() if p.name == step or p.name.startswith((f"{step}.", f".{step}."))]:
            target = unique(tree.failed_dir(*ids) / f"{stale.name.lstrip('.')}-interrupted-{stamp()}")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(stale), str(target))
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / f"{step}.run.log"
    started = time.monotonic()
    with open(log_path, "w") as logf:
        logf.write(f"$ {shlex.join(argv)}\n\n")
        logf.flush()
        rc = (child or _child)(argv, logf)
    seconds = time.monotonic() - started
    if rc != 0:
        _fail(tree, ids, step, rc, log_path)
    with GUARD.deferred():  # the results tree is never left half swapped
        _place(tree, ids, step, out, log_path, {"step": step, "argv": argv, "signature": signature,
                                                 "seconds": round(seconds, 3), "finished": stamp()})
    from mlharness.results_db.at_commit import index_quietly

    index_quietly(tree.root)  # the step's rows in the tree's evaluation database, as it is placed
    GUARD.check()  # a signal the finished child outran: its result is in place; stop before the next step
    return seconds


def host_child(holder: str) -> Callable[[list[str], Any], int]:
    """A step's local child, started once no other run an executor or a submission started holds this host
    (:mod:`mlharness.cluster.hostlock`); the wait is said once, in the step's log and on stderr. A signal while
    it waits stops the command as it would stop the run."""

    def run(argv: list[str], logf: Any) -> int:
        from mlharness.cluster.hostlock import HostTurn

        def say(text: str) -> None:
            logf.write(text + "\n")
            logf.flush()
            print(text, file=sys.stderr, flush=True)

        turn = HostTurn(holder)
        turn.take(say)
        try:
            return _child(argv, logf)
        finally:
            turn.release()

    return run


def _child(argv: list[str], logf: Any) -> int:
    """The child's exit status. It runs in a session of its own, so a Ctrl-C on the terminal reaches it once,
    forwarded by this process's signal guard (as does a SIGTERM sent to this process only); it then stops its
    LoadGen test and keeps its logs, exiting 130/143."""
    with subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True) as proc:
        with GUARD.child(proc):
            while True:
                try:
                    return proc.wait()
                except KeyboardInterrupt:  # no guard installed (library use): stop the child, then wait
                    proc.send_signal(signal.SIGINT)


def _log_tail(path: Path) -> str:
    """The text of a step's console log, from LOG_LIMIT bytes before its end where it is longer (the reason a run
    failed is at its end); bytes that are not UTF-8 replaced."""
    with open_regular(path, "step log") as f:
        size = os.fstat(f.fileno()).st_size
        if size > LOG_LIMIT:
            f.seek(size - LOG_LIMIT)
        return f.read(LOG_LIMIT).decode("utf-8", errors="replace")


def _fail(tree: Tree, ids: tuple[str, str, str], step: str, rc: int, log_path: Path) -> None:
    work = tree.work_dir(*ids)
    failed = unique(tree.failed_dir(*ids) / f"{step}-{stamp()}")
    failed.mkdir(parents=True)
    for leftover in work.iterdir():
        if leftover.name.startswith((f"{step}.failed-", f".{step}.partial-")) or leftover.name == step:
            shutil.move(str(leftover), str(failed / leftover.name.lstrip(".")))
    shutil.move(str(log_path), str(failed / "run.log"))
    lines = _log_tail(failed / "run.log").splitlines()[2:]  # after the command line
    # the run's own error message (one paragraph after 'error:'), else the end of its log
    start = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("error:")), None)
    if start is not None:
        reason = " ".join(line.strip() for line in lines[start:])[len("error:"):].strip()
    else:
        reason = "\n".join(line for line in lines[-12:] if line.strip())
    raise StepFailed(f"{'/'.join(ids)}: the {step} run failed (exit status {rc}): {reason}\nEarlier results are "
                     f"untouched; the failed run's output and log are in {failed}", rc)


def _place(tree: Tree, ids: tuple[str, str, str], step: str, out: Path, log_path: Path,
           info: dict[str, Any]) -> None:
    """Move the LoadGen logs into the results tree and everything else into the run's record folder."""
    scen_dir = tree.scenario_dir(*ids)
    work = tree.work_dir(*ids)
    assembled = work / f"{step}.assembled"
    shutil.rmtree(assembled, ignore_errors=True)
    if step == "accuracy" and not (out / "accuracy.txt").exists():
        (out / "accuracy.txt").write_text(NO_METRIC_TEXT)  # the tree needs one; the checker reads its lines
    for folder, names in STEP_FILES[step]:
        extra = tuple(n for n in OPTIONAL_LOG_FILES if n == "mlperf_log_trace.json" and (out / n).is_file())
        target = assembled / folder
        target.mkdir(parents=True, exist_ok=True)
        for name in (*names, *extra):
            if not (out / name).is_file():
                raise MLHarnessError(f"{'/'.join(ids)} {step}: the run wrote no {name} in {out}")
            shutil.move(str(out / name), str(target / name))
            if step.startswith("TEST"):  # the audit's raw LoadGen output stays together in its record folder
                _link_or_copy(target / name, out / name)
        if folder == "accuracy":  # a metric's files for the checker (wan-2.2's videos/<id>.mp4)
            for name in ACCURACY_EXTRA_DIRS:
                if (out / name).is_dir():
                    shutil.move(str(out / name), str(target / name))
    record = tree.record_dir(*ids, step)
    new_record = work / f"{step}.record"
    shutil.rmtree(new_record, ignore_errors=True)
    shutil.move(str(out), str(new_record))  # what is left: mlharness_run.json and any file not submitted
    shutil.move(str(log_path), str(new_record / "run.log"))
    (new_record / "step.json").write_text(json.dumps(info, indent=2) + "\n")
    root = "performance/run_1" if step == "performance" else step  # the folder swapped in as a whole
    replace_dir(assembled / root, scen_dir / root, work / f"{step}.trash")
    replace_dir(new_record, record, work / f"{step}.record-trash")
    shutil.rmtree(assembled, ignore_errors=True)


def _link_or_copy(src: Path, dest: Path) -> None:
    """A hard link (the logs are never rewritten in place), or a copy where the file system has none."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def result_line(scen_dir: Path, step: str, scenario: str, record: Path | None = None) -> str:
    """The step's figure and mlharness's verdict; ``record``: the step's record folder (its mlharness_run.json
    names the round and model the verdict depends on)."""
    if step == "accuracy":
        path = scen_dir / "accuracy" / "accuracy.txt"
        # the checker's 'Accuracy Results:' line where there is one (wan-2.2's follows the official per-dimension
        # summary), else the first line with a figure (the ROUGE dict follows a "Results" header)
        lines = [line.strip() for line in read_log_text(path, "accuracy.txt").splitlines()
                 if any(c.isdigit() for c in line)] \
            if path.is_file() else []
        # dlrm-v3's accuracy.py logs torchrec's metric/<name>/rating lines: its lifetime NE, ACC and gAUC together
        lifetime = [line.split("metric/", 1)[1] for line in lines if "metric/lifetime_" in line
                    and "_num_samples" not in line]
        # e2e-rag's accuracy_eval.py ends its summary with the checker's "Accuracy: 34.1234" (E2E_ACCURACY)
        lines = [line for line in lines if line.startswith("Accuracy Results:")] or \
            [line for line in lines if re.fullmatch(r"Accuracy:\s*[\d.]+", line)] or lines
        return ", ".join(lifetime) if lifetime else lines[0] if lines else "-"
    folder = scen_dir / ("performance" if step == "performance" else f"{step}/performance") / "run_1"
    try:
        summary = parse_summary(folder / "mlperf_log_summary.txt", scenario)
    except MLHarnessError:
        return "-"
    value = "n/a" if summary.metric_value is None else f"{summary.metric_value:,.1f} {summary.metric_unit}"
    # mlharness's verdict under the round's rules (LoadGen's, or VALID where the round waives its early stopping)
    verdict = explain_run(folder, scenario, record=record)
    waived = " (early stopping waived for this benchmark's results; LoadGen's line: INVALID)" if verdict.waived else ""
    return f"{'VALID' if verdict.valid else 'INVALID'}{waived}, {value}"
