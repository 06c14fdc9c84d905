"""A Server rate that mlharness calibrated, played once more when LoadGen found it too high; an Offline expected
rate it calibrated, once more when the run outran it.

Calibration times the model for a few seconds before the run; the run itself can meet a slower host (another
process takes a core, the cache is cold, a collector pauses), and a Server run over its latency bound at the
calibrated rate is INVALID. Since nobody chose that rate, the same command plays the test once more at the rate the
INVALID explanation names (:mod:`mlharness.calibration.explain`: half of what the first play completed, with the
query count early stopping needs there), with the model already loaded and no second calibration. The first play's
logs are kept in ``first_try/`` beside the second's, the written user.conf gains the lines the second play used,
and the run record says both (``calibration.second_try``). ``--no-second-try`` turns it off.

An Offline run that outran its calibrated expected QPS by more than LoadGen's 10% margin ends its one query
before the minimum duration (INVALID): it is played once more expecting the rate it measured, with the explanation's
headroom.

Only a Server (or Interactive) or Offline performance run whose rate calibration chose is played again, and only
for a fix a rate or a query count makes: a rate the user stated, an audit run, or a bound no rate can meet (the explanation's
fix is then a larger bound) ends as the first play ended.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlharness.calibration.asked import Asked
from mlharness.calibration.explain import Explanation, explain, summary_sections, waive
from mlharness.calibration.stated import count_given_by
from mlharness.loadgen.logs import FIRST_TRY_DIR, read_detail
from mlharness.userfiles import read_log_text

KEPT = "user.conf"  # the effective user.conf: copied into first_try/ and extended, not moved


@dataclass(frozen=True)
class SecondTry:
    target_qps: float
    min_query_count: int
    first: dict[str, Any]  # the first play: its rate, query count, what failed and why
    calibration: dict[str, Any]  # what calibration measured and chose before the first play
    seconds: float = 0.0  # about how long the second play lasts: min_duration, or its queries at its rate
    scenario: str = "Server"

    def line(self) -> str:
        return (f"second try: the calibrated rate {self.first['target_qps']:g} QPS was INVALID "
                f"({self.first['why']}); playing the test once more at {self.target_qps:g} QPS with at least "
                f"{self.min_query_count} queries (about {self.seconds:.3g} s), the first play's logs kept in {FIRST_TRY_DIR}/ "
                "(--no-second-try turns this off)")

    def as_dict(self) -> dict[str, Any]:
        return {"target_qps": self.target_qps, "min_query_count": self.min_query_count, "first": self.first}


def plan(settings_plan: Any, settings: Any, calibration: dict[str, Any] | None, outdir: Path,
         asked: Asked) -> SecondTry | None:
    """The second play a first one in ``outdir`` asks for, or None (VALID, or not one mlharness may replay). A
    min_query_count the user stated stays as stated: a first play short of early stopping for that count alone is
    not played again."""
    scenario = settings_plan.scenario
    if not asked.second_try or scenario not in ("Server", "Offline") or settings_plan.mode != "performance":
        return None
    if settings_plan.audit_config is not None or not calibration or not calibration.get("calibrated"):
        return None
    if calibration.get("key") != "target_qps":
        return None
    summary = outdir / "mlperf_log_summary.txt"
    if not summary.is_file():
        return None
    detail = outdir / "mlperf_log_detail.txt"
    text = read_log_text(summary, "LoadGen summary")
    exp = explain(text, read_detail(detail) if detail.is_file() else [], scenario, settings_plan.model,
                  settings_plan.latency_bound)
    exp = waive(exp, settings_plan.round, settings_plan.model)
    if exp.valid or exp.errors:
        return None
    fixed = _fix_values(exp.fixes)
    if not fixed:  # a larger bound, or nothing a lower rate or more queries would fix
        return None
    qps = float(settings.server_target_qps if scenario == "Server" else settings.offline_expected_qps)
    count = int(settings.min_query_count)
    new_qps = fixed.get("--target-qps", qps)
    stated = count_given_by(settings_plan, asked.user_conf) is not None
    new_count = count if stated else max(count, int(fixed.get("--min-query-count", 0)))
    if scenario == "Offline" and new_qps <= qps:  # Offline's fix raises the expected rate, nothing else
        return None
    if scenario == "Server" and (new_qps > qps or (new_qps == qps and new_count == count)):
        return None
    first = {"target_qps": qps, "min_query_count": count, "failed": list(exp.failed),
             "why": _why(exp, summary_sections(text)["stats"])}
    seconds = max(float(settings.min_duration_ms) / 1000.0, new_count / new_qps if scenario == "Server" else 0.0)
    return SecondTry(new_qps, new_count, first, dict(calibration), seconds, scenario)


def _why(exp: Explanation, stats: dict[str, str]) -> str:
    """What failed, in a few words: the measured p99 (TTFT/TPOT, or the latency) against its limit, and the other
    unmet requirements."""
    said = list(exp.measured)
    p99, bound = stats.get("99.00 percentile latency (ns)"), stats.get("target_latency (ns)")
    if "latency bound" in exp.failed and p99 and bound:
        said.append(f"p99 latency {float(p99) / 1e6:.4g} ms over its bound {float(bound) / 1e6:.4g} ms")
    said += [f"{f} not met" for f in exp.failed if f not in ("latency bound", "TTFT", "TPOT")]
    return "; ".join(said) or "INVALID"


def _fix_values(fixes: list[Any]) -> dict[str, float]:
    """The rate and query count the explanation's fixes name (a bound fix names neither)."""
    values: dict[str, float] = {}
    for fix in fixes:
        values.update({flag: float(v) for flag, v in fix.values().items() if flag in ("--target-qps", "--min-query-count")})
    return values


def set_aside(outdir: Path, before: set[str]) -> Path:
    """Move what the first play wrote into ``outdir/first_try`` (the user.conf is copied: the second play's extends
    it); ``before``: the names that were there before the first play, which stay."""
    kept = outdir / FIRST_TRY_DIR
    kept.mkdir()
    for path in sorted(outdir.iterdir()):
        if path.name in before or path == kept:
            continue
        if path.name == KEPT:
            shutil.copy2(path, kept / KEPT)
        else:
            path.rename(kept / path.name)
    return kept


def apply(second: SecondTry, settings: Any, settings_plan: Any, outdir: Path) -> None:
    """The second play's rate and count in LoadGen's settings and, as later lines that win, in the user.conf."""
    if second.scenario == "Offline":
        settings.offline_expected_qps = second.target_qps
    else:
        settings.server_target_qps = second.target_qps
    settings.min_query_count = second.min_query_count
    conf = outdir / KEPT
    if conf.is_file():
        model, s = settings_plan.model, second.scenario
        with conf.open("a") as f:
            f.write(f"\n# Played a second time: the calibrated rate {second.first['target_qps']:g} QPS was INVALID "
                    f"({second.first['why']})\n{model}.{s}.target_qps = {second.target_qps:g}\n"
                    f"{model}.{s}.min_query_count = {second.min_query_count}\n")


__all__ = ["FIRST_TRY_DIR", "SecondTry", "apply", "plan", "set_aside"]
