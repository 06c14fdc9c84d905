"""Unit tests of the SUT's timed path: Pipeline.encode, and the staged workers/batching of SystemUnderTest driven
with fake query samples. Only here are LoadGen's QuerySamplesComplete/QuerySampleResponse replaced (by recorders
that read each response's bytes while its buffer is alive); everything else uses the real classes."""

from __future__ import annotations

import ctypes
import json
import threading
import time
from dataclasses import dataclass

import mlperf_loadgen
import numpy as np
import pytest

from mlharness.errors import HookError, PredictorError, RunFailed
from mlharness.loadgen.batch import Pipeline, Strategy
from mlharness.loadgen.qsl import SampleStore
from mlharness.loadgen.sut import SystemUnderTest

MANIFEST = "/manifests/fake.yaml"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MLHARNESS_DEMO_DIR", str(tmp_path / "demo"))


# ------------------------------------------------------------------------------------------------- fakes


class FakeHooks:
    """The part of HookSet that Pipeline uses."""

    def __init__(self, postprocess=None):
        self.manifest = MANIFEST
        self._fns = {"postprocess": postprocess} if postprocess else {}

    def get(self, name):
        return self._fns.get(name)

    def runtime_error(self, name, exc, when=""):
        return HookError(name, self.manifest, f"raised {type(exc).__name__}: {exc}")


class EchoPredictor:
    """Returns its first input; optionally sleeps, optionally fails on the n-th call."""

    def __init__(self, sleep_s: float = 0.0, fail_on_call: int | None = None, off_host: bool = False):
        self.sleep_s = sleep_s
        self.fail_on_call = fail_on_call
        self.off_host = off_host
        self.calls = 0
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()

    def computes_off_host(self):
        return self.off_host

    def predict(self, inputs):
        with self._lock:
            self.calls += 1
            call = self.calls
            self.batch_sizes.append(len(inputs[0]))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.fail_on_call is not None and call >= self.fail_on_call:
            raise PredictorError(f"fake predictor failed on call {call}")
        return [inputs[0]]


@dataclass
class FakeSample:
    id: int
    index: int


def sample_id(index: int) -> int:
    return 10_000 + 7 * index  # ids unrelated to indices, so a mix-up shows


class Recorder:
    """Stands in for LoadGen's completion API; reads each response's bytes during the call."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches: list[list[int]] = []
        self.threads: list[str] = []  # the thread that completed each batch
        self.data: dict[int, list[bytes]] = {}

    def response(self, id_: int, ptr: int, size: int):
        return (id_, ptr, size)

    def complete(self, responses):
        got = [(i, ctypes.string_at(p, s) if s else b"") for i, p, s in responses]
        with self.lock:
            self.batches.append([i for i, _ in got])
            self.threads.append(threading.current_thread().name)
            for i, d in got:
                self.data.setdefault(i, []).append(d)

    def completed_ids(self) -> list[int]:
        with self.lock:
            return [i for b in self.batches for i in b]


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(mlperf_loadgen, "QuerySampleResponse", rec.response)
    monkeypatch.setattr(mlperf_loadgen, "QuerySamplesComplete", rec.complete)
    return rec


def make_store(n: int) -> SampleStore:
    store = SampleStore(n, 1)
    store.put_all({i: (np.full((4,), i, np.float32),) for i in range(n)})
    return store


def make_pipeline(n: int, predictor=None, postprocess=None, dtype=np.float32) -> Pipeline:
    if postprocess is None:
        def postprocess(ctx, outputs):
            return outputs[0][:, 0]  # one float32 per sample: its index
    return Pipeline(predictor or EchoPredictor(), FakeHooks(postprocess), {}, make_store(n), np.dtype(dtype))


def wait_for(pred, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for the SUT")
        time.sleep(0.002)


# ------------------------------------------------------------------------------------------ Pipeline.encode


def _split(buf: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    raw = buf.tobytes()
    return [raw[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def test_encode_ndarray_with_batch_axis_gives_equal_slices():
    p = make_pipeline(4)
    arr = np.arange(12, dtype=np.float64).reshape(4, 3)  # converted to the declared float32
    buf, offsets = p.encode(arr, 4)
    assert buf.dtype == np.uint8
    assert offsets.tolist() == [0, 12, 24, 36, 48]
    parts = _split(buf, offsets)
    for i, part in enumerate(parts):
        assert np.frombuffer(part, np.float32).tolist() == [3 * i, 3 * i + 1, 3 * i + 2]


def test_encode_1d_array_and_other_dtype():
    p = make_pipeline(3, dtype=np.int64)
    buf, offsets = p.encode(np.array([5, 6, 7], dtype=np.int32), 3)
    assert offsets.tolist() == [0, 8, 16, 24]
    assert np.frombuffer(buf.tobytes(), np.int64).tolist() == [5, 6, 7]


def test_encode_bytes_of_different_lengths_gives_offsets():
    p = make_pipeline(3, dtype=np.uint8)
    responses = [b"a", b"", b"xyz12"]
    buf, offsets = p.encode(responses, 3)
    assert offsets.tolist() == [0, 1, 1, 6]
    assert _split(buf, offsets) == responses
    # bytearray and memoryview are bytes too
    buf, offsets = p.encode((bytearray(b"ab"), memoryview(b"c")), 2)
    assert offsets.tolist() == [0, 2, 3] and buf.tobytes() == b"abc"


def test_encode_json_strings():
    p = make_pipeline(2)
    buf, offsets = p.encode([json.dumps([1.5, 2.5, 3.5]), "7"], 2)
    assert offsets.tolist() == [0, 12, 16]
    parts = _split(buf, offsets)
    assert np.frombuffer(parts[0], np.float32).tolist() == [1.5, 2.5, 3.5]
    assert np.frombuffer(parts[1], np.float32).tolist() == [7.0]


def test_encode_ragged_lists_of_numbers():
    p = make_pipeline(2, dtype=np.int32)
    buf, offsets = p.encode([[1, 2, 3], [4]], 2)
    assert offsets.tolist() == [0, 12, 16]
    assert np.frombuffer(buf.tobytes(), np.int32).tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("responses", "n", "needle"),
    [
        ([1.0, 2.0], 3, "returned 2 responses for a batch of 3 samples"),
        ((1.0, 2.0, 3.0, 4.0), 3, "returned 4 responses for a batch of 3 samples"),
        (np.zeros((2, 5), np.float32), 3, "one response per sample (3)"),
        (np.zeros((2, 5), np.float32), 3, "of shape (2, 5)"),
        (np.float32(1.0), 1, "got float32"),
        ({"a": 1}, 1, "got dict"),
        (None, 1, "got NoneType"),
        (["not json"], 1, "response 0 is a string but not JSON"),
        ([b"ok", {"x": 1}], 2, "response 1 cannot be encoded as float32"),
        (np.array(["a", "b"]), 2, "cannot be encoded as float32"),
    ],
)
def test_encode_errors_are_hook_errors_naming_postprocess(responses, n, needle):
    p = make_pipeline(n)
    with pytest.raises(HookError) as ei:
        p.encode(responses, n)
    msg = str(ei.value)
    assert ei.value.hook == "postprocess"
    assert MANIFEST in msg and "postprocess" in msg
    assert needle in msg


def test_pipeline_run_wraps_a_raising_postprocess():
    def postprocess(ctx, outputs):
        raise ValueError("boom")

    p = make_pipeline(4, postprocess=postprocess)
    with pytest.raises(HookError, match=r"hook 'postprocess'.*raised ValueError: boom"):
        p.run(np.array([0, 1], dtype=np.int64))


def test_pipeline_run_without_postprocess_uses_the_first_output():
    p = Pipeline(EchoPredictor(), FakeHooks(None), {}, make_store(4), np.dtype(np.float32))
    buf, offsets = p.run(np.array([3, 1], dtype=np.int64))
    assert offsets.tolist() == [0, 16, 32]
    assert np.frombuffer(buf.tobytes(), np.float32).tolist() == [3.0] * 4 + [1.0] * 4


# ------------------------------------------------------------------------------------- SystemUnderTest


def check_exactly_once(rec: Recorder, indices: list[int], max_batchsize: int, predictor: EchoPredictor) -> None:
    ids = rec.completed_ids()
    assert sorted(ids) == sorted(sample_id(i) for i in indices), "every issued id completed exactly once"
    assert len(ids) == len(set(ids))
    # the model's batches respect the batch size (completions may group several batches in one call)
    sizes = predictor.batch_sizes
    assert all(1 <= b <= max_batchsize for b in sizes) and sum(sizes) == len(indices), sizes
    for i in indices:  # each response carries its own sample's data (no mix-up inside a batch)
        (data,) = rec.data[sample_id(i)]
        assert np.frombuffer(data, np.float32).tolist() == [float(i)]


def run_queries(sut: SystemUnderTest, recorder: Recorder, queries: list[list[int]], n: int,
                before_start: bool = False, pause_every: int = 0) -> None:
    """Issue ``queries`` (lists of sample indices), before or after the workers start, and wait for all."""
    if before_start:
        for q in queries:
            sut.issue([FakeSample(sample_id(i), i) for i in q])
    sut.start()
    try:
        if not before_start:
            for k, q in enumerate(queries):
                sut.issue([FakeSample(sample_id(i), i) for i in q])
                if pause_every and k % pause_every == 0:
                    time.sleep(0.001)
        wait_for(lambda: len(recorder.completed_ids()) == n)
    finally:
        sut.stop()


def test_server_strategy_coalesces_queued_single_sample_queries(recorder):
    n, mb = 40, 4
    predictor = EchoPredictor()
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Server", mb, 50.0), workers=1)
    # LoadGen's Server issues one sample per query; all queued before the workers start
    run_queries(sut, recorder, [[i] for i in range(n)], n, before_start=True)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert predictor.batch_sizes == [mb] * (n // mb)  # a full queue makes full batches
    assert sut.issued == sut.completed == n and sut.batches == n // mb and sut.error is None


def test_server_strategy_two_workers_while_queries_arrive(recorder):
    n, mb = 120, 4
    predictor = EchoPredictor(sleep_s=0.002)
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Server", mb, 5.0), workers=2)
    run_queries(sut, recorder, [[i] for i in range(n)], n, pause_every=10)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert max(predictor.batch_sizes) > 1  # samples queued during a predict are batched together
    assert sut.issued == sut.completed == n


def arrive(sut: SystemUnderTest, via: str, i: int) -> None:
    """One Server arrival through the feeder (``issue``, LoadGen's plain callback) or straight into the runners'
    queue (``issue_server``, what a Server run uses)."""
    if via == "issue":
        sut.issue([FakeSample(sample_id(i), i)])
    else:
        sut.issue_server([sample_id(i)], [i])


@pytest.mark.parametrize("via", ["issue", "issue_server"])
def test_server_bursts_are_batched_and_completed_once(recorder, via):
    """Bursts of arrivals while both runners are busy: each burst tops up open batches, none is lost."""
    mb, bursts, per_burst = 8, 12, 13
    n = bursts * per_burst
    predictor = EchoPredictor(sleep_s=0.004)
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Server", mb, 1.0), workers=2)
    sut.start()
    try:
        for b in range(bursts):
            for i in range(b * per_burst, (b + 1) * per_burst):
                arrive(sut, via, i)
            time.sleep(0.003)
        wait_for(lambda: len(recorder.completed_ids()) == n)
    finally:
        sut.stop()
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert predictor.batch_sizes.count(mb) >= bursts // 2, predictor.batch_sizes
    assert sut.issued == sut.completed == n and sut.batches == len(predictor.batch_sizes)


def test_server_runner_completes_when_nothing_waits(recorder):
    """An arrival at an idle Server is completed by the runner that ran it (no hand-off to the completer to
    wait for); while samples wait, the completer takes the finished batches so the runner starts the next."""
    predictor = EchoPredictor(sleep_s=0.005)  # well above the 1 ms under which every batch completes inline
    sut = SystemUnderTest(make_pipeline(8, predictor), Strategy.for_scenario("Server", 1, 0.0), workers=1)
    sut.start()
    try:
        arrive(sut, "issue_server", 0)
        wait_for(lambda: len(recorder.completed_ids()) == 1)
        assert recorder.threads == ["mlharness-runner-0"]
        for i in range(1, 8):  # a burst: all but the last batch leave samples waiting behind them
            arrive(sut, "issue_server", i)
        wait_for(lambda: len(recorder.completed_ids()) == 8)
    finally:
        sut.stop()
    check_exactly_once(recorder, list(range(8)), 1, predictor)
    by_sample = {i: t for b, t in zip(recorder.batches, recorder.threads, strict=True) for i in b}
    assert "mlharness-completer" in recorder.threads and by_sample[sample_id(7)] == "mlharness-runner-0"
    assert sut.issued == sut.completed == 8 and sut.error is None


def test_server_flush_releases_an_open_batch_at_once(recorder):
    """A lone sample would wait up to the coalescing time (here 10 s) for company; LoadGen's flush sends it."""
    predictor = EchoPredictor()
    sut = SystemUnderTest(make_pipeline(4, predictor), Strategy.for_scenario("Server", 4, 10_000.0))
    sut.start()
    try:
        sut.issue([FakeSample(sample_id(0), 0)])
        time.sleep(0.05)
        assert recorder.completed_ids() == []  # still open, waiting for more samples
        t = time.monotonic()
        sut.flush()
        wait_for(lambda: len(recorder.completed_ids()) == 1, timeout=5)
        assert time.monotonic() - t < 2.0
        sut.issue([FakeSample(sample_id(1), 1)])  # after a flush nothing waits
        wait_for(lambda: len(recorder.completed_ids()) == 2, timeout=5)
    finally:
        sut.stop()
    assert predictor.batch_sizes == [1, 1] and sut.issued == sut.completed == 2


def test_server_strategy_splits_multi_sample_queries(recorder):
    """A query larger than the batch (or larger than the room left in a batch) is split, never dropped."""
    mb = 4
    sizes = [3, 6, 1, 9, 2]
    n = sum(sizes)
    bounds = np.cumsum([0] + sizes)
    predictor = EchoPredictor()
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Server", mb, 20.0), workers=2)
    run_queries(sut, recorder, [list(range(a, b)) for a, b in zip(bounds, bounds[1:], strict=False)], n,
                before_start=True)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert sut.issued == sut.completed == n


@pytest.mark.parametrize("workers", [1, 3])
def test_offline_strategy_splits_one_big_query(recorder, workers):
    n, mb = 37, 8
    predictor = EchoPredictor()
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Offline", mb), workers=workers)
    run_queries(sut, recorder, [list(range(n))], n)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert sorted(predictor.batch_sizes) == [5, 8, 8, 8, 8]
    assert sut.strategy.coalesce_wait_s is None and sut.batches == 5


def test_offline_completes_finished_batches_in_bulk(recorder, monkeypatch):
    """While one QuerySamplesComplete call is slow, batches that finish meanwhile go out together in the next
    call: fewer completion calls than batches, each sample still exactly once."""
    n, mb = 64, 4
    slow = Recorder()

    def complete(responses):
        time.sleep(0.02)
        slow.complete(responses)
        recorder.complete(responses)

    monkeypatch.setattr(mlperf_loadgen, "QuerySamplesComplete", complete)
    predictor = EchoPredictor(sleep_s=0.002)  # long enough a predict to be handed to the completer
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Offline", mb), workers=2)
    run_queries(sut, recorder, [list(range(n))], n)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert len(predictor.batch_sizes) == n // mb == sut.batches
    assert len(recorder.batches) < n // mb, [len(b) for b in recorder.batches]


def test_offline_feeder_gathers_ahead_but_not_everything(recorder, monkeypatch):
    """The feeder gathers the next batches while the runner predicts, a few per runner ahead (4 here, then it
    waits until 2 are left): a huge Offline query is never copied into memory all at once."""
    from mlharness.loadgen import stages

    monkeypatch.setattr(stages, "GATHER_AHEAD_BYTES", 0)  # these samples are tiny: count them as large
    n, mb = 40, 2
    gathered: list[int] = []
    predicting: list[int] = []
    predictor = EchoPredictor(sleep_s=0.01, off_host=True)  # a GPU, say: the CPU is free while it computes
    pipeline = make_pipeline(n, predictor)
    real_gather = pipeline.store.gather

    def gather(idx):
        gathered.append(len(gathered))
        return real_gather(idx)

    def predict(inputs, _real=predictor.predict):
        predicting.append(len(gathered) - len(predicting))  # batches gathered but not yet predicted
        return _real(inputs)

    pipeline.store.gather = gather
    predictor.predict = predict
    sut = SystemUnderTest(pipeline, Strategy.for_scenario("Offline", mb), workers=1)
    run_queries(sut, recorder, [list(range(n))], n)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    # at the start of each predict: its own batch, at most 4 waiting and one in the feeder's hands, of 20
    assert max(predicting) <= 6, predicting
    assert max(predicting[:-3]) >= 2, predicting  # and the next batch was ready when predict started


@pytest.mark.parametrize("sleep_s,where", [(0.0, "mlharness-runner-0"), (0.003, "mlharness-completer")])
def test_short_predicts_complete_on_the_runner_long_ones_on_the_completer(recorder, monkeypatch, sleep_s, where):
    n, mb = 12, 4
    threads: list[str] = []

    def complete(responses):
        threads.append(threading.current_thread().name)
        recorder.complete(responses)

    monkeypatch.setattr(mlperf_loadgen, "QuerySamplesComplete", complete)
    predictor = EchoPredictor(sleep_s=sleep_s)
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Offline", mb), workers=1)
    run_queries(sut, recorder, [list(range(n))], n)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert set(threads) == {where}


@pytest.mark.parametrize("off_host,ahead_bytes", [(True, None), (False, 0)])
def test_runner_gathers_tiny_batches_and_every_batch_of_a_cpu_model(recorder, monkeypatch, off_host, ahead_bytes):
    """Gathering ahead pays only for a large batch of a model computing off this CPU: a batch of a few bytes
    is not worth a hand-off, and on the CPU the copy would compete with the framework's threads. Then the
    runner gathers, on its own thread."""
    from mlharness.loadgen import stages

    if ahead_bytes is not None:
        monkeypatch.setattr(stages, "GATHER_AHEAD_BYTES", ahead_bytes)
    n, mb = 16, 4
    threads: list[str] = []
    predictor = EchoPredictor(off_host=off_host)
    pipeline = make_pipeline(n, predictor)
    real_gather = pipeline.store.gather

    def gather(idx):
        threads.append(threading.current_thread().name)
        return real_gather(idx)

    pipeline.store.gather = gather
    sut = SystemUnderTest(pipeline, Strategy.for_scenario("Offline", mb), workers=1)
    run_queries(sut, recorder, [list(range(n))], n)
    check_exactly_once(recorder, list(range(n)), mb, predictor)
    assert threads == ["mlharness-runner-0"] * (n // mb)


def test_non_server_strategies_never_span_queries(recorder):
    n = 12
    predictor = EchoPredictor()
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("SingleStream", 8), workers=1)
    run_queries(sut, recorder, [[i] for i in range(n)], n, before_start=True)
    assert predictor.batch_sizes == [1] * n


def test_failure_completes_every_sample_once_and_stops_predicting(recorder):
    n, mb = 30, 3
    predictor = EchoPredictor(fail_on_call=2)
    failures: list[BaseException] = []
    sut = SystemUnderTest(make_pipeline(n, predictor), Strategy.for_scenario("Server", mb, 5.0), workers=2,
                          on_failure=failures.append)
    for i in range(n):
        sut.issue([FakeSample(sample_id(i), i)])
    sut.start()
    try:
        wait_for(lambda: len(recorder.completed_ids()) == n)
    finally:
        sut.stop()
    ids = recorder.completed_ids()
    assert sorted(ids) == sorted(sample_id(i) for i in range(n)) and len(ids) == len(set(ids))
    assert len(failures) == 1 and isinstance(failures[0], PredictorError)  # on_failure fires once
    assert sut.error is failures[0]
    assert predictor.calls <= 3  # at most the in-flight batch of the other worker ran after the failure
    empty = [i for i in ids if recorder.data[i] == [b""]]
    assert len(empty) >= n - 2 * mb  # failed batch and all later ones: empty responses
    assert sut.issued == sut.completed == n


def test_run_test_raises_runfailed_naming_the_error(recorder, monkeypatch):
    """run_test with a fake LoadGen test: the recorded error surfaces as RunFailed after LoadGen returns."""
    n = 8
    sut = SystemUnderTest(make_pipeline(n, EchoPredictor(fail_on_call=1)), Strategy.for_scenario("Offline", 4))

    def fake_start(sut_handle, qsl_handle, settings, log_settings, audit):
        sut.issue([FakeSample(sample_id(i), i) for i in range(n)])
        wait_for(lambda: len(recorder.completed_ids()) == n)

    monkeypatch.setattr(mlperf_loadgen, "ConstructQSL", lambda *a: "qsl")
    monkeypatch.setattr(mlperf_loadgen, "ConstructSUT", lambda *a: "sut")
    monkeypatch.setattr(mlperf_loadgen, "DestroyQSL", lambda h: None)
    monkeypatch.setattr(mlperf_loadgen, "DestroySUT", lambda h: None)
    monkeypatch.setattr(mlperf_loadgen, "StartTestWithLogSettings", fake_start)
    with pytest.raises(RunFailed, match="fake predictor failed on call 1"):
        sut.run_test(loader=None, total_count=n, performance_count=n, settings=None, log_settings=None,
                     audit_config="")
    assert sut.issued == sut.completed == n
    assert sut._stages is None  # workers were stopped


def test_strategy_for_scenario():
    s = Strategy.for_scenario("Server", 8, 2.5)
    assert (s.name, s.max_batchsize, s.coalesce_wait_s) == ("ServerStrategy", 8, 0.0025)
    for sc in ("SingleStream", "MultiStream", "Offline"):
        s = Strategy.for_scenario(sc, 4, 2.5)
        assert s.name == f"{sc}Strategy" and s.coalesce_wait_s is None


def test_latency_scenarios_run_inline_only_with_one_worker():
    """SingleStream/MultiStream with one worker process each query on LoadGen's issue thread (LoadGen waits
    for it anyway); more workers, or the throughput scenarios, keep the queue."""
    from mlharness.loadgen.batch import Strategy
    from mlharness.loadgen.sut import SystemUnderTest

    p = Pipeline(EchoPredictor(), FakeHooks(None), {}, make_store(4), np.dtype(np.float32))
    for scenario, workers, inline in [("SingleStream", 1, True), ("MultiStream", 1, True),
                                      ("SingleStream", 2, False), ("Offline", 1, False), ("Server", 1, False)]:
        sut = SystemUnderTest(p, Strategy.for_scenario(scenario, 4), workers=workers)
        assert sut.inline is inline, (scenario, workers)


@pytest.mark.parametrize("scenario", ["Server", "Offline"])
def test_run_test_hands_server_arrivals_straight_to_the_runners(recorder, monkeypatch, scenario):
    """A Server run gives LoadGen the callback that puts arrivals into the runners' queue (the feeder never sees
    them); the other scenarios keep the queue through the feeder."""
    n = 6
    sut = SystemUnderTest(make_pipeline(n, EchoPredictor()), Strategy.for_scenario(scenario, 1))
    fed = []
    unpack = sut.unpack
    monkeypatch.setattr(sut, "unpack", lambda item: fed.append(item) or unpack(item))
    handed = {}

    def fake_start(sut_handle, qsl_handle, settings, log_settings, audit):
        for i in range(n):
            handed["issue"]([sample_id(i)], [i])
        wait_for(lambda: len(recorder.completed_ids()) == n)

    monkeypatch.setattr(mlperf_loadgen, "ConstructQSL", lambda *a: "qsl")
    monkeypatch.setattr(mlperf_loadgen, "ConstructFastSUT", lambda issue, flush: handed.update(issue=issue) or "sut")
    monkeypatch.setattr(mlperf_loadgen, "DestroyQSL", lambda h: None)
    monkeypatch.setattr(mlperf_loadgen, "DestroyFastSUT", lambda h: None)
    monkeypatch.setattr(mlperf_loadgen, "StartTestWithLogSettings", fake_start)
    sut.run_test(loader=None, total_count=n, performance_count=n, settings=None, log_settings=None, audit_config="")
    assert sut.issued == sut.completed == n
    assert (len(fed) == 0) == (scenario == "Server"), fed
