"""``mlharness coldstart``: the first answer of a process that must load its model, over several trials.

Each trial is a process of its own (:mod:`mlharness.measurement.coldstart_child`) that starts the interpreter,
imports the harness, loads the manifest (context, hooks, dataset size), imports the framework, loads the model,
pre-processes one sample and answers it; then it answers the same sample ``warm`` times more. The trial's
timeline is read on CLOCK_MONOTONIC, which every process of the host shares, from the moment this process
started it. The model file is downloaded (or generated) and checksum-verified once, before the trials: a trial
measures loading, not fetching.

Where the user may drop the page cache (``drop_caches``: root writes 3 to /proc/sys/vm/drop_caches before each
trial, after a sync), a trial is truly cold; otherwise the model file and the framework's libraries may be read
from memory, and the report says so. Each figure comes with its mean over the trials and a 95% bootstrap
interval of that mean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError
from mlharness.fileguard import read_json

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
# (figure, the child's mark that ends it): each step runs from the previous mark (the first from the process's
# start, as this process saw it)
STEPS = (("process_start", "entered"), ("harness_import", "harness"), ("manifest", "manifest"),
         ("framework_init", "framework"), ("model_load", "model"), ("sample", "sample"),
         ("first_inference", "first_answer"))
BOOTSTRAP_DRAWS = 4000
STDERR_TAIL = 2000  # characters of a failed trial's stderr shown in its error


@dataclass
class ColdStartConfig:
    manifest: str
    trials: int = 5
    warm: int = 20
    dataset_path: str | None = None
    count: int | None = None
    device: str = "cpu"
    threads: int | None = None
    drop_caches: bool = False
    drop_caches_path: Path = DROP_CACHES
    timeout_s: float = 600.0
    progress: Callable[[str], None] | None = None


def cold_start(cfg: ColdStartConfig) -> dict[str, Any]:
    """Run the trials; the figures as one JSON-ready dict (``trials``: each trial's steps and PID)."""
    from mlharness.manifest.loader import load_manifest
    from mlharness.run.factory import resolve_model_file, resolve_weights_file

    if cfg.trials < 1 or cfg.warm < 1:
        raise MLHarnessError(f"coldstart: --trials {cfg.trials} and --warm {cfg.warm} must be at least 1")
    if cfg.drop_caches and not os.access(cfg.drop_caches_path, os.W_OK):
        raise MLHarnessError(f"--drop-caches: {cfg.drop_caches_path} is not writable here (dropping the page cache "
                             "needs root); without the flag the trials run with the page cache as they find it")
    loaded = load_manifest(cfg.manifest)
    files = [str(p) if p else None for p in (resolve_model_file(loaded), resolve_weights_file(loaded))]
    say = cfg.progress or (lambda text: None)
    trials = []
    with tempfile.TemporaryDirectory(prefix="mlharness-coldstart-") as work:
        for i in range(cfg.trials):
            if cfg.drop_caches:
                os.sync()
                with open(cfg.drop_caches_path, "w") as f:  # a kernel control file: written, never read
                    f.write("3\n")
            say(f"trial {i + 1}/{cfg.trials}")
            out = Path(work) / f"trial-{i + 1}.json"
            spec = {"manifest": cfg.manifest, "files": files, "dataset_path": cfg.dataset_path, "count": cfg.count,
                    "device": cfg.device, "threads": cfg.threads, "warm": cfg.warm, "out": str(out)}
            trials.append(_trial(i + 1, spec, out, cfg.timeout_s))
    return summarise(trials, cfg)


def _trial(number: int, spec: dict[str, Any], out: Path, timeout_s: float) -> dict[str, Any]:
    argv = [sys.executable, "-m", "mlharness.measurement.coldstart_child", json.dumps(spec)]
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise MLHarnessError(f"cold-start trial {number} did not answer within {timeout_s:g} s") from None
    if proc.returncode != 0 or not out.is_file():
        tail = proc.stderr[-STDERR_TAIL:].rstrip()
        raise MLHarnessError(f"cold-start trial {number} ended with exit status {proc.returncode} and no "
                             f"timeline; the end of its stderr:\n{tail}")
    got = read_json(out, f"cold-start trial {number}'s timeline")
    marks, before, steps = got["marks"], started, {}
    for name, mark in STEPS:
        steps[name] = marks[mark] - before
        before = marks[mark]
    steps["total"] = marks["first_answer"] - started
    steps["warm_inference"] = float(np.median(got["warm_s"]))
    return {"trial": number, "pid": got["pid"], "steps": steps}


def mean_interval(values: list[float], seed: int = 0) -> dict[str, float | None]:
    """The mean and a 95% percentile-bootstrap interval of it (None for fewer than two values)."""
    a = np.asarray(values, dtype=float)
    low = high = None
    if a.size > 1:
        draws = np.random.default_rng(seed).choice(a, size=(BOOTSTRAP_DRAWS, a.size)).mean(axis=1)
        low, high = (float(x) for x in np.percentile(draws, [2.5, 97.5]))
    return {"mean": float(a.mean()), "ci95_low": low, "ci95_high": high, "min": float(a.min()),
            "max": float(a.max())}


def summarise(trials: list[dict[str, Any]], cfg: ColdStartConfig) -> dict[str, Any]:
    names = [name for name, _ in STEPS] + ["total", "warm_inference"]
    figures = {name: mean_interval([t["steps"][name] for t in trials]) for name in names}
    first, warm = figures["first_inference"]["mean"], figures["warm_inference"]["mean"]
    return {"manifest": cfg.manifest, "trials": trials, "warm_per_trial": cfg.warm, "figures": figures,
            "page_cache": "dropped before each trial" if cfg.drop_caches else "as found",
            "first_over_warm": first / warm if warm > 0 else None}


def format_figures(result: dict[str, Any]) -> Any:
    """A rich table: each step's mean, interval and range, in milliseconds."""
    from rich.table import Table

    table = Table(title=f"cold start of {result['manifest']}: {len(result['trials'])} trials, page cache "
                        f"{result['page_cache']}")
    for column in ("step", "mean ms", "95% interval ms", "min ms", "max ms"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for name, f in result["figures"].items():
        interval = "-" if f["ci95_low"] is None else f"{_ms(f['ci95_low'])} - {_ms(f['ci95_high'])}"
        table.add_row(name.replace("_", " "), _ms(f["mean"]), interval, _ms(f["min"]), _ms(f["max"]),
                      end_section=name == "first_inference")
    if result["first_over_warm"] is not None:
        table.caption = (f"the first inference took {result['first_over_warm']:.1f}x the warm one (median of "
                         f"{result['warm_per_trial']} more answers to the same sample in each trial)")
    if result["page_cache"] == "as found":
        table.caption = (table.caption or "") + ("; the page cache was not dropped: the model file and libraries "
                                                 "may have been read from memory (--drop-caches, as root)")
    return table


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.1f}" if ms >= 10 else f"{ms:.3f}"
