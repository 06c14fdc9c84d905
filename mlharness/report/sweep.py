"""A load sweep (``sweep.json``, written by ``mlharness sweep``) as the report shows it: one row per point and
the curves of :mod:`mlharness.report.plots_sweep`. The report needs only the JSON: the run folders it names are
reported as runs when they exist, and their absence is no error."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report import units

SWEEP_FILE = "sweep.json"
AXES = {"target_qps": "offered load (target queries/s)", "concurrency": "concurrency (requests in flight)"}
LATENCY_KEYS = ("p50", "p90", "p95", "p99", "p99.9")
COLUMNS = ("point", "offered", "repeat", "result", "throughput", "p50 (ms)", "p99 (ms)", "TTFT p99 (ms)",
           "TPOT p99 (ms)", "tokens/s", "tokens/s/user", "goodput (samples/s)", "why INVALID", "run")


@dataclass
class Sweep:
    path: Path
    data: dict[str, Any]

    @property
    def axis(self) -> str:
        return str(self.data["axis"])

    @property
    def axis_label(self) -> str:
        return AXES.get(self.axis, self.axis)

    @property
    def points(self) -> list[dict[str, Any]]:
        return list(self.data["points"])

    @property
    def knee(self) -> dict[str, Any] | None:
        k = self.data.get("knee")
        return k if isinstance(k, dict) and k.get("value") is not None else None

    @property
    def has_tokens(self) -> bool:
        return any(p.get("tokens_per_s") is not None and p.get("tokens_per_s_per_user") is not None
                   for p in self.points)

    def is_knee(self, p: dict[str, Any]) -> bool:
        return self.knee is not None and p.get("value") == self.knee["value"]


def _bad(path: Path, what: str) -> MLHarnessError:
    return MLHarnessError(f"{path}: not a sweep written by `mlharness sweep`: {what}")


def load_sweep(path: Path) -> Sweep:
    """Read and check ``path``; an error names the file and the field that is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise MLHarnessError(f"{path}: cannot read the sweep: {e}") from e
    if not isinstance(data, dict) or data.get("kind") != "mlharness-sweep":
        raise _bad(path, "'kind' is not \"mlharness-sweep\"")
    if data.get("version") != 1:
        raise _bad(path, f"'version' is {data.get('version')!r}; this report reads version 1")
    if not isinstance(data.get("points"), list):
        raise _bad(path, "'points' is not a list")
    for i, p in enumerate(data["points"]):
        if not isinstance(p, dict):
            raise _bad(path, f"points[{i}] is not an object")
        for key in ("value", "throughput"):
            if p.get(key) is not None and not isinstance(p[key], int | float):
                raise _bad(path, f"points[{i}].{key} is {p[key]!r}, not a number")
        lat = p.get("latency_ms")
        if lat is not None and not isinstance(lat, dict):
            raise _bad(path, f"points[{i}].latency_ms is not an object of percentiles")
    if not isinstance(data.get("axis"), str):
        raise _bad(path, "'axis' is missing (target_qps or concurrency)")
    return Sweep(Path(path), data)


def find_sweep(path: Path) -> Sweep | None:
    """The sweep of a report's path: the path itself when it is a sweep.json, or the sweep.json in it."""
    path = Path(path)
    if path.is_file():
        if path.suffix == ".json":
            return load_sweep(path)
        return None
    return load_sweep(path / SWEEP_FILE) if (path / SWEEP_FILE).is_file() else None


def _pct(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return units.number(v, 3) if isinstance(v, int | float) else ""


def _result(s: Sweep, p: dict[str, Any]) -> str:
    text = "VALID" if p.get("valid") else "INVALID"
    return f"{text} (knee)" if s.is_knee(p) else text


def rows(s: Sweep) -> list[list[str]]:
    out = []
    for p in s.points:
        goodput = p.get("goodput")
        frac = p.get("goodput_fraction")
        good = units.number(goodput) + (f" ({100 * frac:.0f}%)" if isinstance(frac, int | float) else "") \
            if isinstance(goodput, int | float) else ""
        out.append([str(p.get("label") or ""), units.number(p.get("value")), str(p.get("repeat") or ""),
                    _result(s, p), units.with_unit(units.number(p.get("throughput")), "samples/s"),
                    _pct(p.get("latency_ms"), "p50"), _pct(p.get("latency_ms"), "p99"),
                    _pct(p.get("ttft_ms"), "p99"), _pct(p.get("tpot_ms"), "p99"),
                    units.number(p.get("tokens_per_s")), units.number(p.get("tokens_per_s_per_user")), good,
                    "; ".join(str(x) for x in p.get("invalid_reasons") or []), str(p.get("dir") or "")])
    return out


def facts(s: Sweep) -> list[str]:
    d = s.data
    out = [f"manifest {d.get('manifest', '?')}, {d.get('scenario', '?')}, swept over {s.axis_label}: "
           f"{len(s.points)} points"]
    slo = d.get("slo") or {}
    if slo:
        out.append("SLO: " + ", ".join(f"{k} ≤ {units.number(float(v) * 1000, 1)} ms" for k, v in slo.items()
                                       if isinstance(v, int | float)))
    if s.knee is not None:
        out.append(f"knee at {units.number(s.knee['value'])}: {s.knee.get('reason') or ''}".rstrip(": "))
    if d.get("max_valid") is not None:
        out.append(f"highest VALID offered load: {units.number(d['max_valid'])}")
    return out

