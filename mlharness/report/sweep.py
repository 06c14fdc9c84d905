"""A load sweep (``sweep.json``, written by ``mlharness sweep``) as the report shows it: one row per point and
the curves of :mod:`mlharness.report.plots_sweep`. The report needs only the JSON: the run folders it names are
reported as runs when they exist, and their absence is no error."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.report import units
from mlharness.report.treefiles import (
    ANY,
    NUMBER,
    STRING,
    Each,
    Need,
    TreeFileError,
    check_shape,
    present,
    read_json,
    shown,
)

SWEEP_FILE = "sweep.json"
AXES = {"target_qps": "offered load (target queries/s)", "concurrency": "concurrency (requests in flight)",
        "session_rate": "offered load (sessions started/s)", "session_concurrency": "concurrency (sessions in flight)"}
SESSION_AXES = ("session_rate", "session_concurrency")  # a sweep of session replays (measurement/replay_sweep.py)
LATENCY_KEYS = ("p50", "p90", "p95", "p99", "p99.9")
COLUMNS = ("point", "offered", "repeat", "result", "throughput", "p50 (ms)", "p99 (ms)", "TTFT p99 (ms)",
           "TPOT p99 (ms)", "tokens/s", "tokens/s/user", "goodput (samples/s)", "why INVALID", "run")
SESSION_COLUMNS = ("point", "offered", "result", "sessions/s", "turns/s", "session p50 (ms)", "session p90 (ms)",
                   "session p99 (ms)", "TTFT p90 (ms)", "TPOT p90 (ms)", "goodput (sessions/s)", "good sessions",
                   "why INVALID", "run")


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
    def sessions(self) -> bool:
        """A sweep of session replays: its throughput counts sessions, its latency a session's end to end."""
        return self.axis in SESSION_AXES

    @property
    def has_tokens(self) -> bool:
        return any(p.get("tokens_per_s") is not None and p.get("tokens_per_s_per_user") is not None
                   for p in self.points)

    def is_knee(self, p: dict[str, Any]) -> bool:
        return self.knee is not None and p.get("value") == self.knee["value"]


def _bad(path: Path, what: str) -> MLHarnessError:
    return TreeFileError(f"{shown(path)}: not a sweep written by `mlharness sweep`: {what}")


_PCTS = Each(NUMBER)
POINT_SHAPE = {"label": ANY, "value": NUMBER, "throughput": NUMBER, "latency_ms": _PCTS, "ttft_ms": _PCTS,
               "tpot_ms": _PCTS, "tokens_per_s": NUMBER, "tokens_per_s_per_user": NUMBER, "goodput": NUMBER,
               "goodput_fraction": NUMBER, "invalid_reasons": [ANY]}
SHAPE = {"axis": Need(STRING), "points": Need([Need(POINT_SHAPE)]), "slo": Each(NUMBER),
         "knee": {"value": NUMBER}, "max_valid": NUMBER}
"""What the report reads of sweep.json: a field of another type is refused, naming it."""


def load_sweep(path: Path, shape: Any = None) -> Sweep:
    """Read and check ``path`` (against :data:`SHAPE`, or ``shape`` for a reader that needs more); an error names
    the file and the field that is wrong."""
    data = read_json(path, "the sweep")
    if data.get("kind") != "mlharness-sweep":
        raise _bad(path, "'kind' is not \"mlharness-sweep\"")
    if data.get("version") != 1:
        raise _bad(path, f"'version' is {repr(data.get('version'))[:40]}; this report reads version 1")
    check_shape(data, SHAPE if shape is None else shape, path, "the sweep")
    return Sweep(Path(path), data)


def find_sweep(path: Path) -> Sweep | None:
    """The sweep of a report's path: the path itself when it is a sweep.json, or the sweep.json in it."""
    path = Path(path)
    if path.is_dir():
        return load_sweep(path / SWEEP_FILE) if present(path / SWEEP_FILE, "the sweep") else None
    if os.path.lexists(path) and present(path, "the report's path") and path.suffix == ".json":
        return load_sweep(path)
    return None


def _pct(d: dict[str, Any] | None, key: str) -> str:
    v = (d or {}).get(key)
    return units.number(v, 3) if isinstance(v, int | float) else ""


def _result(s: Sweep, p: dict[str, Any]) -> str:
    text = ("VALID (early stopping waived)" if p.get("waived") else "VALID") if p.get("valid") else "INVALID"
    return f"{text} (knee)" if s.is_knee(p) else text


def columns(s: Sweep) -> tuple[str, ...]:
    return SESSION_COLUMNS if s.sessions else COLUMNS


def session_rows(s: Sweep) -> list[list[str]]:
    out = []
    for p in s.points:
        frac, good = p.get("goodput_fraction"), p.get("good_sessions")
        lat = p.get("latency_ms")
        out.append([str(p.get("label") or ""), units.number(p.get("value")), _result(s, p),
                    units.number(p.get("sessions_per_s")), units.number(p.get("turns_per_s")),
                    _pct(lat, "p50"), _pct(lat, "p90"), _pct(lat, "p99"), _pct(p.get("ttft_ms"), "p90"),
                    _pct(p.get("tpot_ms"), "p90"), units.number(p.get("goodput")) if isinstance(p.get("goodput"),
                                                                                               int | float) else "",
                    f"{good}/{p.get('sessions')} ({100 * frac:.0f}%)" if isinstance(frac, int | float) else "",
                    "; ".join(str(x) for x in p.get("invalid_reasons") or []), str(p.get("dir") or "")])
    return out


def rows(s: Sweep) -> list[list[str]]:
    if s.sessions:
        return session_rows(s)
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

