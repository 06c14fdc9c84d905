"""Development runs stay short: sized from the expected performance, not the dataset.

mlperf.conf sizes a generative Offline run by its dataset (``llama3_1-8b.Offline.min_query_count = 13368``), and
other Offline runs too (``rgat.Offline.min_query_count = 788379``: one query of each IGBH validation paper: a day
of the tiny random R-GAT on a CPU, whatever ``--min-duration-ms`` says). Both turn
``sample_concatenate_permutation`` on, which pads every performance run to a multiple of the loaded
samples (``performance_sample_count``, the whole dataset again). A run whose ``min_duration`` was shortened for
development (``--min-duration-ms`` under the official 600 s) would still generate the whole dataset: an hour of
a small model on a CPU, whatever the duration asked for.

Such a run is sized the way LoadGen sizes a run of any other model: from the expected rate (calibrated, or
given with ``--target-qps`` / a user.conf line). Offline asks for ``1.1 x min_duration x expected QPS`` samples (its
``min_query_count`` lowered to 1), and the loaded set shrinks to what the run issues so that the padding adds
nothing. The run says what it changed and which flag restores the official count. A run that names
``--min-query-count`` or ``--performance-sample-count`` and every run at the official duration keep mlperf.conf's
figures. A development run is one whose user shortened its duration (:func:`development_duration`): the flag, or
a ``min_duration`` line of the user.conf it was given, which is how ``submission run`` passes the flag to the
repeat of an INVALID performance run (the effective user.conf and the fix, no setting flag), so the repeat is
sized as the first try was.

An audit run of a development submission (``submission run --min-duration-ms``: its duration is in the user.conf
the performance run used) is sized as the performance run it audits (:func:`audit_counts`): the counts its audit
config sets for the official duration (TEST04's ``min_query_count = 20`` for wan-2.2, a minimum of ten minutes'
worth) give way to the performance run's, and Offline is then sized from the same expected rate (:func:`size`),
so its audit is VALID wherever its performance run is. An audit that states its own duration (TEST06, TEST07,
TEST09: ``min_duration = 0`` and the count of responses they compare) keeps its lines, as does every audit at the
official duration.

A Server run is sized by min_duration and by early stopping (:data:`~mlharness.calibration.estimate.EARLY_STOPPING_QUERIES`
queries, which calibration asks for when min_duration at the calibrated rate holds fewer). The development shortcut
for a model whose rate makes those queries long (the run's estimate says so before it starts) is an explicit
``--min-query-count N``: it is always kept, and when it leaves fewer queries than early stopping needs the run says
so in one line before it starts (:func:`short_count_note`) and is recorded as not submittable.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from mlharness.calibration import estimate
from mlharness.calibration.stated import conf_states, count_given_by
from mlharness.loadgen import settings as lgs
from mlharness.rounds import MIN_DURATION_MS


def development_duration(plan: lgs.SettingsPlan, settings: Any) -> int | None:
    """The min_duration (ms) the user shortened this run to, or None for a run at the official duration. The one
    place that says what a development run is: ``--min-duration-ms`` under the official 600 s, or a ``min_duration``
    line of the user.conf the run was given (``settings``: the run's, which hold it). The second is how a
    development submission's later runs carry the flag: ``submission run`` gives its performance retries and its
    audits the effective user.conf, which states the flag as a line, and no setting flag. A duration that only
    mlperf.conf or the round sets (e2e-rag's 0) is the official one: it is no development shortcut."""
    if plan.overrides.min_duration_ms is not None:
        duration = int(plan.overrides.min_duration_ms)
    elif settings is not None and conf_states(plan.user_conf, plan.model, plan.scenario, "min_duration"):
        duration = int(settings.min_duration_ms)
    else:
        return None
    return duration if duration < MIN_DURATION_MS else None


def applies(plan: lgs.SettingsPlan, settings: Any = None) -> bool:
    """A performance run with a development duration (:func:`development_duration`), no count of its own and no
    audit config; or an audit run that keeps the development duration of the performance run it audits
    (``settings``: the audit's) and whose user.conf states no count (a count stated for the performance run is
    kept for its audits too)."""
    o = plan.overrides
    if plan.mode != "performance" or o.min_query_count is not None or o.performance_sample_count is not None:
        return False
    if plan.audit_config is None:
        return development_duration(plan, settings) is not None
    return (settings is not None and development_audit(plan, settings) is not None
            and count_given_by(plan, plan.user_conf) is None)


SIZE_KEYS = ("min_query_count", "max_query_count", "performance_sample_count_override")


def development_audit(plan: lgs.SettingsPlan, settings: Any) -> Any:
    """The settings of the performance run an audit run audits (the same user.conf and flags, no audit config),
    when that run has a development duration and the audit keeps it; else None (an official audit, or one that
    states its own duration)."""
    if plan.mode != "performance" or plan.audit_config is None:
        return None
    audited_plan = dataclasses.replace(plan, audit_config=None, not_submittable=[])
    audited = lgs.build_test_settings(audited_plan)
    duration = development_duration(audited_plan, audited)
    return audited if duration is not None and int(settings.min_duration_ms) == duration else None


def audit_counts(plan: lgs.SettingsPlan, settings: Any) -> str | None:
    """In an audit run of a development submission: the counts the audit config changed (min_query_count,
    max_query_count, performance_sample_count) set back to those of the performance run it audits; returns the
    line that says so (recorded as not submittable), or None when nothing changed."""
    audited = development_audit(plan, settings)
    if audited is None:
        return None
    changes = []
    for key in SIZE_KEYS:
        was, now = int(getattr(settings, key)), int(getattr(audited, key))
        if was != now:
            setattr(settings, key, now)
            changes.append(f"{key.removesuffix('_override')} {was:,} -> {now:,}")
    if not changes:
        return None
    message = (f"development audit run (min_duration {int(settings.min_duration_ms)} ms): sized as the performance "
               f"run it audits, not by the counts of {plan.audit_config} ({', '.join(changes)}); "
               f"{OFFICIAL_AUDIT} restores the audit config's counts")
    plan.not_submittable.append(message)
    return message


OFFICIAL_AUDIT = f"the official duration (no --min-duration-ms, or --min-duration-ms {MIN_DURATION_MS})"


def size(plan: lgs.SettingsPlan, settings: Any, perf_count: int, floor: int = 1) -> dict[str, Any] | None:
    """Lower ``settings``' min_query_count (Offline) and performance sample count to what the expected rate
    needs in min_duration, ``floor`` samples at least (the burst the rate was measured on: an engine generates
    fewer side by side in about the same time, so fewer would end before min_duration); returns what changed
    (None when nothing did or the run keeps the official counts)."""
    if not applies(plan, settings):
        return None
    official_queries = int(settings.min_query_count)
    official_count = int(settings.performance_sample_count_override) or perf_count
    if plan.scenario == "Offline":
        rate = float(settings.offline_expected_qps)
        # LoadGen's own count at this rate (truncated as it truncates), the floor at least
        needed = max(floor, int(estimate.OFFLINE_SLACK * int(settings.min_duration_ms) / 1000.0 * rate))
        queries = min(official_queries, needed)
    else:
        queries = official_queries  # Server and the streams: min_duration and early stopping size them
        needed = estimate.estimate_run(settings).samples
    count = min(official_count, max(1, needed))
    if int(settings.performance_issue_same):  # TEST04 issues one loaded sample over and over: it must be loaded
        count = min(official_count, max(count, int(settings.performance_issue_same_index) + 1))
    if queries == official_queries and count == official_count:
        return None
    settings.min_query_count = queries
    settings.performance_sample_count_override = count
    what = "samples" if plan.scenario == "Offline" else "queries"
    flag = f"--min-query-count {official_queries}" if queries != official_queries else (
        f"--performance-sample-count {official_count}")
    run = "development run"
    if plan.audit_config is not None:  # the flags size its performance run; the official duration both
        flag, run = OFFICIAL_AUDIT, "development audit run, sized as the performance run it audits"
    message = (f"{run} (min_duration {int(settings.min_duration_ms)} ms): sized from the expected "
               f"rate to {needed:,} {what}")
    changes = []
    if queries != official_queries:
        changes.append(f"min_query_count {official_queries:,} -> {queries:,}")
    if count != official_count:
        changes.append(f"performance_sample_count {official_count:,} -> {count:,}")
    message += f" ({', '.join(changes)}); {flag} restores the official count"
    plan.not_submittable.append(message)
    return {"min_query_count": [official_queries, queries],
            "performance_sample_count": [official_count, count], "restore": flag, "message": message}


def short_count_note(plan: lgs.SettingsPlan, settings: Any, stated: str | None) -> str | None:
    """The line a Server performance run prints when the min_query_count its user stated (``stated``: where)
    leaves fewer queries than a run sized for early stopping issues; the reason is recorded as not submittable."""
    if stated is None or plan.scenario != "Server" or plan.mode != "performance":
        return None
    count = int(settings.min_query_count)
    queries = max(count, math.ceil(int(settings.min_duration_ms) / 1000.0 * float(settings.server_target_qps)))
    if queries >= estimate.EARLY_STOPPING_QUERIES:
        return None
    verdict = ("LoadGen will call the run INVALID for early stopping alone"
               if queries < estimate.EARLY_STOPPING_NONE_OVER else "early stopping accepts it only if no query is "
               "over the bound")
    message = (f"development shortcut: min_query_count {count} from {stated} is kept; the run issues about "
               f"{queries} queries, fewer than the {estimate.EARLY_STOPPING_QUERIES} a Server run is sized with for "
               f"early stopping ({estimate.EARLY_STOPPING_NONE_OVER} accept the 99th percentile when none is over "
               f"the bound, {estimate.EARLY_STOPPING_ONE_OVER} when one is): {verdict}; not submittable")
    plan.not_submittable.append(f"min_query_count {count} from {stated} leaves about {queries} queries, fewer than "
                                "early stopping needs (a development shortcut)")
    return message


__all__ = ["OFFICIAL_AUDIT", "SIZE_KEYS", "applies", "audit_counts", "development_audit", "development_duration",
           "short_count_note", "size"]


def tell(result: dict[str, Any], asked: Any, plan: lgs.SettingsPlan, settings: Any, perf_count: int, floor: int,
         sizing: bool = True) -> dict[str, Any]:
    """A calibration's ``result`` with what this module adds, each told to the user: how a development run was
    sized from the expected rate (:func:`size`, where ``sizing``), and what a stated count too small for early
    stopping means (:func:`short_count_note`)."""
    sized = size(plan, settings, perf_count, floor=floor) if sizing else None
    if sized is not None:
        result["development_sizing"] = sized
        asked.tell(sized["message"])
    note = short_count_note(plan, settings, count_given_by(plan, asked.user_conf))
    if note:
        result["short_count"] = note
        asked.tell(note)
    return result
