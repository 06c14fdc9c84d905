"""Host and GPU telemetry sampled in a background thread during a run.

Per sample: the process's CPU utilisation (100 = one core busy) and resident memory, the host's CPU
utilisation, and per GPU through NVML (``pynvml`` from nvidia-ml-py): utilisation, memory used, power, SM and
memory clocks, temperature; and the run's energy (:mod:`mlharness.telemetry.energy`: RAPL, NVML), with the
host's idle power measured before it. A machine without NVML or without GPUs is a normal case, reported as
``{"gpus": [], "nvml": "unavailable: <reason>"}``, never an error; a metric a GPU does not support is left
out.

The run's metadata gets min/mean/max per metric (:meth:`TelemetrySampler.summary`); the full series is
written beside it (:meth:`TelemetrySampler.write_series`) for the report's plots; with a tracer (trace level
``system`` or ``full``) every sample is also a Chrome counter event on the run's timeline.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from mlharness.telemetry.energy import EnergyMeter

log = logging.getLogger(__name__)

TELEMETRY_FILE = "mlharness_telemetry.json"
DEFAULT_INTERVAL_MS = 500
_MIB = 1024 * 1024


class _Host:
    """Process CPU time (os.times, portable), RSS and host CPU (psutil when installed, else /proc)."""

    def __init__(self) -> None:
        try:
            import psutil

            self._proc: Any = psutil.Process()
            self._psutil: Any = psutil
            psutil.cpu_percent(None)  # primes the host-wide counter
        except ImportError:
            self._proc = self._psutil = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._last_cpu = self._cpu_time()
        self._last_wall = time.perf_counter()
        self._last_stat = self._proc_stat()

    @staticmethod
    def _cpu_time() -> float:
        t = os.times()
        return t.user + t.system

    @staticmethod
    def _proc_stat() -> tuple[int, int] | None:
        """(busy, total) jiffies of all CPUs from /proc/stat."""
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def _rss_bytes(self) -> int | None:
        if self._proc is not None:
            return int(self._proc.memory_info().rss)
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def sample(self) -> dict[str, float]:
        cpu, wall = self._cpu_time(), time.perf_counter()
        values: dict[str, float] = {}
        if wall > self._last_wall:
            values["process_cpu_percent"] = 100.0 * (cpu - self._last_cpu) / (wall - self._last_wall)
        self._last_cpu, self._last_wall = cpu, wall
        rss = self._rss_bytes()
        if rss is not None:
            values["process_rss_mib"] = rss / _MIB
        stat = self._proc_stat()
        if stat is not None and self._last_stat is not None and stat[1] > self._last_stat[1]:
            busy, total = stat[0] - self._last_stat[0], stat[1] - self._last_stat[1]
            values["host_cpu_percent"] = 100.0 * busy / total
        elif stat is None and self._psutil is not None:
            values["host_cpu_percent"] = float(self._psutil.cpu_percent(None))
        self._last_stat = stat
        return values


class _Nvml:
    """NVML through pynvml; ``status`` says "ok" or why it is unavailable."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.handles: list[Any] = []
        self.gpus: list[dict[str, Any]] = []
        try:
            import pynvml
        except ImportError as e:
            self.status = f"unavailable: pynvml is not installed ({e})"
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.status = f"unavailable: {e or type(e).__name__}"
            return
        self.nvml = pynvml
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                self.handles.append(h)
                self.gpus.append({"index": i, "name": _text(self._try(pynvml.nvmlDeviceGetName, h)),
                                  "uuid": _text(self._try(pynvml.nvmlDeviceGetUUID, h))})
        except Exception as e:  # noqa: BLE001
            self.status = f"unavailable: {e or type(e).__name__}"
            self.close()
            return
        self.status = "ok"

    @staticmethod
    def _try(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported etc.: leave the metric out
            return None

    def sample(self) -> list[dict[str, float]]:
        n = self.nvml
        out = []
        for h in self.handles:
            v: dict[str, float] = {}
            util = self._try(n.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                v["utilization_percent"] = float(util.gpu)
                v["memory_utilization_percent"] = float(util.memory)
            mem = self._try(n.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                v["memory_used_mib"] = mem.used / _MIB
            power = self._try(n.nvmlDeviceGetPowerUsage, h)
            if power is not None:
                v["power_w"] = power / 1000.0
            for key, clock in (("sm_clock_mhz", "NVML_CLOCK_SM"), ("memory_clock_mhz", "NVML_CLOCK_MEM")):
                value = self._try(n.nvmlDeviceGetClockInfo, h, getattr(n, clock))
                if value is not None:
                    v[key] = float(value)
            temp = self._try(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
            if temp is not None:
                v["temperature_c"] = float(temp)
            out.append(v)
        return out

    def close(self) -> None:
        if self.nvml is not None:
            self._try(self.nvml.nvmlShutdown)
            self.nvml = None


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "mean": round(sum(values) / len(values), 3),
            "max": round(max(values), 3)}


class TelemetrySampler:
    """``start()`` before the run, ``stop()`` after; an interval of 0 (or less) disables sampling."""

    def __init__(self, interval_ms: float = DEFAULT_INTERVAL_MS, tracer: Any = None):
        self.interval_s = max(0.0, float(interval_ms)) / 1000.0
        self.tracer = tracer
        self.times: list[float] = []  # seconds since start
        self.host: list[dict[str, float]] = []
        self.gpu: list[list[dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._host: _Host | None = None
        self._nvml: _Nvml | None = None
        self._energy: EnergyMeter | None = None
        self.energy: dict[str, Any] | None = None
        self._t0 = 0.0
        self.nvml_status = "not sampled"

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def start(self) -> None:
        if not self.enabled:
            return
        self._host = _Host()
        self._nvml = _Nvml()
        self.nvml_status = self._nvml.status
        self._energy = EnergyMeter()
        self._energy.baseline()  # before the run: the host's idle power, the model loaded
        self._energy.start()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="mlharness-telemetry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception as e:  # noqa: BLE001 - telemetry must never disturb the run
                log.warning("telemetry sampling stopped: %s", e)
                return

    def _sample(self) -> None:
        assert self._host is not None and self._nvml is not None
        at_ns = time.perf_counter_ns()
        host = self._host.sample()
        gpus = self._nvml.sample()
        if self._energy is not None:
            self._energy.tick()
        self.times.append(at_ns / 1e9 - self._t0)
        self.host.append(host)
        self.gpu.append(gpus)
        if self.tracer is not None:
            self.tracer.counter("host", host, at_ns)
            for i, g in enumerate(gpus):
                self.tracer.counter(f"gpu{i}", g, at_ns)

    def stop(self) -> dict[str, Any]:
        """Stops sampling (taking a last sample, so even a short run has one) and returns the summary."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
            self._sample()
            assert self._nvml is not None and self._energy is not None
            self._nvml.close()
            self.energy = self._energy.stop()
        return self.summary()

    def summary(self) -> dict[str, Any]:
        if not self.enabled:
            return {"enabled": False}
        host: dict[str, Any] = {}
        for key in sorted({k for s in self.host for k in s}):
            values = [s[key] for s in self.host if key in s]
            host[key] = _stats(values)
        gpus = []
        for i, info in enumerate(self._nvml.gpus if self._nvml else []):
            entry: dict[str, Any] = dict(info)
            per = [s[i] for s in self.gpu if i < len(s)]
            for key in sorted({k for s in per for k in s}):
                entry[key] = _stats([s[key] for s in per if key in s])
            gpus.append(entry)
        return {"enabled": True, "interval_ms": self.interval_s * 1000.0, "samples": len(self.times),
                "duration_s": round(self.times[-1], 3) if self.times else 0.0, "host": host, "gpus": gpus,
                "nvml": self.nvml_status, "energy": self.energy}

    def write_series(self, path: Path) -> Path | None:
        """Every sample, for plots: ``{"t_s": [...], "host": {metric: [...]}, "gpus": [{metric: [...]}]}``."""
        if not self.enabled or not self.times:
            return None
        keys = sorted({k for s in self.host for k in s})
        n_gpu = len(self._nvml.gpus) if self._nvml else 0
        gpus = []
        for i in range(n_gpu):
            per = [s[i] if i < len(s) else {} for s in self.gpu]
            gkeys = sorted({k for s in per for k in s})
            gpus.append({**(self._nvml.gpus[i] if self._nvml else {}),
                         **{k: [s.get(k) for s in per] for k in gkeys}})
        doc = {"interval_ms": self.interval_s * 1000.0, "t_s": [round(t, 4) for t in self.times],
               "host": {k: [s.get(k) for s in self.host] for k in keys}, "gpus": gpus,
               "nvml": self.nvml_status}
        path.write_text(json.dumps(doc))
        return path
