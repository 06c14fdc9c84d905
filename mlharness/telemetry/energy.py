"""Energy counters read beside a run: RAPL on CPUs (``/sys/class/powercap``, the package and DRAM domains) and
NVML on NVIDIA GPUs (``nvmlDeviceGetTotalEnergyConsumption``, Volta and later).

Both are cumulative counters: the run's energy is the sum of the increases seen between reads, a RAPL counter that
wrapped past ``max_energy_range_uj`` adding its range (the telemetry sampler reads them every interval, far more
often than a package counter wraps). An idle baseline (the same counters over a short wait before the run, the
model loaded) gives the power the host draws doing nothing, shown beside the run's. Where no counter can be read
(no RAPL in a virtual machine, energy_uj readable by root only since Linux 5.10, no NVML) the summary says why, and
holds no figure: never a zero that was not measured.

The summary keeps each domain's joules apart (``domains``) so that a power submission's per-domain files could be
written from it; ``joules`` sums the package and DRAM domains and the GPUs (the core, uncore and psys domains are
parts or supersets of those and are listed only)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.fileguard import UnusableFile, read_text_bounded

POWERCAP_ENV = "MLHARNESS_POWERCAP_ROOT"  # where the RAPL zones are read; /sys/class/powercap when unset
POWERCAP = Path("/sys/class/powercap")
IDLE_BASELINE_S = 1.0
ZONE = re.compile(r"intel-rapl:\d+(:\d+)?")  # the MSR interface; intel-rapl-mmio repeats a package's counter
IN_TOTAL = {"package", "dram", "gpu"}


@dataclass
class Counter:
    name: str  # "package-0", "dram (package-0)", "gpu0"
    domain: str  # package, dram, core, uncore, psys, gpu
    read: Callable[[], float]  # joules since some origin
    wrap_j: float | None = None


def _sysfs_number(path: Path) -> float:
    return float(read_text_bounded(path, "RAPL counter", 64).strip())


def rapl_counters(root: Path) -> tuple[list[Counter], str | None]:
    """The RAPL zones under ``root``, or why there are none that can be read."""
    zones = sorted(p for p in root.glob("intel-rapl:*") if ZONE.fullmatch(p.name)) if root.is_dir() else []
    if not zones:
        return [], f"no RAPL zone in {root}"
    names = {}
    for z in zones:
        try:
            names[z.name] = read_text_bounded(z / "name", "RAPL zone name", 256).strip()
        except UnusableFile:
            names[z.name] = z.name
    counters, why = [], None
    for z in zones:
        name = names[z.name]
        parent = names.get(z.name.rsplit(":", 1)[0]) if z.name.count(":") == 2 else None
        domain = re.sub(r"-\d+$", "", name)
        try:
            _sysfs_number(z / "energy_uj")
        except (UnusableFile, ValueError) as e:
            why = why or f"{z / 'energy_uj'} cannot be read ({e}); RAPL counters are readable by root only"
            continue
        try:
            wrap = _sysfs_number(z / "max_energy_range_uj") / 1e6
        except (UnusableFile, ValueError):
            wrap = None
        counters.append(Counter(f"{name} ({parent})" if parent else name, domain,
                                lambda f=z / "energy_uj": _sysfs_number(f) / 1e6, wrap))
    return counters, (why if not counters else None)


def nvml_counters() -> tuple[list[Counter], str | None, Callable[[], None]]:
    """The GPUs' energy counters, or why there are none; and the call that releases NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return [], f"NVML unavailable ({e or type(e).__name__})", lambda: None

    def close() -> None:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - already shut down
            pass

    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as e:  # noqa: BLE001
        close()
        return [], f"NVML unavailable ({e or type(e).__name__})", lambda: None
    counters = []
    for i, h in enumerate(handles):
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        except Exception:  # noqa: BLE001 - NotSupported before Volta
            continue
        counters.append(Counter(f"gpu{i}", "gpu", lambda h=h: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3))
    if not counters:
        close()
        return [], "no GPU reports its energy through NVML", lambda: None
    return counters, None, close


class EnergyMeter:
    """``start()`` (after ``baseline()``), ``tick()`` now and then, ``stop()`` for the summary."""

    def __init__(self, root: Path | None = None, nvml: bool = True):
        root = root or Path(os.environ.get(POWERCAP_ENV) or POWERCAP)
        rapl, rapl_why = rapl_counters(root)
        gpus, gpu_why, self._close = nvml_counters() if nvml else ([], "NVML not asked", lambda: None)
        self.counters = rapl + gpus
        self.why = "; ".join(w for w in (rapl_why, gpu_why) if w) or None
        self.joules = [0.0] * len(self.counters)
        self.last: list[float | None] = [None] * len(self.counters)
        self.idle_watts: float | None = None
        self.idle_s = 0.0
        self._t0 = self._t1 = 0.0

    @property
    def available(self) -> bool:
        return bool(self.counters)

    def _read_all(self) -> None:
        for i, c in enumerate(self.counters):
            try:
                now = c.read()
            except (UnusableFile, ValueError, OSError):
                continue  # a read that failed (or caught the file mid-write) waits for the next tick
            before = self.last[i]
            if before is not None:
                delta = now - before
                if delta < 0 and c.wrap_j:
                    delta += c.wrap_j
                self.joules[i] += max(delta, 0.0)
            self.last[i] = now

    def baseline(self, seconds: float = IDLE_BASELINE_S) -> None:
        """The host's power doing nothing: the counters over ``seconds`` of waiting."""
        if not self.available or seconds <= 0:
            return
        self._read_all()
        t0 = time.perf_counter()
        time.sleep(seconds)
        self._read_all()
        self.idle_s = time.perf_counter() - t0
        self.idle_watts = sum(self._total(self.joules)) / self.idle_s
        self.joules = [0.0] * len(self.counters)

    def start(self) -> None:
        self._read_all()
        self._t0 = time.perf_counter()

    def tick(self) -> None:
        self._read_all()

    def stop(self) -> dict[str, Any]:
        if not self.available:
            return {"available": False, "why": self.why}
        self._read_all()
        self._t1 = time.perf_counter()
        self._close()
        return self.summary()

    def _total(self, joules: list[float]) -> list[float]:
        return [j for c, j in zip(self.counters, joules, strict=True) if c.domain in IN_TOTAL]

    def summary(self) -> dict[str, Any]:
        seconds = max(self._t1 - self._t0, 1e-9)
        joules = sum(self._total(self.joules))
        out: dict[str, Any] = {
            "available": True, "seconds": round(seconds, 4), "joules": round(joules, 4),
            "watts": round(joules / seconds, 3),
            "domains": [{"name": c.name, "domain": c.domain, "joules": round(j, 4), "in_total": c.domain in IN_TOTAL}
                        for c, j in zip(self.counters, self.joules, strict=True)],
            "idle_watts": None if self.idle_watts is None else round(self.idle_watts, 3),
            "idle_seconds": round(self.idle_s, 3),
        }
        if self.idle_watts is not None:
            out["joules_above_idle"] = round(joules - self.idle_watts * seconds, 4)
        if self.why:
            out["not_read"] = self.why  # e.g. RAPL read, no NVML
        return out


def per_sample(energy: dict[str, Any] | None, samples: int | None) -> dict[str, Any] | None:
    """The energy summary with ``joules_per_sample`` added (the run's completed samples)."""
    if not energy or not energy.get("available") or not samples:
        return energy
    return {**energy, "joules_per_sample": energy["joules"] / samples}


def energy_line(e: dict[str, Any] | None) -> str | None:
    """The run's energy in one line: joules, mean watts beside the idle baseline, joules per sample; or why it
    was not measured."""
    if not e:
        return None
    if not e.get("available"):
        return f"energy: not measured ({e.get('why') or 'no counter'})"
    text = f"energy: {e['joules']:,.1f} J over {e['seconds']:,.1f} s, {e['watts']:,.1f} W mean"
    if e.get("idle_watts") is not None:
        text += f" (idle {e['idle_watts']:,.1f} W)"
    if e.get("joules_per_sample") is not None:
        text += f", {e['joules_per_sample']:.4g} J per sample"
    return text
