"""The ``openai`` predictor's requests spread over client processes (``client_processes``), against the fake
OpenAI-compatible server (:mod:`mlharness.measurement.fake_openai`): a real LoadGen Offline run with two client
processes completes every sample once with the server's ids, reported to LoadGen from one thread; a client process
killed in the middle of a run fails the run with an error naming it, without a hang."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

from mlharness.measurement.fake_openai import FakeOpenAI, token_ids
from mlharness.predictors.generative import TokenRequest
from tests.test_openai import Recorder
from tests.test_openai_concurrency import ThreadLog, answers, predictor, prompt, run


def test_requests_are_dealt_over_the_processes_and_reported_once():
    with FakeOpenAI(tokens=6, delay_s=0.0) as srv:
        p = predictor(srv.url, model="fake-model", generation={"max_new_tokens": 6}, client_processes=2,
                      max_concurrency=64)
        try:
            pids = [w["pid"] for w in p.describe()["client_processes"]]
            streams = [Recorder() for _ in range(40)]
            p.submit([TokenRequest(i, np.asarray(prompt(i))) for i in range(40)], streams)
            assert p.drain(timeout_s=30)
            described = p.describe()
        finally:
            t0 = time.monotonic()
            p.close()
            took = time.monotonic() - t0
    assert all(s.error is None for s in streams), [s.error for s in streams if s.error][:3]
    assert [s.result.tolist() for s in streams] == [token_ids(prompt(i), 6) for i in range(40)]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert [w["requests"] for w in described["client_processes"]] == [20, 20]  # dealt to the least busy
    assert described["max_concurrency"] == 64
    assert described["endpoints"] == [{"url": srv.url, "alive": None, "requests": None}]  # counted in the workers
    assert took < 10 and not any(c.pid in pids for c in multiprocessing.active_children())


@pytest.mark.parametrize("scenario,extra", [("Offline", []), ("Server", ["--target-qps", "400"])])
def test_a_run_over_two_client_processes_completes_every_sample_once(tmp_path, monkeypatch, shared_cache, scenario,
                                                                     extra):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    threads = ThreadLog(monkeypatch)
    count = 400
    with FakeOpenAI(tokens=16, delay_s=0.005) as srv:
        assert run(tmp_path, srv.url, scenario, count, 16, *extra, client_processes=2) == 0
        stats = srv.stats()
    got = answers(tmp_path / "out")
    assert sorted(got) == list(range(count))
    assert all(ids == token_ids(prompt(i), 16) for i, ids in got.items())
    assert stats["completed"] == count and stats["peak_streams"] > 16
    assert len(threads.calls["complete_tokens"] | threads.calls.get("report_first", set())) == 1, threads.calls
    assert len(threads.calls["QuerySamplesComplete"]) == 1
    processes = json.loads((tmp_path / "out" / "mlharness_run.json").read_text())["predictor"]["client_processes"]
    assert len(processes) == 2 and sum(w["requests"] for w in processes) == count
    assert all(w["requests"] > 0 for w in processes), processes
    if scenario == "Server":  # first tokens reach LoadGen too, from the same receiving thread
        assert threads.calls["report_first"] == threads.calls["complete_tokens"]


def test_a_client_process_killed_mid_run_fails_the_run_naming_it(tmp_path, monkeypatch, shared_cache, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLHARNESS_CACHE", str(shared_cache))
    killed: list[int] = []

    with FakeOpenAI(tokens=200, delay_s=0.02) as srv:  # streams of 4 s: in flight when the process is killed

        def kill_one() -> None:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                if srv.stats()["peak_streams"] >= 50:
                    children = multiprocessing.active_children()
                    if children:
                        killed.append(children[0].pid)
                        os.kill(children[0].pid, signal.SIGKILL)
                        return
                time.sleep(0.1)

        killer = threading.Thread(target=kill_one, daemon=True)
        killer.start()
        t0 = time.monotonic()
        code = run(tmp_path, srv.url, "Offline", 100, 200, client_processes=2)
        took = time.monotonic() - t0
        killer.join(5)
    assert killed, "no client process was seen to kill"
    assert code == 3
    assert f"(pid {killed[0]}) was killed by SIGKILL" in caplog.text
    assert took < 45
    assert not [c for c in multiprocessing.active_children() if c.name.startswith("mlharness-openai-client")]


def test_a_client_process_that_cannot_start_is_a_clear_error():
    from mlharness.errors import PredictorError

    with pytest.raises(PredictorError, match=r"openai client process 1 \(pid \d+\) could not start: framework 'openai': "
                       r"endpoint http://127.0.0.1:9/v1 does not answer GET /models"):
        predictor("http://127.0.0.1:9", client_processes=2, models_timeout_s=2)
    assert not [c for c in multiprocessing.active_children() if c.name.startswith("mlharness-openai-client")]


def test_client_processes_is_checked():
    from mlharness.errors import PredictorError
    from mlharness.predictors.openai.options import parse_options

    assert parse_options({"endpoints": ["http://x"]}).client_processes == 1
    with pytest.raises(PredictorError, match=r"options.client_processes is 0; use a whole number from 1 to 64"):
        parse_options({"endpoints": ["http://x"], "client_processes": 0})


def test_bench_client_passes_the_client_processes_to_its_runs(tmp_path):
    import yaml

    from mlharness.errors import MLHarnessError
    from mlharness.measurement.bench_client import ClientBenchConfig, openai_manifest

    two = yaml.safe_load(openai_manifest("llama3.1-8b-random", 8, 16, "m", tmp_path, 2).read_text())
    assert two["framework"]["options"] == {"max_concurrency": 16, "model": "m", "client_processes": 2}
    one = yaml.safe_load(openai_manifest("llama3.1-8b-random", 8, 16, "m", tmp_path).read_text())
    assert "client_processes" not in one["framework"]["options"]  # today's single loop
    with pytest.raises(MLHarnessError, match="--client-processes 0"):
        ClientBenchConfig(client_processes=0).check()
