"""One run folder as the evaluation database stores it: the columns of its ``runs`` row and the numbers of its
``metrics`` rows, read with the report's readers (:func:`mlharness.report.collect.read_run`), never written to.

Where a run lies says what it is part of: a submission tree (``<system>/<benchmark>/<scenario>/...`` beside a
``.mlharness/`` archive whose ``runs/`` records hold each test's ``mlharness_run.json``), a sweep (a ``sweep.json``
above it), a campaign job (a ``campaign.json`` above it, or an executor ran it: its metadata has an
``"executor"`` entry) or a plain run.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from mlharness.report.collect import RUN_SHAPE, SUMMARY, Run, first_play, read_run, round_verdict
from mlharness.report.sweep import SWEEP_FILE
from mlharness.report.treefiles import present, read_json, read_text

ARCHIVE = ".mlharness"  # a submission tree's archive (mlharness.submission.layout.ARCHIVE)
SUBMISSION_STATE = "submission.json"
SESSIONS_SUMMARY = "sessions_summary.json"
CAMPAIGN_RECORD = "campaign.json"  # mlharness campaign run's record at its results root (cluster/campaign.py)
SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline", "Interactive")
_TEST = re.compile(r"^TEST\d\d$")
_MLLOG_TIME = re.compile(rb'^:::MLLOG \{.*"time_ms":\s*([0-9.]+)', re.MULTILINE)
_TEST_DATETIME = re.compile(rb'"key":\s*"test_datetime",\s*"value":\s*"([^"]+)"')
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")


@dataclass
class Found:
    """A run folder found under a results root, before it is read."""

    summary: Path  # its mlperf_log_summary.txt
    rel: str  # the folder relative to the root, '/'-separated
    record: Path | None  # a submission tree's record folder holding its mlharness_run.json
    kind: str
    signature: str = ""


@dataclass
class Indexed:
    row: dict[str, Any]
    metrics: dict[str, float] = field(default_factory=dict)


def walk(root: Path) -> list[Found]:
    """Every run folder under ``root``: a folder holding LoadGen's summary, outside hidden folders (a submission
    tree's archive, staging folders) and failed runs' ``.failed-*`` folders, as the report finds them."""
    root = Path(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and ".failed-" not in d)
        if SUMMARY in filenames and not first_play(Path(dirpath)):
            d = Path(dirpath)
            rel = d.relative_to(root).as_posix() if d != root else "."
            record, kind = _where(root, d)
            found.append(Found(d / SUMMARY, rel, record, kind))
    for f in found:
        f.signature = signature(f)
    return found


def _where(root: Path, d: Path) -> tuple[Path | None, str]:
    """The run's record folder (a submission tree's) and what the run is part of."""
    parts = d.relative_to(root).parts if d != root else ()
    for i in range(len(parts) - 1, -1, -1):  # the nearest submission tree above it, the root included
        tree = root.joinpath(*parts[:i])
        if (tree / ARCHIVE / SUBMISSION_STATE).is_file() and len(parts) - i >= 4:
            system, bench, scen, step = parts[i:i + 4]
            return tree / ARCHIVE / "runs" / system / bench / scen / step, "submission"
    for i in range(len(parts) - 1, -1, -1):
        if (root.joinpath(*parts[:i]) / SWEEP_FILE).is_file():
            return None, "sweep_point"
        if (root.joinpath(*parts[:i]) / CAMPAIGN_RECORD).is_file():
            return None, "campaign_job"
    return None, "run"


def signature(f: Found) -> str:
    """The names, sizes and modification times of the run's files (and of its record's metadata): a folder
    whose signature is unchanged is not read again."""
    h = hashlib.sha256()
    folders = [f.summary.parent] + ([f.record] if f.record is not None else [])
    for folder in folders:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                h.update(f"{folder.name}/{e.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _times(detail: Path) -> tuple[datetime | None, datetime | None]:
    """When LoadGen's test started (its ``test_datetime``, UTC) and ended (plus its last event's ``time_ms``,
    which counts from the test's start), from mlperf_log_detail.txt."""
    if not present(detail, "LoadGen's detail log"):
        return None, None
    text = read_text(detail, "LoadGen's detail log").encode()
    m = _TEST_DATETIME.search(text)
    if m is None:
        return None, None
    try:
        start = datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
    except ValueError:
        return None, None
    start = start.astimezone(timezone.utc).replace(tzinfo=None) if start.tzinfo else start
    last = max((float(x.group(1)) for x in _MLLOG_TIME.finditer(text)), default=0.0)
    return start, start + timedelta(milliseconds=last)


def _system(run: Run, rel: str) -> str | None:
    """The system a run was made for: its metadata's, else the folder two above its scenario's
    (``<system>/<benchmark>/<scenario>/``, the layout of ``mlharness run``'s default output and of submissions)."""
    meta = run.meta or {}
    if isinstance(meta.get("system"), str) and meta["system"]:
        return meta["system"]
    parts = rel.split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in SCENARIOS and i >= 2 and (run.scenario is None or parts[i] == run.scenario):
            return parts[i - 2]
    return None


def _str(value: Any, limit: int) -> str | None:
    return str(value)[:limit] if value not in (None, "") else None


def _flatten(prefix: str, value: Any, out: dict[str, float]) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)


def metrics_of(run: Run, folder: Path) -> dict[str, float]:
    """Every number of LoadGen's summary (its line's name, verbatim), the accuracy figure, the run's energy
    (``energy.<key>``, where it was measured) and a session run's figures (``sessions.<key>``: lists such as the
    per-turn table left out)."""
    out = {k: float(v) for k, v in run.fields.items() if _NUMBER.match(v.strip())}
    if run.accuracy_value is not None:
        out["accuracy"] = run.accuracy_value
    energy = ((run.meta or {}).get("telemetry") or {}).get("energy")
    if isinstance(energy, dict) and energy.get("available") is True:  # measured: joules, watts, per sample
        _flatten("energy", energy, out)
    if present(folder / SESSIONS_SUMMARY, "the session figures"):
        doc = read_json(folder / SESSIONS_SUMMARY, "the session figures")
        if isinstance(doc, dict):
            _flatten("sessions", doc, out)
    return out


def read_found(root: Path, f: Found) -> Indexed:
    run = read_run(f.summary, root)
    if run.meta is None and f.record is not None and present(f.record / "mlharness_run.json", "the run's metadata"):
        run.meta = read_json(f.record / "mlharness_run.json", "the run's metadata", shape=RUN_SHAPE)
        round_verdict(run)  # its record holds the round's verdict
    meta = run.meta or {}
    executor = meta.get("executor") if isinstance(meta.get("executor"), dict) else {}
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    framework = meta.get("framework") if isinstance(meta.get("framework"), dict) else {}
    manifest = meta.get("manifest") if isinstance(meta.get("manifest"), dict) else {}
    kind = f.kind
    if kind == "run" and executor:
        kind = "campaign_job"
    started, finished = _times(f.summary.parent / "mlperf_log_detail.txt")
    validity = run.result if run.mode == "performance" and run.result in ("VALID", "INVALID") else "n.a."
    if run.mode == "performance" and validity == "n.a.":
        validity = "INVALID"  # a performance run without LoadGen's verdict line is no valid result
    test = next((p for p in f.rel.split("/") if _TEST.match(p)), None)
    row = {
        "folder": f.rel, "kind": kind, "signature": f.signature,
        "benchmark": _str(run.benchmark if run.benchmark != "." else None, 128),
        "mlperf_model": _str(meta.get("conf_model"), 128), "manifest": _str(manifest.get("name"), 256),
        "scenario": _str(run.scenario, 32), "mode": _str(run.mode, 32), "compliance_test": test,
        "system": _str(_system(run, f.rel), 256),
        "node_id": _str(executor.get("node_id"), 128),
        "host": _str(executor.get("node_address") or executor.get("address") or host.get("hostname"), 256),
        "executor": _str(executor.get("backend") or executor.get("name"), 32),
        "framework": _str(framework.get("name"), 64), "framework_version": _str(framework.get("version"), 64),
        "round": _str(meta.get("round"), 16), "loadgen_version": _str(meta.get("loadgen_version"), 32),
        "mlharness_version": _str(meta.get("mlharness_version"), 32),
        "git_commit": _str(meta.get("git_commit") or meta.get("mlharness_commit"), 64),
        "git_dirty": meta.get("git_dirty") if isinstance(meta.get("git_dirty"), bool) else None,
        "label": _str(meta.get("label"), 256),
        "validity": validity, "waived": _str(run.waived, 1000) if validity == "VALID" else None,
        "submittable": meta.get("submittable") if isinstance(meta.get("submittable"), bool) else None,
        "metric_name": _str(run.metric_name, 128), "metric_value": run.metric_value,
        "metric_unit": _str(run.metric_unit, 32), "accuracy_name": _str(run.accuracy_name, 128),
        "accuracy_value": run.accuracy_value, "accuracy_text": run.accuracy_text,
        "started_at": started, "finished_at": finished,
    }
    return Indexed(row, metrics_of(run, f.summary.parent))
