"""A run speaks from its first second: the line naming what it loads comes before the command's imports, the bar
shows a rate and the time left, an accuracy run's estimate is never LoadGen's placeholder, and a Server result
shows its p99 against its bound."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from mlharness.startup import first_line


def test_the_first_line_names_the_manifest_and_its_framework(tmp_path):
    assert first_line(["run", "--scenario", "Offline"]) == "mlharness run: loading demo (onnxruntime) ..."
    assert first_line(["-v", "run", "--manifest", "resnet50@pytorch"]) == "mlharness run: loading resnet50 (pytorch) ..."
    assert first_line(["run", "--endpoint", "http://localhost:8000"]).endswith("llama3.1-8b-random (openai) ...")
    own = tmp_path / "mine.yaml"
    own.write_text("name: mine\nframework: {name: echo, options: {sleep_ms: 1}}\n")
    assert first_line(["sweep", f"--manifest={own}"]) == f"mlharness sweep: loading {own} (echo) ..."
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # never opened: it would block the command before its first line
    assert first_line(["run", "--manifest", str(fifo)]) == f"mlharness run: loading {fifo} ..."
    for quiet in (["manifest", "list"], ["run", "--help"], ["--version"], []):
        assert first_line(quiet) is None


def test_a_piped_run_prints_its_first_line_before_the_imports(cli_env, tmp_path):
    """stdout and stderr are pipes; the first stderr line must be the loading line, and it must come before
    numpy is imported (the command's first heavy import) and within 1 s of the start."""
    code = ("import sys, time, runpy; t0 = time.monotonic(); sys.argv = ['mlharness'] + sys.argv[1:]\n"
            "import builtins; real = builtins.__import__\n"
            "def spy(name, *a, **k):\n"
            "    if name.partition('.')[0] == 'numpy' and 'numpy' not in sys.modules:\n"
            "        sys.stderr.write(f'NUMPY-IMPORT {time.monotonic() - t0:.3f}\\n'); sys.stderr.flush()\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = spy\n"
            "runpy.run_module('mlharness', run_name='__main__')\n")
    env = dict(cli_env, PYTHONUNBUFFERED="1")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, "run", "--scenario", "Offline", "--mode", "accuracy",
                             "--output", str(tmp_path / "acc")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=tmp_path)
    try:
        first = proc.stderr.readline()  # blocks until the first line (bounded by the timeout below)
        first_s = time.monotonic() - start
        out, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, rest.decode()
    assert first.decode() == "mlharness run: loading demo (onnxruntime) ...\n", (first, rest)
    assert b"NUMPY-IMPORT" in rest, rest.decode()  # the line came before the first import of numpy
    cores = os.cpu_count() or 1
    if os.getloadavg()[0] <= cores:  # a host busier than its cores starts any interpreter slowly
        assert first_s < 1.0, first_s
    assert b"accuracy" in out


def _loadgen_settings(scenario: str, mode: str, **values):
    import mlperf_loadgen as lg

    s = lg.TestSettings()
    s.scenario, s.mode = getattr(lg.TestScenario, scenario), getattr(lg.TestMode, mode)
    for k, v in values.items():
        setattr(s, k, v)
    return s


def test_the_bar_shows_a_rate_and_the_time_left():
    from rich.console import Console

    from mlharness.progress import RunProgress

    settings = _loadgen_settings("Offline", "PerformanceOnly", min_duration_ms=1000, min_query_count=1,
                                 offline_expected_qps=100)
    sut = SimpleNamespace(issued=110, completed=0)
    progress = RunProgress(Console(file=io.StringIO(), force_terminal=True, width=160), interval_s=30)
    progress.attach(sut, None, settings)
    try:
        for _ in range(6):  # 10 samples every 0.15 s: about 67 samples/s
            time.sleep(0.15)
            sut.completed += 10
        time.sleep(2.5 * 0.2)  # two refreshes of the bar
        rendered = io.StringIO()
        Console(file=rendered, width=160, color_system=None).print(progress._progress.get_renderable())
    finally:
        progress.close()
    text = rendered.getvalue()
    assert "60/110" in text, text
    rate = float(text.split(" samples/s")[0].rsplit(" ", 1)[-1])
    assert 20 < rate < 200, text  # the recent rate, not a placeholder
    left = text.split(" left")[0].rsplit(" ", 1)[-1]
    assert left.count(":") == 2 and left != "-:--:--", text


def test_a_piped_accuracy_run_says_the_rate_of_its_first_samples():
    from rich.console import Console

    from mlharness.progress import RunProgress

    buf = io.StringIO()
    settings = _loadgen_settings("Offline", "AccuracyOnly", offline_expected_qps=100)
    sut = SimpleNamespace(issued=0, completed=0)
    progress = RunProgress(Console(file=buf, force_terminal=False, width=200), interval_s=30)
    progress.attach(sut, 400, settings)
    sut.issued = 400
    try:
        for _ in range(12):  # 8 samples every 0.15 s: about 53 samples/s
            time.sleep(0.15)
            sut.completed += 8
    finally:
        progress.close()
    text = buf.getvalue()
    assert "Offline accuracy run: LoadGen will issue 1 query of 400 samples; the rate and the time left follow " \
           "from the first samples" in text, text
    assert "100" not in text.splitlines()[0]  # LoadGen's placeholder expected QPS is never the figure
    said = [line for line in text.splitlines() if line.startswith("Offline accuracy run at ")]
    assert said and "samples/s (from the first" in said[0] and " left" in said[0], text
    rate = float(said[0].split("Offline accuracy run at ")[1].split(" ")[0])
    assert 25 < rate < 110, said


@pytest.mark.slow
def test_a_tensor_server_result_shows_its_p99_against_its_bound(run_cli, tmp_path):
    proc = run_cli("run", "--scenario", "Server", "--mode", "performance", "--min-duration-ms", "1000",
                   "--target-qps", "200", "--target-latency-ms", "50", "--no-progress", "--output",
                   str(tmp_path / "srv"))
    assert proc.returncode == 0, proc.stderr
    row = [line for line in proc.stdout.splitlines() if line.strip().startswith("latency ")]
    assert row and "p50 " in row[0] and "p90 " in row[0], proc.stdout
    import re

    m = re.search(r"p99 ([\d,.]+) ms ([≤>]) bound 50\.00 ms", row[0])
    assert m, row
    assert (m.group(2) == "≤") == (float(m.group(1).replace(",", "")) <= 50.0)
