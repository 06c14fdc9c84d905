"""``mlharness tune``: find the settings a VALID run needs, with short trial runs, and write them as a user.conf.

- Offline: the expected QPS (and the best batch size / instance split among the candidates given).
- Server: the highest target QPS that stays VALID (bisection between a fraction of Offline and Offline).
- SingleStream / MultiStream: the expected latency (the measured p90 per query).
A confirmation run with the written settings closes the search; every trial is kept in a table.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.runner import RunOptions, RunResult, run
from mlharness.manifest.loader import load_manifest


@dataclass
class TuneConfig:
    manifest: str
    scenario: str
    dataset_path: str | None = None
    count: int | None = None
    seconds: float = 5.0
    batch_sizes: list[int] = field(default_factory=list)
    instances: list[int] = field(default_factory=list)
    target_latency_ms: float | None = None  # Server p99 bound; default: the embedded conf's
    steps: int = 5
    output: Path = Path("user.conf")
    progress: Callable[[str], None] | None = None


@dataclass
class Trial:
    what: str
    settings: dict[str, Any]
    metric: float | None
    valid: bool


@dataclass
class TuneResult:
    conf_lines: list[str]
    trials: list[Trial]
    confirmed: bool
    best: dict[str, Any]


class Tuner:
    def __init__(self, cfg: TuneConfig):
        self.cfg = cfg
        loaded = load_manifest(cfg.manifest)
        self.model = loaded.model.mlperf.model or loaded.model.name
        self.work = Path(tempfile.mkdtemp(prefix="mlharness-tune-"))
        self.trials: list[Trial] = []
        self._n = 0

    def _say(self, text: str) -> None:
        if self.cfg.progress:
            self.cfg.progress(text)

    def _run(self, what: str, scenario: str, user_conf: Path | None = None, batch: int | None = None,
             instances: int = 1, **overrides: Any) -> RunResult:
        self._n += 1
        self._say(f"trial {self._n}: {what}")
        overrides.setdefault("min_duration_ms", int(self.cfg.seconds * 1000))
        res = run(RunOptions(scenario=scenario, mode="performance", manifest=self.cfg.manifest,
                             dataset_path=self.cfg.dataset_path, count=self.cfg.count, user_conf=user_conf,
                             output=self.work / f"trial_{self._n}", max_batchsize=batch, instances=instances,
                             overrides=lgs.Overrides(**overrides)))
        settings = {k: v for k, v in overrides.items()}
        if batch:
            settings["max_batchsize"] = batch
        if instances > 1:
            settings["instances"] = instances
        self.trials.append(Trial(what, settings, res.summary.metric_value, res.summary.valid))
        return res

    def offline(self) -> tuple[float, dict[str, Any]]:
        """Best Offline throughput over the candidate batch sizes and instance counts."""
        best_sps, best = 0.0, {}
        for b in self.cfg.batch_sizes or [None]:
            for inst in self.cfg.instances or [1]:
                # a small expected QPS makes LoadGen issue min_query_count samples: a throughput probe
                res = self._run(f"Offline probe batch={b or 'manifest'} instances={inst}", "Offline", batch=b,
                                instances=inst, target_qps=1, min_query_count=max(64, self.cfg.count or 64))
                sps = float(res.summary.metric_value or 0)
                # a short probe underestimates a fast model; rerun at the measured rate until the query is big
                # enough to fill the minimum duration (then the rate is measured in steady state)
                for _ in range(4):
                    res = self._run(f"Offline at {sps:,.1f} QPS batch={b or 'manifest'} instances={inst}",
                                    "Offline", batch=b, instances=inst, target_qps=sps, min_query_count=1)
                    measured = float(res.summary.metric_value or 0)
                    if res.summary.valid:
                        break
                    sps = max(measured, sps * 1.1)
                # An Offline run is INVALID when the machine outruns the expected QPS by more than LoadGen's 10%
                # margin (the query ends before the minimum duration): keep 25% of headroom above a rate that
                # gave a VALID run (short runs of fast models vary that much). Overstating only lengthens runs.
                sps *= 1.25
                if sps > best_sps:
                    best_sps, best = sps, {"batch": b, "instances": inst}
        if best_sps <= 0:
            raise MLHarnessError("the Offline probe measured no throughput")
        return best_sps, best

    def tune(self) -> TuneResult:
        s = self.cfg.scenario
        lgs.check_scenario(s)
        lines: list[str] = []
        best: dict[str, Any] = {}
        if s in ("Offline", "Server"):
            sps, best = self.offline()
            best["offline_sps"] = sps
            if s == "Offline":
                lines.append(f"{self.model}.Offline.target_qps = {sps:.2f}")
            else:
                qps = self._server(sps, best)
                best["server_qps"] = qps
                lines.append(f"{self.model}.Server.target_qps = {qps:.2f}")
                if self.cfg.target_latency_ms is not None:
                    lines.append(f"{self.model}.Server.target_latency = {self.cfg.target_latency_ms:g}")
        else:
            res = self._run(f"{s} probe", s, target_latency_ms=100.0, min_query_count=64)
            p90_ms = float(res.summary.fields.get(res.summary.metric_name, 0) or 0) / 1e6
            if p90_ms <= 0:
                raise MLHarnessError(f"the {s} probe measured no latency")
            best["p90_ms"] = p90_ms
            # LoadGen generates queries for the minimum duration at the expected latency: a run that turns out
            # faster runs out of queries (INVALID), a slower one just lasts longer. Expect 80% of the median.
            p50_ms = float(res.summary.fields.get("50.00 percentile latency (ns)", 0) or 0) / 1e6 or p90_ms
            lines.append(f"{self.model}.{s}.target_latency = {max(0.8 * p50_ms, 0.001):.3f}")
        conf = self.cfg.output
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("# written by mlharness tune\n" + "\n".join(lines) + "\n")
        lgs.validate_user_conf(conf, self.model)
        res = self._run("confirmation with the written user.conf", s, user_conf=conf, batch=best.get("batch"),
                        instances=best.get("instances", 1), min_query_count=64 if s != "Offline" else 1)
        return TuneResult(lines, self.trials, res.summary.valid, best)

    def _server(self, offline_sps: float, best: dict[str, Any]) -> float:
        lo, hi, found = 0.25 * offline_sps, offline_sps, 0.0
        latency = {"target_latency_ms": self.cfg.target_latency_ms} if self.cfg.target_latency_ms else {}
        for step in range(self.cfg.steps):
            qps = hi if step == 0 else (lo + hi) / 2
            res = self._run(f"Server at {qps:.1f} QPS", "Server", batch=best.get("batch"),
                            instances=best.get("instances", 1), target_qps=qps, min_query_count=100, **latency)
            if res.summary.valid:
                found, lo = max(found, qps), qps
                if step == 0:
                    break
            else:
                hi = qps
        if found == 0.0:
            res = self._run(f"Server at {lo:.1f} QPS", "Server", batch=best.get("batch"),
                            instances=best.get("instances", 1), target_qps=lo, min_query_count=100, **latency)
            if not res.summary.valid:
                raise MLHarnessError(f"no VALID Server run found down to {lo:.1f} QPS; try a larger target latency")
            found = lo
        return found


def tune(cfg: TuneConfig) -> TuneResult:
    return Tuner(cfg).tune()
