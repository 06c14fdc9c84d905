"""``mlharness sweep``: the operating curve of a model, one real LoadGen performance run per point.

Two axes:

- ``target_qps`` (Server, Interactive): each point is a run at one target QPS;
- ``concurrency`` (generative models): each point is a Server (or Interactive) run whose queries all arrive at
  once (a target QPS of :data:`CONCURRENCY_QPS`, ``--queries`` of them) while the generative predictor holds at
  most C requests in flight: the batch size of an in-process engine (``max_batchsize``: the transformers and
  vLLM predictors never run more requests together). TTFT therefore counts a request's wait for a free slot,
  as LoadGen measures it from the query's arrival.

Every point is a run folder ``DIR/points/<label>`` (``qps-000010.000-r1``, ``conc-0008-r2``) with LoadGen's
logs and trace; ``DIR/sweep.json`` is rewritten (atomically) after each point and is what the report reads.
Goodput counts, over the run's per-sample latencies (:mod:`.goodput`), the samples that meet every SLO.
A point of fewer queries than the rules' minimum for its scenario (on the rate axis, the queries LoadGen's early
stopping needs to accept a 99th percentile: :data:`MIN_POINT_QUERIES`) is recorded as not meaningful
(``meaningful: false``) and is never named as the knee or the highest VALID value; by default each rate point
asks LoadGen for that many queries. Without a range (``--min-qps``/``--max-qps``) the adaptive plan starts from
the rate the first run calibrates (or its user.conf states), doubles from there, and halves when that rate already
broke its latency constraint, within :data:`AUTO_SPAN` times either way.
A sweep that was interrupted leaves ``sweep.json`` with its finished points; ``resume`` with the same options
measures only what is missing (a point folder that is not in ``sweep.json`` is kept as ``.failed-<time>``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.calibration.calibrate import EARLY_STOPPING_QUERIES
from mlharness.errors import MLHarnessError
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.logs import Summary
from mlharness.measurement import goodput as gp
from mlharness.measurement import sweep_plan as sp
from mlharness.report.sweep import POINT_SHAPE, SHAPE, load_sweep
from mlharness.report.treefiles import Need, TreeFileError, present, shown

SWEEP_FILE = "sweep.json"
TOKEN_LOG_CONF = "token-counts.audit.config"
LOG_EVERY_SAMPLE = 1_000_000_000  # an accuracy-log sampling target (its largest) above any sweep run's queries
KIND, VERSION = "mlharness-sweep", 1
CONCURRENCY_QPS = 100000.0  # the concurrency axis: every query arrives at once, the in-flight cap paces them
PCT_KEYS = {"p50": "50.00", "p90": "90.00", "p95": "95.00", "p99": "99.00", "p99.9": "99.90"}
SUMMARY_LINES = {
    "latency_ms": "{} percentile latency (ns)",
    "ttft_ms": "{} percentile first token latency (ns)",
    "tpot_ms": "{} percentile time to output token (ns)",
}
# what a resumed sweep reads of its sweep.json besides what the report reads: each point's value, repeat and
# verdict decide what is left to measure
RESUME_SHAPE = {**SHAPE, "options": {}, "points": Need([Need({**POINT_SHAPE, "value": Need(POINT_SHAPE["value"]),
                                                                 "repeat": Need((int,)), "valid": Need((bool,))})])}
MIN_POINT_QUERIES = EARLY_STOPPING_QUERIES  # Server and Interactive: fewer queries cannot show a p99
AUTO_SPAN = 64.0  # a sweep that finds its own range looks this far above and below the calibrated rate
CALIBRATING = "calibrating"  # the first point's folder while its run calibrates the rate it is named by
THROUGHPUT_LINES = ("Completed samples per second", "Samples per second")
TOKENS_LINES = ("Completed tokens per second", "Tokens per second")


@dataclass
class SweepConfig:
    manifest: str
    scenario: str
    output: Path
    axis: str | None = None  # target_qps or concurrency; None: concurrency for a generative model, else target_qps
    qps: list[float] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)
    plan: str | None = None  # None: the values given, else adaptive
    min_value: float | None = None
    max_value: float | None = None
    points: int = 6
    slo: dict[str, float] = field(default_factory=dict)
    repeats: int = 1
    seconds: float = 1.0  # each run's min_duration
    min_query_count: int | None = None  # the rate axis: each run's (default: MIN_POINT_QUERIES)
    queries: int | None = None  # the concurrency axis: queries per run (default: 4 per request in flight, >= 16)
    dataset_path: str | None = None
    count: int | None = None
    resume: bool = False
    progress: Callable[[str], None] | None = None
    on_point: Callable[[dict[str, Any]], None] | None = None
    run: dict[str, Any] = field(default_factory=dict)  # more RunOptions of every run (framework, endpoints, ...)
    sizing: dict[str, Any] = field(default_factory=dict)  # more Overrides of every run (max_query_count, ...)
    progress_bar: Callable[[], Any] | None = None  # a fresh RunProgress for each run


def summary_figures(summary: Summary) -> dict[str, Any]:
    """The figures of one point as LoadGen's summary states them."""
    f = summary.fields

    def num(key: str) -> float | None:
        raw = f.get(key)
        try:
            return float(raw) if raw not in (None, "") else None
        except ValueError:
            return None

    out: dict[str, Any] = {"throughput": next((num(k) for k in THROUGHPUT_LINES if num(k) is not None), None),
                           "tokens_per_s": next((num(k) for k in TOKENS_LINES if num(k) is not None), None)}
    for key, line in SUMMARY_LINES.items():
        values = {name: num(line.format(pct)) for name, pct in PCT_KEYS.items()}
        out[key] = None if all(v is None for v in values.values()) else {
            k: (None if v is None else v / 1e6) for k, v in values.items()}
    tpot50 = (out["tpot_ms"] or {}).get("p50")
    out["tokens_per_s_per_user"] = 1000.0 / tpot50 if tpot50 else None
    reasons = [f"{k}: NO" for k, v in f.items() if v.strip().upper() == "NO"]
    out["invalid_reasons"] = [] if summary.valid else (reasons or ["LoadGen: INVALID"])
    out["constraints_met"] = f.get("Performance constraints satisfied", "Yes").strip().upper() != "NO"
    return out


class Sweep:
    def __init__(self, cfg: SweepConfig):
        from mlharness.manifest.loader import load_manifest

        self.cfg = cfg
        lgs.check_scenario(cfg.scenario)
        if lgs.loadgen_scenario(cfg.scenario) != "Server":
            raise MLHarnessError(f"--scenario {cfg.scenario}: a sweep runs Server or Interactive")
        loaded = load_manifest(cfg.manifest)
        m = loaded.model
        self.endpoints = list(cfg.run.get("endpoints") or [])
        self.generative = m.response is not None and m.response.kind == "tokens"
        gen = getattr(m, "generation", None)
        self.fixed_tokens = gen.max_new_tokens if gen is not None and gen.min_new_tokens == gen.max_new_tokens else None
        if cfg.axis not in (None, "target_qps", "concurrency"):
            raise MLHarnessError(f"sweep axis '{cfg.axis}': expected target_qps or concurrency")
        if cfg.qps and cfg.concurrency:
            raise MLHarnessError("--qps and --concurrency are two axes: give one")
        auto = ("concurrency" if self.generative and not self.endpoints and not cfg.qps
                and cfg.min_value is cfg.max_value is None else None)
        self.axis = cfg.axis or ("concurrency" if cfg.concurrency else auto) or "target_qps"
        if self.axis == "concurrency":
            if not self.generative:
                raise MLHarnessError(f"--concurrency: {m.name} is not a generative model (response.kind: tokens); "
                                     "sweep it over --qps")
            remote = "openai" if self.endpoints else "remote" if cfg.run.get("agents") else m.framework.name
            if remote in ("openai", "remote"):
                raise MLHarnessError(f"--concurrency: the {remote} framework paces requests itself; set its "
                                     "max_concurrency option in the manifest and sweep --qps")
        self.integer = self.axis == "concurrency"
        token_slos = sorted(n for n in cfg.slo if gp.slo_metric(n) in ("ttft", "tpot"))
        if token_slos and not self.generative:
            raise MLHarnessError(f"--slo {', '.join(token_slos)}: {m.name} does not stream tokens (response.kind: "
                                 "tokens); its objective is latency_pNN")
        given = cfg.concurrency or cfg.qps
        self.auto = False  # the range comes from the first run's calibrated rate
        self.floor: float | None = None  # the lowest rate the adaptive plan may halve to
        self.plan = "list" if given and cfg.plan is None else (cfg.plan or "adaptive")
        if self.plan == "list":
            self.lo, self.hi = min(given), max(given)
        else:
            if given:
                raise MLHarnessError(f"--plan {self.plan} chooses the values: give --min-qps/--max-qps (or "
                                     "--min-concurrency/--max-concurrency) instead of a list")
            default = (1, 64) if self.axis == "concurrency" else (None, None)
            self.lo = cfg.min_value if cfg.min_value is not None else default[0]
            self.hi = cfg.max_value if cfg.max_value is not None else default[1]
            if (self.lo is None or self.hi is None) and self.plan != "adaptive":
                raise MLHarnessError(f"--plan {self.plan} over target QPS needs --min-qps and --max-qps (the "
                                     "adaptive plan finds its own range from the calibrated rate)")
            self.auto = self.lo is None or self.hi is None
            if self.auto:  # a bound given alone is kept; the other comes with the calibrated rate
                if self.lo is not None and self.hi is None:
                    self.hi = self.lo * AUTO_SPAN
            elif not 0 < self.lo <= self.hi:
                raise MLHarnessError(f"the sweep's range {self.lo:g}..{self.hi:g} is empty or not above zero")
        if self.auto and self.lo is not None and not self.lo > 0:
            raise MLHarnessError(f"--min-qps {self.lo:g}: must be above zero")
        if cfg.min_query_count is not None and cfg.min_query_count < 1:
            raise MLHarnessError("--min-query-count must be at least 1")
        for name in ("repeats", "points"):
            if getattr(cfg, name) < 1:
                raise MLHarnessError(f"--{name} must be at least 1")
        if not cfg.seconds > 0:
            raise MLHarnessError("--seconds must be above zero")
        self.state = self._open()

    # -- sweep.json -----------------------------------------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        """What a resumed sweep must share with the one it continues."""
        c = self.cfg
        return {"manifest": str(c.manifest), "scenario": c.scenario, "axis": self.axis, "plan": self.plan,
                "values": list(c.concurrency or c.qps), "min": self.lo, "max": self.hi, "points": c.points,
                "slo": c.slo, "repeats": c.repeats, "seconds": c.seconds, "queries": c.queries,
                "dataset_path": c.dataset_path, "count": c.count,
                # newer options only when given, so a sweep made before them resumes
                **{k: v for k, v in (("min_query_count", c.min_query_count), ("endpoints", self.endpoints),
                                     ("framework", c.run.get("framework")), ("user_conf", str(c.run["user_conf"])
                                     if c.run.get("user_conf") else None)) if v}}

    def _open(self) -> dict[str, Any]:
        path = self.cfg.output / SWEEP_FILE
        if not self.cfg.resume:
            if self.cfg.output.exists():
                raise MLHarnessError(f"{self.cfg.output} exists; a sweep never writes over one (--resume continues "
                                     "the sweep there, or choose another --output)")
            (self.cfg.output / "points").mkdir(parents=True)
            state = {"kind": KIND, "version": VERSION, "manifest": str(self.cfg.manifest),
                     "scenario": self.cfg.scenario, "axis": self.axis, "slo": self.cfg.slo, "plan": self.plan,
                     "options": self.options(), "points": [], "aggregates": [], "knee": None, "max_valid": None,
                     "complete": False}
            self._write(state)
            return state
        if not present(path, "--resume: the sweep"):
            raise MLHarnessError(f"--resume: {shown(path)} does not exist (no sweep to continue there)")
        try:
            state = load_sweep(path, RESUME_SHAPE).data
        except TreeFileError as e:
            raise TreeFileError(f"--resume: {e}; it cannot be continued (start a new sweep with another "
                                "--output)") from None
        old, new = state.get("options") or {}, json.loads(json.dumps(self.options()))
        # repr escapes what the file holds; a long value is cut so the error stays one paragraph
        diff = [f"{k}: {repr(old.get(k))[:200]} there, {new[k]!r} now" for k in new if old.get(k) != new[k]]
        if diff:
            raise MLHarnessError(f"--resume: the options differ from those of the sweep in {self.cfg.output}: "
                                 + "; ".join(diff))
        (self.cfg.output / "points").mkdir(parents=True, exist_ok=True)
        return state

    def _write(self, state: dict[str, Any]) -> None:
        path = self.cfg.output / SWEEP_FILE
        tmp = path.with_name(f".{SWEEP_FILE}.{os.getpid()}.tmp")
        with tmp.open("w") as f:
            f.write(json.dumps(state, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)

    def _say(self, text: str) -> None:
        if self.cfg.progress:
            self.cfg.progress(text)

    # -- points ---------------------------------------------------------------------------------------------------
    def label(self, value: float, repeat: int) -> str:
        return (f"conc-{int(value):04d}" if self.axis == "concurrency" else f"qps-{value:010.3f}") + f"-r{repeat}"

    def _overrides(self, value: float | None) -> tuple[lgs.Overrides, int | None]:
        ms = max(1, int(self.cfg.seconds * 1000))
        if self.axis == "concurrency":
            assert value is not None
            queries = self.cfg.queries or max(16, 4 * int(value))
            return lgs.Overrides(**{**self.cfg.sizing, "min_duration_ms": ms, "target_qps": CONCURRENCY_QPS,
                                    "min_query_count": queries, "max_query_count": queries}), int(value)
        # value None: the run calibrates its rate (or reads it from its user.conf)
        queries = self.cfg.min_query_count or MIN_POINT_QUERIES
        return lgs.Overrides(**{**self.cfg.sizing, "min_duration_ms": ms, "min_query_count": queries,
                                "target_qps": None if value is None else float(value)}), self.cfg.run.get("max_batchsize")

    def _clear(self, folder: Path) -> None:
        """A run that finished after the last sweep.json is not trusted: its folder is kept aside, the point redone."""
        if not folder.exists():
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = folder.with_name(f"{folder.name}.failed-{stamp}")
        n = 1
        while kept.exists():
            n += 1
            kept = folder.with_name(f"{folder.name}.failed-{stamp}-{n}")
        folder.rename(kept)
        self._say(f"{folder.name}: an unrecorded run folder was kept as {kept.name} and the point is measured again")

    def measure(self, value: float | None, repeat: int) -> dict[str, Any]:
        """One run at ``value``; None: at the rate the run calibrates (the first point of a sweep without range)."""
        from dataclasses import replace

        from mlharness.run.runner import RunOptions, run

        label = self.label(value, repeat) if value is not None else CALIBRATING
        folder = self.cfg.output / "points" / label
        self._clear(folder)
        overrides, batch = self._overrides(value)
        self._say(f"{label}: " + ("the rate the run calibrates starts the sweep" if value is None else
                                  f"{'concurrency' if self.axis == 'concurrency' else 'target QPS'} {value:g}"))
        opts = RunOptions(scenario=self.cfg.scenario, mode="performance", manifest=self.cfg.manifest,
                          dataset_path=self.cfg.dataset_path, count=self.cfg.count, output=folder,
                          overrides=overrides, loadgen_trace=True, audit_config=self._token_log(), second_try=False)
        fixed = {k: v for k, v in self.cfg.run.items() if k not in ("max_batchsize", "overrides")}
        res = run(replace(opts, **fixed, max_batchsize=batch,
                          progress=self.cfg.progress_bar() if self.cfg.progress_bar else None))
        output = res.output
        if value is None:  # named by the rate it ran at, as every other point
            value = round(float(res.metadata["settings"]["server_target_qps"]), 3)
            label = self.label(value, repeat)
            self._clear(target := self.cfg.output / "points" / label)
            output = folder.rename(target)
        return self.point(label, value, repeat, output, res.summary)

    def point(self, label: str, value: float, repeat: int, output: Path, summary: Summary) -> dict[str, Any]:
        """A measured point's record in sweep.json, from its run folder and LoadGen's summary."""
        figures = summary_figures(summary)
        good, fraction, n_good, n = gp.goodput(output, self.cfg.slo, figures["throughput"], self.fixed_tokens)
        minimum = MIN_POINT_QUERIES if self.axis == "target_qps" else None
        return {"label": label, "value": value, "repeat": repeat,
                "dir": str(output.relative_to(self.cfg.output)), "valid": bool(summary.valid), **figures,
                "goodput": good, "goodput_fraction": fraction, "samples": n, "good_samples": n_good if self.cfg.slo
                else None, "slo_met": self._slo_met(figures), "min_queries": minimum,
                "meaningful": minimum is None or n >= minimum}

    def _token_log(self) -> Path | None:
        """A TPOT objective on a model whose generation length varies needs each sample's token count: LoadGen
        logs it in the accuracy log, which a performance run fills only for the samples it samples. This config
        (passed as the run's audit config, which LoadGen reads last, as TEST06's) makes it log every sample."""
        if self.fixed_tokens is not None or not any(gp.slo_metric(n) == "tpot" for n in self.cfg.slo):
            return None
        path = self.cfg.output / TOKEN_LOG_CONF
        if not path.is_file():
            # LoadGen logs each sample with the probability target / expected queries: above 1 with this target
            path.write_text("# written by mlharness sweep: every sample's token count in the accuracy log\n"
                            f"*.*.accuracy_log_sampling_target = {LOG_EVERY_SAMPLE}\n")
        return path

    def _slo_met(self, figures: dict[str, Any]) -> dict[str, bool | None]:
        """Each SLO against the run's percentile as LoadGen's summary states it."""
        out: dict[str, bool | None] = {}
        for name, bound in self.cfg.slo.items():
            metric, pct = name.split("_p", 1)
            value = (figures.get(f"{metric}_ms") or {}).get(f"p{pct}")
            out[name] = None if value is None else value <= bound * 1000
        return out

    def _range_from(self, start: float) -> None:
        """The range of a sweep that finds its own, from the rate its first run used."""
        cfg = self.cfg
        if cfg.max_value is not None:
            start = min(start, cfg.max_value)
        self.lo = cfg.min_value if cfg.min_value is not None else start
        self.hi = cfg.max_value if cfg.max_value is not None else self.lo * AUTO_SPAN
        self.floor = None if cfg.min_value is not None else self.lo / AUTO_SPAN

    def _start(self, state: dict[str, Any]) -> None:
        """A sweep without range: its first point is a run at the calibrated rate (unless --min-qps gave it)."""
        if "range" in state:  # resumed
            r = state["range"]
            num = (int, float)
            if not (isinstance(r, dict) and isinstance(r.get("min"), num) and isinstance(r.get("max"), num)
                    and isinstance(r.get("floor"), (*num, type(None))) and 0 < r["min"] <= r["max"]):
                raise MLHarnessError(f"--resume: {self.cfg.output / SWEEP_FILE}: 'range' is not the range a sweep "
                                     "wrote ({from, min, max, floor}); it cannot be continued (start a new sweep "
                                     "with another --output)")
            self.lo, self.hi, self.floor = r["min"], r["max"], r["floor"]
            return
        if self.cfg.min_value is not None:
            self._range_from(self.cfg.min_value)
        else:
            point = self.measure(None, 1)
            self._range_from(point["value"])
            state["points"].append(point)
        state["range"] = {"from": "calibration" if self.cfg.min_value is None else "--min-qps", "min": self.lo,
                          "max": self.hi, "floor": self.floor}
        self._say(f"the sweep's range: from {self.lo:g} QPS, doubling up to {self.hi:g}"
                  + (f" and halving down to {self.floor:g}" if self.floor else ""))
        self._refresh(state)
        self._write(state)
        if self.cfg.on_point and state["points"]:
            self.cfg.on_point(state["points"][-1])

    def run(self) -> dict[str, Any]:
        state = self.state
        if self.auto:
            self._start(state)
        while True:
            aggs = sp.by_value(state["points"])
            partial = [a["value"] for a in aggs if a["repeats"] < self.cfg.repeats]  # interrupted between repeats
            value = partial[0] if partial else sp.next_value(
                self.plan, list(self.cfg.concurrency or self.cfg.qps), aggs, self.axis, self.lo, self.hi,
                self.cfg.points, self.integer, self.floor)
            if value is None:
                break
            done = {p["repeat"] for p in state["points"] if p["value"] == value}
            for repeat in range(1, self.cfg.repeats + 1):
                if repeat in done:
                    continue
                point = self.measure(value, repeat)
                state["points"].append(point)
                self._refresh(state)
                self._write(state)
                if self.cfg.on_point:
                    self.cfg.on_point(point)
        self._refresh(state)
        state["complete"] = True
        self._write(state)
        return state

    def _refresh(self, state: dict[str, Any]) -> None:
        state["points"].sort(key=lambda p: (p["value"], p["repeat"]))
        aggs = sp.by_value(state["points"])
        state["aggregates"] = aggs
        state["knee"] = sp.find_knee(aggs, self.axis)
        state["max_valid"] = sp.max_valid(aggs)


def sweep(cfg: SweepConfig) -> dict[str, Any]:
    return Sweep(cfg).run()
