"""What LoadGen wrote, read back: whether its logs were written in full, the summary's result and metric, and the
detail log's events. A write that failed is a :class:`ResultsWriteError` naming the file (exit status 3)."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError, RunFailed
from mlharness.fileguard import DATA_FILE_LIMIT, open_regular, read_bytes_bounded

LOG_LIMIT = DATA_FILE_LIMIT
"""Most bytes read of a LoadGen summary or detail log (a long run's detail log is a few MiB)."""

# a run played twice (mlharness.calibration.second_try) keeps its first play's LoadGen logs in this folder of its
# run folder: part of that run, never a run of its own to readers of results trees
FIRST_TRY_DIR = "first_try"
METRIC_LINES = {
    "SingleStream": ("90.0th percentile latency (ns)", "ns"),
    "MultiStream": ("99.0th percentile latency (ns)", "ns"),
    "Server": ("Completed samples per second", "samples/s"),
    "Offline": ("Samples per second", "samples/s"),
}


class ResultsWriteError(RunFailed):
    """Results could not be written (disk full, file too large, folder not writable): exit status 3."""

    def __init__(self, path: Path | str, error: OSError | str, what: str = "cannot write"):
        self.path = Path(path)
        self.reason = error if isinstance(error, str) else (error.strerror or str(error))
        self.what = what
        super().__init__(self._text())

    def _text(self) -> str:
        return (f"{self.what} {self.path}: {self.reason}{_free_space(self.path)}. The run produced no result; "
                f"earlier results are untouched")

    def moved(self, staging: Path, failed: Path) -> None:
        """The staging folder the path was in is now ``failed``: name the file where the user will find it."""
        if self.path.is_relative_to(staging):
            self.path = failed / self.path.relative_to(staging)
            self.message = self._text()


def _free_space(path: Path) -> str:
    for folder in (path, *path.parents):
        try:
            usage = shutil.disk_usage(folder)
        except OSError:
            continue
        return f"; {usage.free / 2**20:,.1f} MiB free on its file system"
    return ""


# how each of LoadGen's logs ends when it was written in full (LoadGen cannot report a failed write)
_LOG_ENDINGS = {
    "mlperf_log_summary.txt": ("encountered during test.", "See detailed log."),
    "mlperf_log_detail.txt": ("}",),
    "mlperf_log_accuracy.json": ("]",),
}


def check_loadgen_logs(outdir: Path) -> None:
    """LoadGen writes its logs from C++ and ignores write errors: a full disk or a file-size limit leaves them
    cut short. Raise :class:`ResultsWriteError` naming the first log that is missing or incomplete."""
    for name, endings in _LOG_ENDINGS.items():
        path = Path(outdir) / name
        if not os.path.lexists(path):
            if name == "mlperf_log_accuracy.json":
                continue
            raise ResultsWriteError(path, "it is missing (is the disk full?)", "LoadGen could not write")
        try:
            with open_regular(path, "LoadGen log", name_path=False,
                              error=lambda m, path=path: ResultsWriteError(path, m, "cannot read LoadGen's log")) as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - 256))
                tail = f.read().decode(errors="replace").rstrip()
        except OSError as e:
            raise ResultsWriteError(path, e, "cannot read LoadGen's log") from e
        if not tail.endswith(endings):
            raise ResultsWriteError(path, f"it ends after {size:,} bytes, cut short (is the disk full or the "
                                          f"file size limited?)", "LoadGen could not write in full")


@dataclass
class Summary:
    scenario: str
    valid: bool
    metric_name: str
    metric_value: float | None
    metric_unit: str
    fields: dict[str, str] = field(default_factory=dict)


# token-stream models: LoadGen's throughput lines count tokens (SingleStream keeps its latency percentile)
TOKEN_METRIC_LINES = {
    "Server": ("Completed tokens per second", "tokens/s"),
    "Offline": ("Tokens per second", "tokens/s"),
}


def parse_summary(path: Path, scenario: str, tokens: bool = False) -> Summary:
    if not path.is_file():
        raise MLHarnessError(f"LoadGen wrote no summary at {path}")
    fields: dict[str, str] = {}
    for line in read_bytes_bounded(path, "LoadGen summary", LOG_LIMIT).decode(errors="replace").splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            fields.setdefault(k.strip(), v.strip())
    lg_scenario = "Server" if scenario == "Interactive" else scenario
    # a token model whose round turns token latencies off (qwen3-vl-235b-a22b) has LoadGen count samples
    token_line = TOKEN_METRIC_LINES.get(lg_scenario) if tokens else None
    name, unit = token_line if token_line and token_line[0] in fields else METRIC_LINES[lg_scenario]
    raw = fields.get(name)
    value = float(raw) if raw not in (None, "") else None
    return Summary(scenario, fields.get("Result is") == "VALID", name, value, unit, fields)


_MLLOG = re.compile(r"^:::MLLOG (\{.*\})\s*$")


def read_detail(path: Path) -> list[dict[str, Any]]:
    """The ``:::MLLOG`` events of an mlperf_log_detail.txt."""
    events = []
    for line in read_bytes_bounded(path, "LoadGen detail log", LOG_LIMIT).decode(errors="replace").splitlines():
        m = _MLLOG.match(line)
        if m:
            try:
                events.append(json.loads(m.group(1)))
            except json.JSONDecodeError:
                continue
    return events


def detail_values(path: Path) -> dict[str, Any]:
    """key → value of the detail log's events (the last event wins; errors collected under 'errors')."""
    values: dict[str, Any] = {}
    errors = []
    for ev in read_detail(path):
        key = ev.get("key")
        if key is None:
            continue
        if key.startswith("error") or ev.get("metadata", {}).get("is_error"):
            errors.append({"key": key, "value": ev.get("value")})
        values[key] = ev.get("value")
    values["errors"] = errors
    return values
