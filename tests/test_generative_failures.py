"""A generative run whose sample fails, or answers with fewer than two tokens, ends with exit 3 naming the sample
(and the endpoint, for a remote server), never with a native crash: in every scenario and both modes, with the
in-process token-toy model and with an OpenAI-compatible stand-in server on 127.0.0.1. The partial output is kept
as ``<dir>.failed-<time>`` and no hidden staging folder is left behind.

The crash these guard against: LoadGen, in accuracy mode, writes each completed sample's first-token record; a
sample completed without a ``FirstTokenComplete`` (a sample issued after the run had failed, or one whose first
token was dropped) made its log thread die of SIGSEGV. The unit tests below check the token SUT's order of calls
under racing threads with a recording stand-in for LoadGen."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.test_generative import OFFLINE_PERF, SERVER_PERF, SS_PERF, run, toy

SCENARIOS = ["SingleStream", "MultiStream", "Server", "Interactive", "Offline"]
PERF = {"SingleStream": SS_PERF, "MultiStream": SS_PERF, "Server": SERVER_PERF, "Interactive": SERVER_PERF,
        "Offline": OFFLINE_PERF}


def fault(kind: str, sample: int) -> tuple[dict, str]:
    """The toy's options that make ``sample`` go wrong, and the message the run must end with."""
    if kind == "raises":  # after its first token was reported
        return {"fail_after": 1, "fail_sample": sample}, \
            rf"generating sample {sample} \(qsl_idx\) failed: PredictorError: token-toy: failing after 1 tokens"
    if kind == "raises-before-first":
        return {"fail_after": 0, "fail_sample": sample}, \
            rf"generating sample {sample} \(qsl_idx\) failed: PredictorError: token-toy: failing after 0 tokens"
    if kind == "one-token":
        return {"short_sample": sample}, rf"sample {sample} \(qsl_idx\) got a response of 1 token\(s\)"
    assert kind == "no-token"  # an empty answer: the engine never reports a first token
    return {"short_sample": sample, "short_tokens": 0}, rf"sample {sample} \(qsl_idx\) got a response of 0 token\(s\)"


def assert_failed_cleanly(proc, out: Path, message: str, loadgen_ran: bool = True) -> None:
    # a native crash is a negative return code (-11 SIGSEGV, -6 SIGABRT) with no error line
    assert proc.returncode == 3, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    assert re.search(r"error: .*" + message, proc.stderr), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    siblings = [p.name for p in out.parent.iterdir()]
    failed = [out.parent / n for n in siblings if n.startswith(f"{out.name}.failed-")]
    assert len(failed) == 1, siblings
    assert not [n for n in siblings if ".partial" in n], siblings
    assert not out.exists()
    if loadgen_ran:  # LoadGen's own logs of the failed test are kept for a look
        assert (failed[0] / "mlperf_log_detail.txt").is_file(), sorted(p.name for p in failed[0].iterdir())


@pytest.mark.parametrize("kind", ["raises", "one-token", "no-token"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_accuracy_run_with_a_bad_sample_exits_3_naming_it(run_cli, tmp_path, scenario, kind):
    """Sample 2 of 4 goes wrong; the samples issued after it are completed empty, each with a first token."""
    options, message = fault(kind, 2)
    out = tmp_path / "out"
    # --no-calibrate: Server and Interactive would otherwise meet the bad sample while calibrating, before LoadGen
    proc = run(run_cli, toy(tmp_path, **options), scenario, out, "--mode", "accuracy", "--count", "4",
               "--no-calibrate", timeout=90)
    assert_failed_cleanly(proc, out, message)


@pytest.mark.parametrize("scenario,kind", [("SingleStream", "raises-before-first"), ("MultiStream", "no-token"),
                                           ("Server", "one-token"), ("Interactive", "raises"),
                                           ("Offline", "no-token")])
def test_performance_run_with_a_bad_sample_exits_3_naming_it(run_cli, tmp_path, scenario, kind):
    """One sample in the performance set, so LoadGen surely issues it. Server and Interactive state their TTFT and
    TPOT bounds: a non-benchmark model's are otherwise derived from generations timed before the run, which would
    meet the bad sample there (test_failure_while_calibrating_names_the_sample covers that path)."""
    options, message = fault(kind, 0)
    out = tmp_path / "out"
    conf = []
    if scenario in ("Server", "Interactive"):
        model = "token_toy-interactive" if scenario == "Interactive" else "token_toy"
        (tmp_path / "user.conf").write_text(f"{model}.Server.ttft_latency = 2000\n{model}.Server.tpot_latency = 2000\n")
        conf = ["--user-conf", str(tmp_path / "user.conf")]
    proc = run(run_cli, toy(tmp_path, **options), scenario, out, "--count", "1", *PERF[scenario], *conf,
               timeout=90)
    assert_failed_cleanly(proc, out, message)


def test_failure_while_calibrating_names_the_sample(run_cli, tmp_path):
    """A Server accuracy run calibrates its rate on whole generations first: the failing sample is named there."""
    options, _ = fault("raises", 1)
    out = tmp_path / "out"
    proc = run(run_cli, toy(tmp_path, **options), "Server", out, "--mode", "accuracy", "--count", "4", timeout=90)
    assert_failed_cleanly(proc, out, r"calibration: generating sample 1 \(qsl_idx\) failed before the LoadGen "
                                     r"test: PredictorError: token-toy: failing after 1 tokens", loadgen_ran=False)


@pytest.mark.parametrize("scenario", ["SingleStream", "Server"])
def test_endpoint_failing_mid_stream_exits_3_naming_sample_and_endpoint(run_cli, tmp_path, scenario):
    """The same through ``--endpoint``: a stand-in server sends an error event after one token of every answer."""
    from tests.helpers.openai_stub import StubServer

    server = StubServer(n_tokens=5, fail_after=1)
    try:
        out = tmp_path / "out"
        proc = run(run_cli, toy(tmp_path), scenario, out, "--mode", "accuracy", "--count", "4", "--no-calibrate",
                   "--endpoint", server.url, timeout=90)
    finally:
        server.close()
    assert_failed_cleanly(proc, out, r"generating sample \d+ \(qsl_idx\) failed: .*" + re.escape(server.url))


# -- the token SUT's calls to LoadGen, recorded --------------------------------------------------------------------


class RecordingLoadGen:
    """LoadGen's three calls the token SUT makes, recorded in order from any thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int | None]] = []
        self.threads: set[int] = set()  # the threads that called LoadGen
        self._lock = threading.Lock()

    def QuerySampleResponse(self, sample_id, ptr, size, n_tokens=None):  # noqa: N802 - LoadGen's names
        assert (ptr == 0) == (size == 0), "a response with data has a pointer, an empty one none"
        return sample_id, size, n_tokens

    def FirstTokenComplete(self, responses):  # noqa: N802
        with self._lock:
            self.threads.add(threading.get_ident())
            self.events += [("first", r[0], r[1]) for r in responses]

    def QuerySamplesComplete(self, responses):  # noqa: N802
        with self._lock:
            self.threads.add(threading.get_ident())
            self.events += [("complete", r[0], r[2]) for r in responses]

    def per_sample(self) -> dict[int, list[str]]:
        calls: dict[int, list[str]] = {}
        for what, sample_id, _ in self.events:
            calls.setdefault(sample_id, []).append(what)
        return calls


def token_sut(scenario: str = "Server"):
    from mlharness.kinds.tokens.sut import TokenSUT

    sut = TokenSUT([], store=None, scenario=scenario)
    sut._lg = lg = RecordingLoadGen()
    sut.start_caller()
    return sut, lg


def test_first_token_precedes_completion_whatever_the_threads_do():
    """Engine threads racing the SUT's abandon: every sample gets exactly one first token, then one completion."""
    from mlharness.kinds.tokens.sut import SampleStream

    sut, lg = token_sut()
    streams = [SampleStream(sut, 1000 + i, i) for i in range(200)]
    sut._outstanding.update(streams)
    rng = np.random.default_rng(0)
    start = threading.Barrier(3)

    def engine(part: list[SampleStream]) -> None:
        start.wait()
        for s in part:
            s.first(np.array([7], dtype=np.int32))
            n = int(rng.integers(0, 4))
            if n == 3:
                s.fail(RuntimeError("engine error"))
            else:
                s.done(np.arange(n + 1, dtype=np.int32))  # 1..3 tokens: some are too short

    def abandon() -> None:
        start.wait()
        for s in reversed(streams):
            s.abandon()

    threads = [threading.Thread(target=engine, args=(streams[::2],)), threading.Thread(target=engine,
               args=(streams[1::2],)), threading.Thread(target=abandon)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    sut.stop_caller()
    assert lg.per_sample() == {s.id: ["first", "complete"] for s in streams}
    assert sut.completed == len(streams) and not sut._outstanding
    # LoadGen's log thread orders a sample's records only when one thread made both calls
    assert len(lg.threads) == 1 and lg.threads != {threading.get_ident()}


def test_samples_issued_after_a_failure_get_a_first_token_before_their_empty_completion():
    sut, lg = token_sut("SingleStream")
    sut.fail(RuntimeError("an earlier sample failed"))
    sut._submit([501, 502], [5, 6])  # LoadGen goes on issuing until its test ends
    sut.stop_caller()
    assert lg.events == [("first", 501, 0), ("complete", 501, 0), ("first", 502, 0), ("complete", 502, 0)]
    assert sut.issued == sut.completed == 2


def test_an_empty_first_token_is_not_one_and_offline_reports_none():
    from mlharness.kinds.tokens.sut import SampleStream

    sut, lg = token_sut()
    s = SampleStream(sut, 77, 3)
    s.first(np.zeros(0, dtype=np.int32))
    s.done(np.array([4, 5, 6], dtype=np.int32))
    sut.stop_caller()
    assert lg.events == [("first", 77, 4), ("complete", 77, 3)]  # its first id, reported with the completion

    offline, lg = token_sut("Offline")
    s = SampleStream(offline, 78, 4)
    s.fail(RuntimeError("engine error"))
    offline.stop_caller()
    assert lg.events == [("complete", 78, 0)]


def test_nothing_reaches_loadgen_after_its_test_ended():
    from mlharness.kinds.tokens.sut import SampleStream

    sut, lg = token_sut()
    late = SampleStream(sut, 90, 9)
    sut._end_test()  # StartTest returned
    late.first(np.array([1], dtype=np.int32))
    late.done(np.array([1, 2], dtype=np.int32))
    sut.stop_caller()
    assert lg.events == [] and sut.completed == 0
