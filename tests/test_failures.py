"""Failures in the timed path and at load time, through the real CLI in subprocesses with the real LoadGen.

A failing run must end within seconds even when LoadGen was asked for a 10-minute run, exit non-zero with a
message that names the culprit (hook, manifest, line), show no traceback, never replace an earlier good result,
and keep its partial logs beside it as ``<output>.failed-*``. A good run completes every sample exactly once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from mlharness.paths import MANIFESTS_DIR
from mlharness.run.rundir import StagedDir

WALL_LIMIT_S = 30  # a failing run must end well within this, whatever min_duration says
LONG = ["--mode", "performance", "--min-duration-ms", "600000", "--target-qps", "100"]

RAISE_ON_THIRD_CALL = """\
CALLS = [0]
def postprocess(ctx, outputs):
    CALLS[0] += 1
    if CALLS[0] >= 3:  # and on: a Server run times single samples before its LoadGen test
        raise ValueError("boom")
    return outputs[0][:, 0]
"""
GOOD_POSTPROCESS = """\
def postprocess(ctx, outputs):
    return outputs[0][:, 0]
"""
GOOD_PREPROCESS = """\
import numpy as np
def preprocess(ctx, index):
    return np.full((4,), index, np.float32)
"""


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLHARNESS_DEMO_DIR", str(tmp_path / "demo"))


def cli(tmp_path: Path, *args: str, progress: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    """``mlharness run ARGS``; a hang fails the test through the subprocess timeout instead of hanging the suite."""
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(tmp_path / "cache")
    env["MLHARNESS_DEMO_DIR"] = str(tmp_path / "demo")
    extra = [] if progress else ["--no-progress"]
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", *args, *extra], capture_output=True,
                       text=True, timeout=WALL_LIMIT_S, cwd=tmp_path, env=env)
    return r, time.monotonic() - start


def _block(source: str) -> str:
    return textwrap.indent(source, "  ")


def echo_manifest(folder: Path, name: str, *, framework: str = "echo", options: dict | None = None,
                  preprocess: str = GOOD_PREPROCESS, postprocess: str = GOOD_POSTPROCESS, count: int = 64,
                  max_batchsize: int = 8) -> Path:
    """The echo/error predictor over an inline dataset whose sample i is np.full((4,), i, float32)."""
    (folder / "none.bin").write_bytes(b"")
    opts = "".join(f"    {k}: {v}\n" for k, v in (options or {}).items())
    text = (
        f"name: {name}\n"
        # warmup 0: a failing predictor must fail inside the timed path, not while warming up
        f"framework:\n  name: {framework}\n  warmup: 0\n" + (f"  options:\n{opts}" if opts else "") +
        "inputs:\n  - name: x\n    shape: [4]\n"
        "outputs:\n  - name: y\n"
        "model:\n  graph_path: none.bin\n"
        "dataset:\n  name: inline\n  init: |\n"
        f"    def init(count):\n        return count or {count}\n"
        f"batching:\n  max_batchsize: {max_batchsize}\n"
        f"preprocess: |\n{_block(preprocess)}"
        f"postprocess: |\n{_block(postprocess)}"
    )
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def lines_of(manifest: Path, hook: str, needle: str) -> tuple[int, int]:
    """(line inside the hook, line in the manifest file) of the first hook line containing ``needle``."""
    lines = manifest.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{hook}:")) + 1  # 0-based first hook line
    file_line = next(i for i in range(start, len(lines)) if needle in lines[i]) + 1
    return file_line - start, file_line


def assert_clean_failure(r: subprocess.CompletedProcess, wall: float, *needles: str) -> None:
    assert r.returncode not in (0, None), r.stderr
    assert r.returncode == 3, (r.returncode, r.stderr)  # RunFailed, or the CLI's stop of a stuck LoadGen
    assert wall < WALL_LIMIT_S
    assert "Traceback" not in r.stderr, r.stderr
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)


def failed_siblings(output: Path) -> list[Path]:
    return sorted(output.parent.glob(f"{output.name}.failed-*"))


def assert_partial_kept(output: Path, count: int = 1) -> Path:
    """The output was not created; its partial logs are in exactly ``count`` ``.failed-*`` siblings; no staging
    folder is left behind."""
    assert not output.exists()
    failed = failed_siblings(output)
    assert len(failed) == count, failed
    assert (failed[-1] / "mlperf_log_detail.txt").is_file()
    assert list(output.parent.glob(f".{output.name}.partial-*")) == []
    return failed[-1]


# ------------------------------------------------------------------------------------------------------ (a)


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_raising_postprocess_ends_fast_and_names_the_hook(tmp_path, scenario):
    manifest = echo_manifest(tmp_path, "raising", postprocess=RAISE_ON_THIRD_CALL)
    out = tmp_path / "out"
    r, wall = cli(tmp_path, "--manifest", str(manifest), "--scenario", scenario, *LONG, "--output", str(out))
    assert_clean_failure(r, wall, "hook 'postprocess'", str(manifest), "ValueError: boom")
    hook_line, file_line = lines_of(manifest, "postprocess", 'raise ValueError("boom")')
    assert re.search(rf"line ({hook_line}|{file_line})\b", r.stderr), r.stderr
    assert wall < 15, f"{scenario} failure took {wall:.1f}s"
    failed = assert_partial_kept(out)
    assert str(failed) in r.stderr  # the user is told where the partial output went


# ------------------------------------------------------------------------------------------------------ (b)


@pytest.mark.parametrize(("scenario", "progress"), [("Offline", False), ("Server", True)])
def test_error_predictor_ends_fast_and_names_the_error(tmp_path, scenario, progress):
    manifest = echo_manifest(tmp_path, "failing", framework="error", options={"fail_on_call": 2})
    out = tmp_path / "out"
    r, wall = cli(tmp_path, "--manifest", str(manifest), "--scenario", scenario, *LONG, "--output", str(out),
                  progress=progress)
    assert_clean_failure(r, wall, "error predictor: failing on call 2 as configured")
    assert wall < 15
    assert_partial_kept(out)


# ------------------------------------------------------------------------------------------------------ (c)

RAISING_PREPROCESS = """\
import numpy as np
def preprocess(ctx, index):
    if index == 5:
        raise KeyError("no such sample")
    return np.full((4,), index, np.float32)
"""


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_raising_preprocess_at_load_time_fails_the_run(tmp_path, scenario):
    manifest = echo_manifest(tmp_path, "badload", preprocess=RAISING_PREPROCESS)
    out = tmp_path / "out"
    r, wall = cli(tmp_path, "--manifest", str(manifest), "--scenario", scenario, *LONG, "--output", str(out))
    assert_clean_failure(r, wall, "hook 'preprocess'", str(manifest), "KeyError")
    hook_line, file_line = lines_of(manifest, "preprocess", 'raise KeyError("no such sample")')
    assert re.search(rf"line ({hook_line}|{file_line})\b", r.stderr), r.stderr
    assert_partial_kept(out)


# ------------------------------------------------------------------------------------------------------ (d)


def _demo_with_raising_postprocess(folder: Path) -> Path:
    text = (MANIFESTS_DIR / "demo" / "demo.yaml").read_text()
    old = "  def postprocess(ctx, outputs):\n"
    assert text.count(old) == 1
    new = ("  CALLS = [0]\n\n" + old + "      CALLS[0] += 1\n      if CALLS[0] >= 2:  # Offline: 2 batches of 32\n"
           "          raise ValueError(\"boom\")\n")
    path = folder / "demo_failing.yaml"
    path.write_text(text.replace(old, new))
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_failed_runs_never_replace_an_earlier_result(tmp_path):
    out = tmp_path / "results" / "D"
    r, _ = cli(tmp_path, "--scenario", "Offline", "--mode", "accuracy", "--count", "64", "--output", str(out))
    assert r.returncode == 0, r.stderr
    before = _snapshot(out)
    assert {"accuracy.txt", "mlperf_log_accuracy.json", "mlharness_run.json"} <= set(before)
    assert b"accuracy=100.000%" in before["accuracy.txt"]
    failing = _demo_with_raising_postprocess(tmp_path)

    # a failure that LoadGen finishes by itself (one Offline query)
    r, wall = cli(tmp_path, "--manifest", str(failing), "--scenario", "Offline", "--mode", "accuracy", "--count",
                  "64", "--output", str(out))
    assert_clean_failure(r, wall, "hook 'postprocess'", str(failing), "ValueError: boom")
    assert _snapshot(out) == before
    (first,) = failed_siblings(out)
    assert {"mlperf_log_detail.txt", "mlperf_log_accuracy.json"} <= {p.name for p in first.iterdir()}
    assert not (first / "accuracy.txt").exists()

    # another benchmark, scenario or mode never replaces it: refused before anything runs
    r, _ = cli(tmp_path, "--manifest", str(failing), "--scenario", "Server", *LONG, "--output", str(out))
    assert r.returncode == 2 and "holds a Offline accuracy run of demo" in r.stderr, r.stderr
    assert _snapshot(out) == before and failed_siblings(out) == [first]

    # a failure the CLI has to stop (Server, 10-minute min_duration): same guarantees
    server = out.parent / "S"
    r, wall = cli(tmp_path, "--manifest", str(failing), "--scenario", "Server", *LONG, "--output", str(server))
    assert_clean_failure(r, wall, "hook 'postprocess'", "LoadGen was still issuing queries")
    assert _snapshot(out) == before and not server.exists()
    (second,) = failed_siblings(server)
    assert (second / "mlperf_log_detail.txt").is_file()
    assert str(second) in r.stderr
    assert list(out.parent.glob(".*")) == []  # no staging folder or lock left behind
    # beside them only the results root's evaluation database, which the good run's row went into as it committed
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["D", first.name, second.name,
                                                                    "mlharness_results.sqlite"])


def test_staged_dir_abandon_is_idempotent_and_never_collides(tmp_path, monkeypatch):
    """Two runs failing in the same second keep both partial outputs (and the first error is not replaced by an
    OSError from the rename)."""
    import mlharness.run.rundir as rundir

    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20250101-000000")
    final = tmp_path / "D"
    a = StagedDir(final)
    (a.path / "log").write_text("a")
    failed_a = a.abandon()
    assert a.abandon() == failed_a  # idempotent: the watchdog and the main thread may both abandon
    monkeypatch.setattr(rundir.os, "getpid", lambda: 999_999)  # a second process, same second
    b = StagedDir(final)
    (b.path / "log").write_text("b")
    failed_b = b.abandon()
    assert failed_a != failed_b
    assert (failed_a / "log").read_text() == "a" and (failed_b / "log").read_text() == "b"
    assert not final.exists()
    c = StagedDir(final)
    (c.path / "log").write_text("c")
    assert c.commit() == final.resolve() and (final / "log").read_text() == "c"


# ------------------------------------------------------------------------------------------------------ (e)


@pytest.mark.parametrize(
    ("postprocess", "needles"),
    [
        ("def postprocess(ctx, outputs):\n    return list(outputs[0][:, 0])[:-1]\n",
         ["returned 7 responses for a batch of 8 samples"]),
        ("def postprocess(ctx, outputs):\n    return outputs[0][:-1, 0]\n",
         ["must return one response per sample (8)", "of shape (7,)"]),
    ],
)
def test_wrong_number_of_responses_names_postprocess_and_counts(tmp_path, postprocess, needles):
    manifest = echo_manifest(tmp_path, "miscount", postprocess=postprocess)
    out = tmp_path / "out"
    r, wall = cli(tmp_path, "--manifest", str(manifest), "--scenario", "Offline", *LONG, "--output", str(out))
    assert_clean_failure(r, wall, "hook 'postprocess'", str(manifest), *needles)
    assert_partial_kept(out)


# ------------------------------------------------------------------------------------------------------ (f)


@pytest.mark.parametrize(
    ("scenario", "extra"),
    [
        ("Server", ["--target-qps", "4000", "--server-max-wait-ms", "5"]),
        ("Offline", []),
        ("MultiStream", []),
        ("SingleStream", []),
    ],
)
def test_every_sample_completed_exactly_once(tmp_path, scenario, extra):
    n = 200
    manifest = echo_manifest(tmp_path, "echo", count=n)
    out = tmp_path / "out"
    r, _ = cli(tmp_path, "--manifest", str(manifest), "--scenario", scenario, "--mode", "accuracy",
               "--max-batchsize", "4", "--workers", "2", *extra, "--output", str(out))
    assert r.returncode == 0, r.stderr
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    indices = [e["qsl_idx"] for e in entries]
    assert sorted(indices) == list(range(n)), "every qsl_idx exactly once"
    for e in entries:  # each response carries its own sample (echo: the index as float32)
        assert np.frombuffer(bytes.fromhex(e["data"]), np.float32).tolist() == [float(e["qsl_idx"])]
    meta = json.loads((out / "mlharness_run.json").read_text())
    samples = meta["samples"]
    assert samples["total"] == n
    assert samples["issued"] == samples["completed"] == n
    assert meta["batching"]["max_batchsize"] == 4 and meta["batching"]["workers"] == 2
    assert samples["batches"] >= n // 4
    if scenario == "Server":
        assert meta["batching"]["strategy"] == "ServerStrategy"
        assert meta["batching"]["coalesce_wait_s"] == pytest.approx(0.005)
    assert meta["loadgen_errors"] == []


def test_predictor_failing_during_warmup_fails_before_timing(run_cli, tmp_path):
    """Warm-up runs the model on real samples before LoadGen's clock starts; a failure there ends the run too."""
    manifest = echo_manifest(tmp_path, "warmfail", framework="error", options={"fail_on_call": 1})
    text = manifest.read_text().replace("  warmup: 0\n", "  warmup: 2\n")
    manifest.write_text(text)
    proc = run_cli("run", "--manifest", str(manifest), "--scenario", "Offline", "--mode", "accuracy",
                   "--output", str(tmp_path / "out"), "--no-progress", timeout=60)
    assert proc.returncode == 3
    assert "failing on call 1" in proc.stderr
    assert not (tmp_path / "out").exists()
