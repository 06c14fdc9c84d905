"""Observability: framework profiles merged into the run's timeline, per-layer breakdowns, telemetry with and
without NVML, and what each trace level records.

The ResNet50 test runs the full-size random-weight ResNet50 through the real CLI with ONNX Runtime's profiler
on, and checks the per-layer table against the graph (53 convolutions per predict call) and against the
predict time the SUT measured (operators can only account for part of it)."""

from __future__ import annotations

import json
import sys
import threading
import time
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mlharness.predictors import PREDICTORS
from mlharness.predictors.base import PredictorConfig
from mlharness.telemetry import sampler as sampler_mod
from mlharness.telemetry.breakdown import layer_breakdown, load_events
from mlharness.telemetry.framework_profile import ClockAlign, mark_nested
from mlharness.telemetry.sampler import TelemetrySampler
from mlharness.telemetry.trace import Tracer
from tests.helpers import framework_models as fm

RESNET50_CONVS = 53  # 1 stem + 16 bottlenecks x 3 + 4 projection shortcuts


def _run(run_cli, out: Path, *extra: str) -> dict:
    proc = run_cli("run", "--scenario", "Offline", "--mode", "accuracy", "--count", "32", "--max-batchsize",
                   "8", "--output", str(out), "--no-progress", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "mlharness_run.json").read_text())


def _events(out: Path) -> list[dict]:
    return json.loads((out / "mlharness_trace.json").read_text())["traceEvents"]


# ---------------------------------------------------------------- clock alignment and nesting (fast)


def test_clock_align_maps_wall_and_monotonic_onto_perf_counter():
    align = ClockAlign()
    time.sleep(0.02)
    wall, mono, perf = time.time_ns(), time.monotonic_ns(), time.perf_counter_ns()
    align.mark()
    for ts in (wall, mono):
        assert abs(align.to_perf_ns(ts) - perf) < 2_000_000  # 2 ms: the reads above are not simultaneous


def test_nested_operators_are_not_counted_twice():
    ev = [{"name": n, "cat": "framework.op", "ts": ts, "dur": d, "tid": 1, "args": {"op_type": n}}
          for n, ts, d in (("aten::conv2d", 0.0, 10.0), ("aten::convolution", 1.0, 8.0),
                           ("aten::relu", 11.0, 2.0))]
    mark_nested(ev)
    assert [e["cat"] for e in ev] == ["framework.op", "framework", "framework.op"]


# ---------------------------------------------------------------- framework profiles in-process


def _profile_in_worker(framework: str, path: Path) -> tuple[Tracer, list[tuple[int, int]]]:
    """Like the runner: the profiler starts on this thread, predict runs on another one."""
    tracer = Tracer("framework")
    cfg = PredictorConfig(model_path=str(path), input_names=["x"], output_names=["y"], profile=True)
    p = PREDICTORS.get(framework)(cfg)
    p.load()
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    spans: list[tuple[int, int]] = []

    def work() -> None:
        for _ in range(3):
            t0 = tracer.now()
            np.testing.assert_allclose(p.predict([x])[0], fm.expected(x), rtol=1e-5, atol=1e-5)
            t1 = tracer.now()
            tracer.span("predict", "model", t0, t1)
            spans.append((t0, t1))

    try:
        p.profile_start(tracer)
        t = threading.Thread(target=work)
        t.start()
        t.join()
        p.profile_stop(tracer)
    finally:
        p.close()
    return tracer, spans


@pytest.mark.parametrize("framework", ["onnxruntime", "pytorch", "tensorflow"])
def test_framework_profile_lands_inside_predict(framework, tmp_path):
    writer = {"onnxruntime": fm.write_onnx, "pytorch": fm.write_torchscript,
              "tensorflow": fm.write_saved_model}
    suffix = {"onnxruntime": "m.onnx", "pytorch": "m.pt", "tensorflow": "saved"}
    tracer, spans = _profile_in_worker(framework, writer[framework](tmp_path / suffix[framework]))
    ops = [e for e in tracer.extra_events if e.get("cat") == "framework.op"]
    assert ops and all(e["args"]["framework"] == framework and e["args"]["op_type"] for e in ops)
    b = layer_breakdown(tracer.events())
    # every predict call ran the affine layer: its matrix product is inside each of the three calls
    matmul = [r for r in b.by_type if any(k in r.key.lower() for k in ("gemm", "matmul", "linear", "addmm"))]
    assert matmul and matmul[0].count == 3, b.by_type
    assert 0 < b.op_total_us <= b.predict_total_us
    measured = sum(t1 - t0 for t0, t1 in spans) / 1000
    assert b.predict_total_us == pytest.approx(measured, rel=1e-6)


# ---------------------------------------------------------------- ResNet50 per-layer breakdown (real CLI)


@pytest.fixture(scope="module")
def imagenet8(tmp_path_factory) -> Path:
    from mlharness.tasks.imagenet.synth import write_synthetic_imagenet

    return write_synthetic_imagenet(tmp_path_factory.mktemp("imagenet") / "val", 8)


@pytest.mark.slow
def test_resnet50_framework_trace_layers(run_cli, imagenet8, tmp_path):
    out = tmp_path / "rn50"
    proc = run_cli("run", "--manifest", "resnet50-random", "--dataset-path", str(imagenet8), "--scenario",
                   "Offline", "--mode", "accuracy", "--count", "8", "--max-batchsize", "4", "--trace",
                   "framework", "--output", str(out), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr
    events = _events(out)
    predicts = [e for e in events if e.get("name") == "predict" and e.get("cat") == "model"]
    assert len(predicts) == 2
    ops = [e for e in events if e.get("cat") == "framework.op"]
    convs = [e for e in ops if e["args"]["op_type"] == "Conv"]
    assert convs[0]["args"]["shapes"][0][1:] == [3, 224, 224]  # the stem sees the image
    # ONNX Runtime's events are on the SUT worker's row, next to the predict spans they belong to
    assert {e["tid"] for e in predicts} <= {e["tid"] for e in ops}

    b = layer_breakdown(load_events(out / "mlharness_trace.json"))
    by_type = {r.key: r for r in b.by_type}
    assert by_type["Conv"].count == RESNET50_CONVS * len(predicts)
    assert b.outside > 0  # the warm-up batch ran before LoadGen and is not counted
    assert b.predict_total_us == pytest.approx(sum(e["dur"] for e in predicts))
    # the operators' sum lies within the measured predict time, and is most of it for a model this heavy
    assert 0.5 * b.predict_total_us < b.op_total_us <= b.predict_total_us
    assert 0 <= b.overhead_share < 0.5
    assert sum(r.share for r in b.by_type) == pytest.approx(1.0)
    assert sum(r.count for r in b.by_layer) == b.op_events
    # 16 of the bottlenecks' 3x3 convolutions are grouped by shape: stage 1's three share one row
    stage1 = [r for r in b.by_layer if r.key.startswith("Conv [4x64x56x56, 64x64x3x3")]
    assert len(stage1) == 1 and stage1[0].count == 3 * len(predicts)

    proc = run_cli("report", "layers", str(out / "mlharness_trace.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["op_total_us"] == pytest.approx(b.op_total_us) and doc["by_type"][0]["key"] == "Conv"
    proc = run_cli("report", str(out), "--layers")
    assert proc.returncode == 0 and "framework overhead" in proc.stdout


# ---------------------------------------------------------------- trace levels (real CLI, demo model)


@pytest.mark.slow
def test_trace_levels(run_cli, tmp_path):
    none = _run(run_cli, tmp_path / "none", "--telemetry-interval-ms", "0")
    assert not (tmp_path / "none" / "mlharness_trace.json").exists()
    assert not (tmp_path / "none" / "mlharness_telemetry.json").exists()
    assert none["telemetry"] == {"enabled": False}

    _run(run_cli, tmp_path / "model", "--trace", "model")
    cats = Counter(e.get("cat") for e in _events(tmp_path / "model"))
    assert cats["model"] > 0 and cats["load"] == 32
    assert cats["framework.op"] == cats["framework"] == cats["system"] == 0

    _run(run_cli, tmp_path / "fw", "--trace", "framework")
    events = _events(tmp_path / "fw")
    ops = [e for e in events if e.get("cat") == "framework.op"]
    assert {e["args"]["op_type"] for e in ops} >= {"GlobalAveragePool", "Gemm", "ArgMax"}
    assert not [e for e in events if e.get("ph") == "C"]
    b = layer_breakdown(events)
    assert b.predict_spans == 4 and b.op_events == 4 * 4 and b.op_total_us <= b.predict_total_us

    meta = _run(run_cli, tmp_path / "sys", "--trace", "system", "--telemetry-interval-ms", "20")
    counters = [e for e in _events(tmp_path / "sys") if e.get("ph") == "C"]
    assert counters and {"process_cpu_percent", "process_rss_mib"} <= set(counters[0]["args"])
    assert len([c for c in counters if c["name"] == "host"]) == meta["telemetry"]["samples"]


# ---------------------------------------------------------------- telemetry


class _FakeNvml(types.ModuleType):
    """pynvml's surface as the sampler uses it: two GPUs, the second without power readings."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.calls = 0
        self.shutdown = False

    def nvmlInit(self): pass  # noqa: E704
    def nvmlShutdown(self): self.shutdown = True  # noqa: E704
    def nvmlDeviceGetCount(self): return 2  # noqa: E704
    def nvmlDeviceGetHandleByIndex(self, i): return i  # noqa: E704
    def nvmlDeviceGetName(self, h): return b"Fake GPU"  # noqa: E704
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h}"  # noqa: E704

    def nvmlDeviceGetUtilizationRates(self, h):
        self.calls += 1
        return types.SimpleNamespace(gpu=40 + 20 * h + self.calls % 2, memory=10)

    def nvmlDeviceGetMemoryInfo(self, h): return types.SimpleNamespace(used=(h + 1) * 1024 ** 3)  # noqa: E704
    def nvmlDeviceGetClockInfo(self, h, which): return 1500 if which == self.NVML_CLOCK_SM else 2600  # noqa: E704
    def nvmlDeviceGetTemperature(self, h, which): return 50 + h  # noqa: E704

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 250_000


def _sample_for(seconds: float, tracer=None) -> dict:
    s = TelemetrySampler(20, tracer=tracer)
    s.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))
    return s.stop()


def test_telemetry_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    summary = _sample_for(0.15)
    assert summary["gpus"] == [] and summary["nvml"].startswith("unavailable: ")
    assert summary["samples"] >= 3
    cpu = summary["host"]["process_cpu_percent"]
    assert 0 <= cpu["min"] <= cpu["mean"] <= cpu["max"] and cpu["max"] > 0
    assert summary["host"]["process_rss_mib"]["min"] > 10


def test_telemetry_with_nvml(monkeypatch, tmp_path):
    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    tracer = Tracer("system")
    s = TelemetrySampler(20, tracer=tracer)
    s.start()
    time.sleep(0.12)
    summary = s.stop()
    assert summary["nvml"] == "ok" and fake.shutdown
    g0, g1 = summary["gpus"]
    assert g0["name"] == "Fake GPU" and g0["uuid"] == "GPU-0"
    assert 40 <= g0["utilization_percent"]["min"] <= g0["utilization_percent"]["max"] <= 41
    assert g0["power_w"] == {"min": 250.0, "mean": 250.0, "max": 250.0}
    assert "power_w" not in g1 and g1["memory_used_mib"]["mean"] == 2048.0  # unsupported: left out
    assert g1["sm_clock_mhz"]["max"] == 1500 and g1["temperature_c"]["max"] == 51
    counters = [e for e in tracer.events() if e["ph"] == "C"]
    assert {c["name"] for c in counters} == {"host", "gpu0", "gpu1"}
    assert len([c for c in counters if c["name"] == "gpu0"]) == summary["samples"]
    series = json.loads(s.write_series(tmp_path / sampler_mod.TELEMETRY_FILE).read_text())
    assert len(series["gpus"][0]["utilization_percent"]) == len(series["t_s"]) == summary["samples"]


def test_nvml_failure_is_reported_not_raised(monkeypatch):
    fake = _FakeNvml()

    def broken():
        raise fake.NVMLError("Driver Not Loaded")

    fake.nvmlInit = broken
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary = _sample_for(0.05)
    assert summary["gpus"] == [] and summary["nvml"] == "unavailable: Driver Not Loaded"


@pytest.mark.gpu
def test_telemetry_real_nvml():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no NVML here: {e}")
    summary = _sample_for(0.3)
    assert summary["nvml"] == "ok" and summary["gpus"]
    g = summary["gpus"][0]
    assert g["memory_used_mib"]["max"] > 0 and 0 <= g["utilization_percent"]["max"] <= 100
