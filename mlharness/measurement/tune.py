"""``mlharness tune``: find the settings a VALID run needs, with short trial runs, and write them as a user.conf.

- Offline: the expected QPS (and the best batch size / instance split among the candidates given).
- Server: the highest target QPS that stays VALID (halving from the Offline rate until a run is VALID, then
  bisection), less a 5% margin.
- SingleStream / MultiStream: the expected latency (the measured p90 per query).
A confirmation run with the written settings closes the search (the output is written only when it is VALID);
every trial is kept in a table. An existing output (the user's own user.conf) is never replaced without ``force``:
the tuned conf then goes to ``<output>.new`` and the unified diff of the two is shown.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT
from mlharness.loadgen import settings as lgs
from mlharness.loadgen.interrupt import GUARD
from mlharness.manifest.loader import load_manifest
from mlharness.run.runner import RunOptions, RunResult, run
from mlharness.userfiles import read_log_text

SERVER_HALVINGS = 8  # the Server search looks down to 1/256 of the Offline rate
SERVER_MARGIN = 0.95  # the written Server rate, as a fraction of the best VALID trial
CONFIRM_RETRIES = 3  # an INVALID confirmation is run again this often, with settings it corrects
OFFLINE_SLACK = 1.1  # LoadGen's Offline query holds 10% more samples than the expected QPS fills the duration with
OFFLINE_HEADROOM = 1.25  # the written Offline rate over the measured one (short runs of fast models vary that much)
STREAM_HEADROOM = 0.8  # the written SingleStream/MultiStream latency, as a fraction of the measured median


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
    force: bool = False  # replace an existing output (its diff is shown)
    show_diff: Callable[[str], None] | None = None
    run: dict[str, Any] = field(default_factory=dict)  # more RunOptions of every trial (framework, endpoints, ...)


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
    path: Path  # the output when confirmed (<output>.new when the output existed, without force), else
    # <output>.unconfirmed
    kept_existing: bool = False  # the output existed and was left as it was


class Tuner:
    def __init__(self, cfg: TuneConfig):
        self.cfg = cfg
        loaded = load_manifest(cfg.manifest)
        self.model = loaded.model.mlperf.model or loaded.model.name
        self.work = Path()  # the trials' run folders: a temporary folder while tune() runs
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
                             overrides=lgs.Overrides(**overrides), second_try=False,  # tune judges each trial
                             **self.cfg.run))
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
                sps *= OFFLINE_HEADROOM
                if sps > best_sps:
                    best_sps, best = sps, {"batch": b, "instances": inst}
        if best_sps <= 0:
            raise MLHarnessError("the Offline probe measured no throughput")
        return best_sps, best

    def tune(self) -> TuneResult:
        """Search, confirm and write; the trials' folders are removed at the end, also when a signal or an error
        ends the search (the written conf is all that is kept)."""
        with GUARD.scratch(Path(tempfile.mkdtemp(prefix="mlharness-tune-"))) as self.work:
            try:
                return self._search()
            except BaseException as e:
                kept = getattr(e, "kept", None)
                if isinstance(kept, Path) and kept.is_relative_to(self.work):
                    e.kept = None  # a trial's partial output: removed with the rest, so not named
                raise

    def _search(self) -> TuneResult:
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
                lines.append(self._server_line(qps))
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
            lines.append(f"{self.model}.{s}.target_latency = {max(STREAM_HEADROOM * p50_ms, 0.001):.3f}")
        return self._confirm(lines, best)

    def _confirm(self, lines: list[str], best: dict[str, Any]) -> TuneResult:
        """Run with the written settings; the output file is replaced only by a conf that gave a VALID run (an
        unconfirmed one goes to ``<output>.unconfirmed``). An INVALID confirmation is tried again with settings
        it corrects (``_correct``), at most CONFIRM_RETRIES times."""
        s, out = self.cfg.scenario, self.cfg.output
        out.parent.mkdir(parents=True, exist_ok=True)
        staged = out.with_name(out.name + ".unconfirmed")
        valid, why = False, ""
        for _ in range(1 + CONFIRM_RETRIES):
            staged.write_text("# written by mlharness tune\n" + "\n".join(lines) + "\n")
            lgs.validate_user_conf(staged, self.model)
            res = self._run("confirmation with the written user.conf" + (f" ({why})" if why else ""),
                            s, user_conf=staged, batch=best.get("batch"), instances=best.get("instances", 1),
                            min_query_count=64 if s != "Offline" else 1)
            valid = bool(res.summary.valid)
            if valid:
                break
            why = self._correct(lines, best, res)
            if not why:
                break
        if not valid:
            return TuneResult(lines, self.trials, False, best, staged)
        return self._write(lines, best, staged)

    def _correct(self, lines: list[str], best: dict[str, Any], res: RunResult) -> str:
        """Settings that answer an INVALID confirmation, put into ``lines[0]``, and what was changed ('' when
        nothing would help). Server backs off 10%. Offline and the stream scenarios run out of queries when the
        confirmation ran faster than the settings expect (LoadGen generates the queries for the minimum duration
        at the expected rate): the expectation follows the measured speed, with the probe's headroom."""
        s = self.cfg.scenario
        if s == "Server":
            best["server_qps"] *= 0.9
            lines[0] = self._server_line(best["server_qps"])
            return "backed off 10%"
        current = float(lines[0].rpartition("=")[2])
        if s == "Offline":
            measured = float(res.summary.metric_value or 0)
            if measured <= current * OFFLINE_SLACK:
                return ""
            lines[0] = f"{self.model}.Offline.target_qps = {measured * OFFLINE_HEADROOM:.2f}"
            return f"it ran at {measured:,.1f} QPS"
        p50_ms = float(res.summary.fields.get("50.00 percentile latency (ns)", 0) or 0) / 1e6
        if not 0 < p50_ms < current / STREAM_HEADROOM:
            return ""
        lines[0] = f"{self.model}.{s}.target_latency = {max(STREAM_HEADROOM * p50_ms, 0.001):.3f}"
        return f"its median latency was {p50_ms:.3f} ms"

    def _write(self, lines: list[str], best: dict[str, Any], staged: Path) -> TuneResult:
        """Put the confirmed conf in place: the output if it is new (or with force), else ``<output>.new``."""
        from mlharness.userfiles import unified_diff

        out = self.cfg.output
        target, kept = out, False
        if out.exists():
            # the file there is a user.conf, or whatever the user keeps there: bounded as a data file, never refused
            old = read_log_text(out, "tune output", DATA_FILE_LIMIT) if out.is_file() else ""
            new = lgs.read_conf(staged, "tuned user.conf")
            if not self.cfg.force:
                target, kept = out.with_name(out.name + ".new"), True
            if self.cfg.show_diff is not None:
                self.cfg.show_diff(unified_diff(old, new, out) or f"{out}: the tuned settings are the same\n")
        staged.replace(target)
        return TuneResult(lines, self.trials, True, best, target, kept_existing=kept)

    def _server_line(self, qps: float) -> str:
        return f"{self.model}.Server.target_qps = {qps:.2f}"

    def _server(self, offline_sps: float, best: dict[str, Any]) -> float:
        """Highest VALID Server target QPS: halve from the Offline rate until a run is VALID, then bisect between
        that rate and the last INVALID one. Returns 95% of the best VALID trial, a margin for run-to-run noise
        (the written rate must stay VALID in the confirmation run and after)."""
        latency = {"target_latency_ms": self.cfg.target_latency_ms} if self.cfg.target_latency_ms else {}
        last: list[RunResult] = []

        def valid(qps: float) -> bool:
            res = self._run(f"Server at {qps:,.1f} QPS", "Server", batch=best.get("batch"),
                            instances=best.get("instances", 1), target_qps=qps, min_query_count=100, **latency)
            last[:] = [res]
            bound = trial_bound(res)
            if not latency and bound.get("kind") == "derived":
                # a bound derived from the first trial's measured latency holds for every later trial, so the
                # search compares rates under one bound (a run with the written conf derives it again)
                latency["target_latency_ms"] = float(bound["ms"])
                self._say(f"Server latency bound {bound['ms']:g} ms, from {bound.get('source')}")
            return bool(res.summary.valid)

        hi, qps = offline_sps, offline_sps
        for _ in range(SERVER_HALVINGS + 1):
            if valid(qps):
                break
            hi, qps = qps, qps / 2
        else:
            raise MLHarnessError(f"no VALID Server run found down to {qps * 2:,.1f} QPS "
                                 f"(1/{2 ** SERVER_HALVINGS} of Offline)" + gave_up_reason(last[-1] if last else None))
        lo = qps
        if lo < hi:
            for _ in range(self.cfg.steps):
                mid = (lo + hi) / 2
                if valid(mid):
                    lo = mid
                else:
                    hi = mid
        best["server_best_valid_trial_qps"] = lo
        return SERVER_MARGIN * lo


def trial_bound(res: RunResult) -> dict[str, Any]:
    """The Server latency bound a trial was held to (mlharness_run.json's latency_bound), or {}."""
    return ((res.metadata or {}).get("latency_bound") or {}).get("target_latency") or {}


def gave_up_reason(res: RunResult | None) -> str:
    """The bound the Server trials were held to, where it comes from, what they measured, and the way out."""
    from mlharness.calibration.server_bound import derived_ms

    if res is None:
        return "; try a larger target latency"
    bound = trial_bound(res)
    p99_ns = (res.summary.fields or {}).get("99.00 percentile latency (ns)")
    single = bound.get("single_sample_p99_ms")
    text = f" under the latency bound p99 <= {bound['ms']:g} ms from {bound.get('source')}" if bound else ""
    if p99_ns:
        text += f"; the last trial measured p99 {float(p99_ns) / 1e6:.4g} ms"
    if single is not None:
        text += f", one sample at a time p99 {single:.4g} ms"
    if bound and single is not None and single > float(bound["ms"]):
        return text + f"; no rate meets this bound: --target-latency-ms {derived_ms(single):g} is one the model can"
    return text + "; try a larger --target-latency-ms"


def tune(cfg: TuneConfig) -> TuneResult:
    return Tuner(cfg).tune()
