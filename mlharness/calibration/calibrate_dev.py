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
``--min-query-count`` or ``--performance-sample-count``, a compliance run (audit config) and every run at the
official duration keep mlperf.conf's figures.

A Server run is sized by min_duration and by early stopping (:data:`~mlharness.calibration.estimate.EARLY_STOPPING_QUERIES`
queries, which calibration asks for when min_duration at the calibrated rate holds fewer). The development shortcut
for a model whose rate makes those queries long (the run's estimate says so before it starts) is an explicit
``--min-query-count N``: it is always kept, and when it leaves fewer queries than early stopping needs the run says
so in one line before it starts (:func:`short_count_note`) and is recorded as not submittable.
"""

from __future__ import annotations

import math
from typing import Any

from mlharness.calibration import estimate
from mlharness.loadgen import settings as lgs
from mlharness.rounds import MIN_DURATION_MS


def applies(plan: lgs.SettingsPlan) -> bool:
    """A performance run with a development duration, no count of its own and no audit config."""
    o = plan.overrides
    return (plan.mode == "performance" and plan.audit_config is None and o.min_duration_ms is not None
            and o.min_duration_ms < MIN_DURATION_MS and o.min_query_count is None
            and o.performance_sample_count is None)


def size(plan: lgs.SettingsPlan, settings: Any, perf_count: int, floor: int = 1) -> dict[str, Any] | None:
    """Lower ``settings``' min_query_count (Offline) and performance sample count to what the expected rate
    needs in min_duration, ``floor`` samples at least (the burst the rate was measured on: an engine generates
    fewer side by side in about the same time, so fewer would end before min_duration); returns what changed
    (None when nothing did or the run keeps the official counts)."""
    if not applies(plan):
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
    if queries == official_queries and count == official_count:
        return None
    settings.min_query_count = queries
    settings.performance_sample_count_override = count
    what = "samples" if plan.scenario == "Offline" else "queries"
    flag = f"--min-query-count {official_queries}" if queries != official_queries else (
        f"--performance-sample-count {official_count}")
    message = (f"development run (min_duration {int(settings.min_duration_ms)} ms): sized from the expected "
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


__all__ = ["applies", "short_count_note", "size"]
