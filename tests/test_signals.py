"""SIGINT and SIGTERM during real runs (the real CLI in a subprocess, the real LoadGen), and results that cannot
be written (a file-size limit, a failing write).

An interrupted run ends within seconds with exit status 130 (SIGINT) or 143 (SIGTERM), says it was
interrupted, shows no traceback and no C++ abort, keeps LoadGen's logs as ``<output>.failed-<time>``, leaves
no hidden staging folder, and never touches an earlier result in the same output. A second Ctrl-C exits at
once. A result that cannot be written fails the run with exit status 3 and a message naming the path.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlharness.loadgen.logs import ResultsWriteError
from mlharness.run.destination import MARKER
from mlharness.run.rundir import StagedDir
from tests.test_failures import echo_manifest, failed_siblings

SIGNAL_LIMIT_S = 10  # from the signal to the end of the process
START_LIMIT_S = 60  # until the run is in its timed path (the machine may be busy)
# --no-calibrate: the calibration pass runs postprocess too, before LoadGen starts; the signal must reach LoadGen
LONG = ["--mode", "performance", "--min-duration-ms", "600000", "--no-calibrate"]

# the postprocess hook marks the first completed batch: the run is then in LoadGen's timed path
MARKING_POSTPROCESS = """\
import os
def postprocess(ctx, outputs):
    open(os.path.join(ctx["manifest_dir"], "started"), "a").close()
    return outputs[0][:, 0]
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(tmp_path / "cache")
    env["MLHARNESS_DEMO_DIR"] = str(tmp_path / "demo")
    return env


def slow_manifest(folder: Path, count: int = 256) -> Path:
    """The echo predictor, 200 ms per batch of 8: an Offline query of thousands of samples takes minutes."""
    return echo_manifest(folder, "slow", options={"sleep_ms": 200}, postprocess=MARKING_POSTPROCESS, count=count)


def start(tmp_path: Path, *args: str, **popen: object) -> subprocess.Popen:
    err = open(tmp_path / "stderr.txt", "w")  # noqa: SIM115 - the child writes it; closed with the process
    return subprocess.Popen([sys.executable, "-m", "mlharness.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=err, cwd=tmp_path, env=_env(tmp_path), **popen)


def wait_for(predicate, proc: subprocess.Popen, tmp_path: Path, limit: float = START_LIMIT_S) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"the run ended (status {proc.returncode}) before the signal:\n"
                        f"{(tmp_path / 'stderr.txt').read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the run never reached the point where the signal is sent")
        time.sleep(0.05)


def run_blocked_in_init(tmp_path: Path, *code: str) -> subprocess.Popen:
    """Start an Offline run whose dataset ``init`` hook runs ``code`` (lines) after marking that it got there;
    returns once the mark is there."""
    manifest = slow_manifest(tmp_path)
    marker = tmp_path / "in-init"
    lines = "".join(f"        {line}\n" for line in (*code[:1], f"open({str(marker)!r}, 'a').close()", *code[1:]))
    manifest.write_text(manifest.read_text().replace("    def init(count):\n", "    def init(count):\n" + lines))
    proc = start(tmp_path, "run", "--manifest", str(manifest), "--no-progress", "--scenario", "Offline")
    wait_for(marker.exists, proc, tmp_path)
    return proc


def wait_for_the_test(manifest: Path, proc: subprocess.Popen, tmp_path: Path) -> None:
    """Until the model runs inside the LoadGen test: after the run's estimate line (a Server run times single
    samples before, which calls the hooks too), the marking hook is called once more."""
    started = manifest.parent / "started"
    wait_for(lambda: "LoadGen will issue" in (tmp_path / "stderr.txt").read_text(), proc, tmp_path)
    started.unlink(missing_ok=True)
    wait_for(started.exists, proc, tmp_path)


def run_and_signal(tmp_path: Path, manifest: Path, sig: int, *args: str, in_test: bool = True
                   ) -> tuple[int, float, str]:
    """Start ``mlharness run``, send ``sig`` once the run is in its timed path (with ``in_test``: inside the
    LoadGen test; else at the model's first call); (status, seconds from the signal to the end, stderr)."""
    proc = start(tmp_path, "run", "--manifest", str(manifest), "--no-progress", *args)
    if in_test:
        wait_for_the_test(manifest, proc, tmp_path)
    else:
        wait_for((manifest.parent / "started").exists, proc, tmp_path)
    sent = time.monotonic()
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=SIGNAL_LIMIT_S + 20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the run did not end after {signal.Signals(sig).name}")
    return rc, time.monotonic() - sent, (tmp_path / "stderr.txt").read_text()


@pytest.fixture(scope="module")
def earlier_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, good result (the demo, Offline accuracy) to place in the output before each interrupted run."""
    tmp = tmp_path_factory.mktemp("earlier")
    out = tmp / "result"
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--scenario", "Offline", "--count", "16",
                        "--output", str(out), "--no-progress"], capture_output=True, text=True, timeout=120,
                       cwd=tmp, env=_env(tmp))
    assert r.returncode == 0, r.stderr
    return out


def place_earlier(earlier: Path, out: Path, benchmark: str, scenario: str, mode: str) -> dict[str, bytes]:
    """A copy of the earlier result, marked as a run of the same identity as the one about to write there
    (a run never replaces a result of another benchmark, scenario or mode)."""
    shutil.copytree(earlier, out)
    marker = out / MARKER
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "benchmark": benchmark, "scenario": scenario,
                                  "mode": mode}))
    return snapshot(out)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def assert_interrupted(rc: int, wall: float, stderr: str, sig: int, out: Path, before: dict[str, bytes]) -> Path:
    name = signal.Signals(sig).name
    assert rc == 128 + sig, (rc, stderr)
    assert wall < SIGNAL_LIMIT_S, f"{wall:.1f} s from {name} to the end"
    assert f"interrupted by {name}" in stderr, stderr
    assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
    assert snapshot(out) == before, "the earlier result changed"
    (failed,) = failed_siblings(out)
    assert (failed / "mlperf_log_detail.txt").is_file()
    assert str(failed) in stderr  # the user is told where the logs are
    assert list(out.parent.glob(f".{out.name}.*")) == [], "a hidden staging folder was left behind"
    return failed


@pytest.mark.parametrize(
    ("scenario", "mode", "sig"),
    [
        ("Offline", "performance", signal.SIGINT),  # mid-query: one query of 60,000 samples
        ("Offline", "accuracy", signal.SIGTERM),
        ("Server", "performance", signal.SIGTERM),
        ("Server", "accuracy", signal.SIGINT),
        ("SingleStream", "performance", signal.SIGINT),
        ("SingleStream", "accuracy", signal.SIGTERM),
        ("MultiStream", "performance", signal.SIGTERM),
        ("MultiStream", "accuracy", signal.SIGINT),
    ],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else v,
)
def test_signal_stops_the_run_and_keeps_its_logs(tmp_path, earlier_result, scenario, mode, sig):
    manifest = slow_manifest(tmp_path)
    out = tmp_path / "results" / "out"
    before = place_earlier(earlier_result, out, "slow", scenario, mode)
    args = LONG if mode == "performance" else ["--mode", "accuracy"]
    if scenario in ("Offline", "Server"):
        args = [*args, "--target-qps", "100" if mode == "performance" else "20"]
    rc, wall, stderr = run_and_signal(tmp_path, manifest, sig, "--scenario", scenario, *args, "--output", str(out))
    failed = assert_interrupted(rc, wall, stderr, sig, out, before)
    if scenario == "Offline":
        # the runners stopped between batches and completed the rest of the query empty: LoadGen ended its test
        assert "partial output is in" in stderr
        assert (failed / "mlperf_log_summary.txt").read_text().rstrip().endswith("encountered during test.")
    if mode == "accuracy" and scenario == "Offline":
        entries = json.loads((failed / "mlperf_log_accuracy.json").read_text())
        assert len(entries) == 256  # every sample completed exactly once ...
        assert len({e["qsl_idx"] for e in entries}) == 256
        empty = [e for e in entries if e["data"] == ""]
        assert 0 < len(empty) < 256  # ... the ones after the signal without running the model


def test_second_ctrl_c_exits_at_once(tmp_path, earlier_result):
    """Server runs its schedule whatever the SUT does; a second Ctrl-C does not wait for the grace period."""
    manifest = slow_manifest(tmp_path)
    out = tmp_path / "results" / "out"
    before = place_earlier(earlier_result, out, "slow", "Server", "performance")
    proc = start(tmp_path, "run", "--manifest", str(manifest), "--no-progress", "--scenario", "Server", *LONG,
                 "--target-qps", "100", "--output", str(out))
    wait_for_the_test(manifest, proc, tmp_path)
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: "interrupted by SIGINT" in (tmp_path / "stderr.txt").read_text(), proc, tmp_path, 10)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=30)
    wall = time.monotonic() - sent
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "interrupted again by SIGINT: exiting at once" in stderr, stderr
    assert wall < 1.5, f"{wall:.2f} s after the second Ctrl-C"  # the grace period is 3 s
    assert_interrupted(rc, wall, stderr, signal.SIGINT, out, before)


def test_signal_before_the_test_starts_is_reported_too(tmp_path):
    """SIGTERM while the run is still setting up (the dataset's init hook sleeps): exit 143, no traceback."""
    proc = run_blocked_in_init(tmp_path, "import time", "time.sleep(30)")
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=SIGNAL_LIMIT_S)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 143, stderr
    assert "interrupted by SIGTERM" in stderr and "Traceback" not in stderr, stderr


# ------------------------------------------------------------------------------------------- results not written


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail with EFBIG

    return apply


def test_file_size_limit_fails_the_run_naming_the_file(tmp_path, earlier_result):
    """LoadGen's detail log outgrows a 16 KiB file-size limit: LoadGen cannot report it, mlharness finds the log
    cut short, names it, exits 3 and keeps the earlier result."""
    manifest = echo_manifest(tmp_path, "echo", count=64)
    out = tmp_path / "results" / "out"
    before = place_earlier(earlier_result, out, "echo", "Offline", "performance")
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest), "--scenario",
                        "Offline", "--mode", "performance", "--min-duration-ms", "100", "--output", str(out),
                        "--no-progress", "--no-calibrate"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env=_env(tmp_path), preexec_fn=_limit_file_size(16 * 1024))
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "mlperf_log_detail.txt" in r.stderr and "cut short" in r.stderr, r.stderr
    assert snapshot(out) == before
    (failed,) = failed_siblings(out)
    assert str(failed) in r.stderr
    assert list(out.parent.glob(f".{out.name}.*")) == []


def test_disk_full_writing_metadata_names_the_file(tmp_path, earlier_result, monkeypatch, capsys):
    """ENOSPC on mlharness_run.json (the run's last write), in process: exit 3, the file named, earlier result
    intact, partial output kept."""
    from mlharness import cli

    manifest = echo_manifest(tmp_path, "echo", count=16)
    out = tmp_path / "results" / "out"
    before = place_earlier(earlier_result, out, "echo", "Offline", "accuracy")
    real = Path.write_text

    def full_disk(self: Path, text: str, *args: object, **kwargs: object) -> int:
        if self.name == "mlharness_run.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    rc = cli.main(["run", "--manifest", str(manifest), "--scenario", "Offline", "--output", str(out),
                   "--no-progress"])
    stderr = capsys.readouterr().err
    assert rc == 3, stderr
    assert "mlharness_run.json" in stderr and "No space left on device" in stderr, stderr
    assert snapshot(out) == before
    (failed,) = failed_siblings(out)
    assert (failed / "mlperf_log_accuracy.json").is_file()


def test_failed_final_move_puts_the_earlier_result_back(tmp_path, monkeypatch):
    import mlharness.run.destination as destination

    ident = destination.identity("demo", "Offline", "accuracy")
    final = tmp_path / "D"
    final.mkdir()
    (final / "log").write_text("earlier")
    destination.write_marker(final, ident)
    staged = StagedDir(final, ident)
    (staged.path / "log").write_text("new")
    real = destination.rename_noreplace

    def failing(src: Path, dst: Path) -> None:
        if Path(src) == staged.path:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src))
        real(src, dst)

    monkeypatch.setattr(destination, "rename_noreplace", failing)
    with pytest.raises(ResultsWriteError, match=rf"cannot move the finished run .* to {final}") as info:
        staged.commit()
    assert info.value.exit_code == 3
    assert (final / "log").read_text() == "earlier" and (final / MARKER).is_file()
    (failed,) = failed_siblings(final)
    assert (failed / "log").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_unwritable_results_folder_names_it(tmp_path, monkeypatch):
    import mlharness.run.rundir as rundir

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(rundir.Path, "mkdir", refuse)
    with pytest.raises(ResultsWriteError, match="Read-only file system") as info:
        StagedDir(tmp_path / "a" / "b")
    assert str(tmp_path / "a") in str(info.value)


def test_submission_run_forwards_the_signal_to_its_child_run(tmp_path):
    """``submission run`` runs each LoadGen test in a child process of its own session: a SIGTERM sent to the
    parent alone reaches the child once; the child keeps its logs, the parent files them under
    ``.mlharness/failed`` and exits 143."""
    manifest = slow_manifest(tmp_path)
    results = tmp_path / "results"
    proc = start(tmp_path, "submission", "run", "--manifest", str(manifest), "--scenarios", "Offline",
                 "--division", "open", "--submitter", "Acme", "--system-name", "box", "--results", str(results),
                 "--min-duration-ms", "600000", "--target-qps", "100")
    wait_for((manifest.parent / "started").exists, proc, tmp_path)  # the accuracy run is in its timed path
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=SIGNAL_LIMIT_S + 20)
    wall = time.monotonic() - sent
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 143, stderr
    assert wall < SIGNAL_LIMIT_S
    assert "the accuracy run failed (exit status 143): the run was interrupted by SIGTERM" in stderr, stderr
    assert "Traceback" not in stderr
    (failed,) = (results / ".mlharness" / "failed" / "box" / "slow" / "Offline").glob("accuracy-*")
    kept = [p for p in failed.iterdir() if p.name.startswith("accuracy.failed-")]
    assert len(kept) == 1 and (kept[0] / "mlperf_log_detail.txt").is_file()
    assert "interrupted by SIGTERM" in (failed / "run.log").read_text()
    assert not (results / "box" / "slow" / "Offline" / "accuracy").exists()


# ---------------------------------------------------------------------------------------------- the guard itself


def test_guard_drains_a_running_test_and_defers_inside_a_swap():
    """In process: a signal during a LoadGen test calls the SUT's drain instead of raising; inside deferred() it
    is raised only once the block has finished; outside both it raises Interrupted at once."""
    from mlharness.loadgen.interrupt import Guard, Interrupted

    guard = Guard()
    drained: list[Interrupted] = []

    def fake_test() -> None:  # LoadGen's StartTest: ends once drained
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not drained and time.monotonic() < deadline:
            time.sleep(0.01)

    with guard.installed():
        guard.run_test(fake_test, drained.append)
        assert [d.exit_code for d in drained] == [143]  # drained, nothing raised
        guard.signum = None
        steps = []
        with pytest.raises(Interrupted) as info:
            with guard.deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                steps.append("finished the block")
        assert steps == ["finished the block"] and info.value.exit_code == 130
        guard.signum = None
        with pytest.raises(Interrupted, match="interrupted by SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) != guard._handle  # handlers restored


def test_signal_while_busy_outside_python_still_ends_the_run(tmp_path):
    """The main thread blocked in C code that released the GIL (as while ONNX Runtime builds a session; here
    libc's system(), which retries its wait on a signal) cannot run a Python handler: the signal's watcher ends
    the process after the grace period, with the documented status."""
    proc = run_blocked_in_init(tmp_path, "import ctypes", "ctypes.CDLL(None).system(b'sleep 20')")
    time.sleep(0.2)  # inside system()
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=SIGNAL_LIMIT_S + 20)
    wall = time.monotonic() - sent
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 143, stderr
    assert wall < SIGNAL_LIMIT_S
    assert "interrupted by SIGTERM while mlharness was busy outside Python" in stderr, stderr


def test_tune_stops_on_a_signal_without_writing_its_conf(tmp_path):
    """``tune`` runs its trials in process: a SIGINT during a trial stops the trial and the command (130), and
    no user.conf is written."""
    manifest = slow_manifest(tmp_path)
    conf = tmp_path / "user.conf"
    proc = start(tmp_path, "tune", "--manifest", str(manifest), "--scenario", "Offline", "--seconds", "30",
                 "--output", str(conf))
    wait_for((manifest.parent / "started").exists, proc, tmp_path)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(timeout=SIGNAL_LIMIT_S + 20)
    wall = time.monotonic() - sent
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 130, stderr
    assert wall < SIGNAL_LIMIT_S
    assert "the run was interrupted by SIGINT" in stderr and "Traceback" not in stderr, stderr
    assert not conf.exists()


def test_a_signal_during_calibration_ends_the_run_before_loadgen_starts(tmp_path, earlier_result):
    """Calibration (no expected latency given) runs the model before LoadGen: a signal there stops the run at
    once, keeps what there is and leaves the earlier result alone."""
    manifest = slow_manifest(tmp_path)
    out = tmp_path / "results" / "out"
    before = place_earlier(earlier_result, out, "slow", "SingleStream", "performance")
    rc, wall, stderr = run_and_signal(tmp_path, manifest, signal.SIGINT, "--scenario", "SingleStream", "--mode",
                                      "performance", "--min-duration-ms", "600000", "--output", str(out),
                                      in_test=False)
    assert rc == 130, (rc, stderr)
    assert wall < SIGNAL_LIMIT_S
    assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
    assert "interrupted" in stderr.lower(), stderr
    assert snapshot(out) == before
    assert list(out.parent.glob(f".{out.name}.*")) == [], "a hidden staging folder was left behind"


def test_a_signal_that_surfaces_as_another_exception_is_reported_as_the_signal(monkeypatch, capsys):
    """A framework's import that catches KeyboardInterrupt and raises ImportError (as onnxruntime's does when a
    Ctrl-C lands in it): the run ends as interrupted (130), not with a traceback and exit 1."""
    from mlharness import cli

    def importing_framework(args: object) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt as e:
            raise ImportError("DLL load failed while importing the framework") from e
        return 0

    monkeypatch.setattr(cli, "cmd_run", importing_framework)
    assert cli.main(["run", "--scenario", "Offline"]) == 130
    err = capsys.readouterr().err
    assert "interrupted by SIGINT" in err and "ImportError: DLL load failed" in err and "Traceback" not in err


def test_an_ordinary_bug_still_shows_its_traceback(monkeypatch):
    from mlharness import cli

    def buggy(args: object) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "cmd_run", buggy)
    with pytest.raises(ZeroDivisionError):
        cli.main(["run", "--scenario", "Offline"])


# ------------------------------------------------------------------------------------------------ start-up
def _importing(pid: int) -> bool:
    """Whether the process is importing the command's modules: numpy's extension is mapped (Linux: /proc/PID/maps),
    which happens in the middle of them. A signal sent earlier may land in Python's own start-up (``site``,
    ``runpy``), before any line of mlharness runs, where it cannot be handled. A run's imports happen in its
    supervised child (mlharness.supervise): the process's children count too."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    return ("/numpy/" in maps and ".so" in maps) or any(_importing(int(c)) for c in children)


def _console_script() -> list[str]:
    """The ``mlharness`` console script as pip writes it, from the entry point pyproject.toml declares."""
    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    module, func = re.search(r'^mlharness = "([\w.]+):(\w+)"$', text, re.M).groups()
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]


@pytest.mark.parametrize("entry", ["python -m mlharness.cli", "python -m mlharness", "console script"])
def test_a_signal_while_the_command_starts_exits_with_one_line(tmp_path, entry):
    """Ctrl-C at any moment of the start-up (imports of a second or more on a busy host), and later in the run
    itself, ends with status 130 and an error line, never a KeyboardInterrupt traceback; SIGTERM with 143."""
    command = {"python -m mlharness.cli": [sys.executable, "-m", "mlharness.cli"],
               "python -m mlharness": [sys.executable, "-m", "mlharness"], "console script": _console_script()}[entry]
    manifest = slow_manifest(tmp_path)  # a run that lasts minutes: every delay lands before its end
    delays = (0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5) if entry == "python -m mlharness.cli" else (0.0, 0.3)
    for k, delay in enumerate(delays):
        sig = signal.SIGTERM if k == 1 else signal.SIGINT
        proc = subprocess.Popen([*command, "run", "--manifest", str(manifest), "--scenario", "Offline", "--output",
                                 str(tmp_path / f"out{k}"), "--no-progress", *LONG, "--target-qps", "100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=tmp_path, env=_env(tmp_path))
        deadline = time.monotonic() + START_LIMIT_S
        while not _importing(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(delay)
        proc.send_signal(sig)
        try:
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        when = f"{sig.name} {delay} s into the imports: status {proc.returncode}\n{stderr}"
        assert proc.returncode == 128 + sig, when
        assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, when
        assert stderr.strip().splitlines()[-1].startswith("error: "), when


# a model whose teardown is slow (as torch's and transformers' are on a busy host): an object that takes 30 s to
# go when the interpreter finalizes, and an exit handler that must still run
SLOW_TEARDOWN_POSTPROCESS = MARKING_POSTPROCESS + """\
import atexit
import time

class _SlowToGo:
    def __del__(self):
        time.sleep(30)

_KEEP = [_SlowToGo()]
atexit.register(lambda: open("exit-handler-ran", "a").close())  # in the run's working folder
"""


@pytest.mark.parametrize("entry", [["-m", "mlharness.cli"], ["-m", "mlharness"]], ids=["cli", "package"])
def test_a_signal_exit_does_not_wait_for_the_interpreter_teardown(tmp_path, entry):
    """After a signal the output is kept and exit handlers run, then the process ends without finalizing the
    interpreter: a framework's slow teardown cannot stretch the promised ~3 s."""
    manifest = echo_manifest(tmp_path, "slowteardown", options={"sleep_ms": 200}, count=256,
                             postprocess=SLOW_TEARDOWN_POSTPROCESS)
    out = tmp_path / "out"
    err = open(tmp_path / "stderr.txt", "w")  # noqa: SIM115 - the child writes it; closed below
    proc = subprocess.Popen([sys.executable, *entry, "run", "--manifest", str(manifest), "--no-progress",
                             "--scenario", "Offline", *LONG, "--target-qps", "100", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=err, cwd=tmp_path, env=_env(tmp_path))
    try:
        wait_for_the_test(manifest, proc, tmp_path)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        wall = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert rc == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert wall < SIGNAL_LIMIT_S, f"{wall:.1f} s from the signal to the end of the process"
    assert (tmp_path / "exit-handler-ran").exists(), "the exit handlers were skipped"
    assert failed_siblings(out), "the partial output was not kept"
