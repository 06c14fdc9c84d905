"""What the user stated about a run's size, as opposed to what calibration measures: the expected performance
(``--target-qps``, ``--target-latency-ms`` or a ``--user-conf`` line) and the query count (``--min-query-count``
or a ``min_query_count`` line). A stated figure is the user's: calibration neither replaces nor raises it."""

from __future__ import annotations

from pathlib import Path

from mlharness.loadgen import settings as lgs
from mlharness.paths import USER_CONF_DIR

EXPECTED_KEYS = {"Offline": "target_qps", "Server": "target_qps", "SingleStream": "target_latency",
                 "MultiStream": "target_latency"}


def given_by(scenario: str, model: str, overrides: lgs.Overrides, user_conf: Path | None) -> str | None:
    """Where this run's expected performance is stated: 'the command line', the user.conf given, or None
    (mlperf.conf's or the package user.conf's generic default, which calibration replaces)."""
    if scenario in ("Offline", "Server") and overrides.target_qps is not None:
        return "the command line (--target-qps)"
    if scenario in ("SingleStream", "MultiStream") and overrides.target_latency_ms is not None:
        return "the command line (--target-latency-ms)"
    # the package's own user.conf files (mlharness/user_conf/) are generic guesses, not this system's figures
    return f"{user_conf}" if conf_states(user_conf, model, scenario, EXPECTED_KEYS[scenario]) else None


def conf_states(user_conf: Path | None, model: str, scenario: str, key: str) -> bool:
    """Whether a user.conf given with --user-conf (not the package's own, generic guesses) has a ``key`` line for
    this model and scenario."""
    if user_conf is None or not Path(user_conf).is_file() or Path(user_conf).resolve().parent == USER_CONF_DIR:
        return False
    return any(k == key and m in (model, "*") and s in (scenario, "*")
               for _, m, s, k, _ in lgs.parse_conf(lgs.read_conf(Path(user_conf)), str(user_conf)))


def count_given_by(plan: lgs.SettingsPlan, user_conf: Path | None) -> str | None:
    """Where the user stated this run's min_query_count (the flag, or their user.conf), or None. A stated count is
    the user's: calibration never raises it for early stopping."""
    if plan.overrides.min_query_count is not None:
        return "--min-query-count"
    return f"{user_conf}" if conf_states(user_conf, plan.model, plan.scenario, "min_query_count") else None
