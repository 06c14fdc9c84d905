"""How ``mlharness submission run`` sizes a scenario's performance and compliance runs.

- A user.conf given with ``--user-conf`` that states the scenario's expected performance (a tuned one) is
  used as it is.
- Otherwise the performance run calibrates the expected performance itself (:mod:`mlharness.calibration.calibrate`)
  and writes the user.conf it effectively used. Should the run still be INVALID, the fix its explanation
  names (:mod:`mlharness.calibration.explain`: a smaller expected latency, a larger expected QPS, a lower Server
  rate, more queries for early stopping) is added to that user.conf and the performance run repeated, a few
  times at most: for Server this is a search for a VALID rate by trial runs, from the calibrated one down.
- A performance run that stays INVALID stops the command before the compliance runs, with the reason.
- The compliance runs that compare performance with it (TEST01's performance half, TEST04) get the user.conf
  the performance run used, so both are sized the same; it is also the scenario's ``user.conf``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from mlharness.calibration.calibrate import EARLY_STOPPING_QUERIES
from mlharness.calibration.explain import Explanation, explain_run
from mlharness.errors import MLHarnessError
from mlharness.loadgen import settings as lgs
from mlharness.submission.layout import Tree
from mlharness.userfiles import read_optional_json

RETRIES = 2  # performance reruns with the explained fix, after a calibrated run that was INVALID
# the audits that make a performance run of their own, sized as the performance run: where its logs land
AUDIT_PERFORMANCE = {"TEST01": "TEST01/performance/run_1", "TEST04": "TEST04/performance/run_1"}
RESIZABLE = {"min duration", "min queries", "early stopping"}  # requirements a run's size meets, not its rate
CONF_NAME = "performance.user.conf"  # beside the step records: what the compliance runs are given


class PerformanceInvalid(MLHarnessError):
    """A performance run of the submission stayed INVALID; the compliance runs were not started."""

    exit_code = 5


def performance_dir(tree: Tree, ids: tuple[str, str, str]) -> Path:
    return tree.scenario_dir(*ids) / "performance" / "run_1"


def verdict(tree: Tree, ids: tuple[str, str, str], conf_model: str) -> Explanation:
    # Interactive ran as a LoadGen Server test under '<model>-interactive': its fixes are that model's Server lines
    # a run LoadGen calls INVALID for early stopping alone is VALID where the round waives it (explain.waive): the
    # record's mlharness_run.json names the round
    return explain_run(performance_dir(tree, ids), lgs.loadgen_scenario(ids[2]), lgs.conf_model_for(conf_model, ids[2]),
                       record=tree.record_dir(*ids, "performance"))


def used_conf(tree: Tree, ids: tuple[str, str, str]) -> Path | None:
    """The user.conf the performance run wrote beside its logs (calibrated runs only), kept where the
    compliance runs can read it: ``.mlharness/runs/<system>/<benchmark>/<scenario>/performance.user.conf``."""
    record = tree.record_dir(*ids, "performance")
    written = record / "user.conf"
    if written.is_file():
        return keep(tree, ids, written)
    try:  # a run repeated with the fix (its user.conf was given, so it wrote none): the one it was given
        argv = read_optional_json(record / "step.json", "step record")["argv"]
        given = Path(argv[argv.index("--user-conf") + 1])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError):
        return None
    return keep(tree, ids, given) if given.parent == record.parent and given.is_file() else None


def keep(tree: Tree, ids: tuple[str, str, str], conf: Path) -> Path:
    kept = tree.record_dir(*ids, "performance").parent / CONF_NAME
    if conf.resolve() != kept.resolve():
        shutil.copyfile(conf, kept)
    return kept


def with_fixes(conf: Path, exp: Explanation, attempt: int, tag: str = "") -> Path:
    """A copy of ``conf`` with the explanation's user.conf lines appended (later lines win in LoadGen)."""
    lines = [f.conf_line.split("   (")[0] for f in exp.fixes]
    text = lgs.read_conf(conf, "user.conf")
    lines += early_stopping_floor(text, lines)
    out = conf.with_name(f"{conf.stem}{'.' + tag if tag else ''}.retry{attempt}.conf")
    out.write_text(text + f"\n# INVALID run, retry {attempt}: {', '.join(exp.failed)} not met\n"
                   + "\n".join(lines) + "\n")
    return out


def audit_verdict(tree: Tree, ids: tuple[str, str, str], test: str, conf_model: str) -> Explanation:
    """The verdict on an audit's own performance run (TEST01's and TEST04's ``performance/run_1``)."""
    return explain_run(tree.scenario_dir(*ids) / AUDIT_PERFORMANCE[test], lgs.loadgen_scenario(ids[2]),
                       lgs.conf_model_for(conf_model, ids[2]), record=tree.record_dir(*ids, test))


def audit_resizable(exp: Explanation, scenario: str) -> bool:
    """An audit's performance run INVALID for its size alone (an Offline query that ended before min_duration on
    a host faster than when the performance run was calibrated, too few queries for early stopping), with a fix
    that sizes the run without changing the rate it is compared at: a Server fix that lowers or raises
    target_qps would make TEST01 and TEST04 compare the performance run with a run at another rate."""
    if exp.valid or not exp.fixes or not set(exp.failed) <= RESIZABLE:
        return False
    return lgs.loadgen_scenario(scenario) != "Server" or all("--target-qps" not in f.flag for f in exp.fixes)


def resize_audit(tree: Tree, ids: tuple[str, str, str], test: str, conf_model: str, conf: Path,
                 rerun: Callable[[Path], None], say: Callable[[str], None]) -> None:
    """After an audit with a performance run of its own, sized by the performance run's calibrated user.conf: a
    run INVALID for its size alone (:func:`audit_resizable`) is repeated with the explained fix added to a copy
    of that user.conf, a few times at most, as the performance run is."""
    if test not in AUDIT_PERFORMANCE:
        return
    exp, tries = audit_verdict(tree, ids, test, conf_model), 1
    while audit_resizable(exp, ids[2]) and tries <= RETRIES:
        conf = with_fixes(conf, exp, tries, tag=test)
        say(f"{'/'.join(ids[1:])} {test} performance INVALID ({', '.join(exp.failed)} not met): again with "
            f"{', '.join(f.flag for f in exp.fixes)}")
        rerun(conf)
        exp, tries = audit_verdict(tree, ids, test, conf_model), tries + 1


def early_stopping_floor(conf_text: str, lines: list[str]) -> list[str]:
    """A Server rate lowered by a fix leaves fewer queries in ``min_duration``: the min_query_count line that keeps
    enough of them for early stopping to accept the run (none when the conf already asks for as many)."""
    models = [m.group(1) for line in lines if (m := re.match(r"^(\S+)\.Server\.target_qps\s*=", line))]
    if not models:
        return []
    stated = [int(v) for v in re.findall(rf"^(?:{re.escape(models[0])}|\*)\.(?:Server|\*)\.min_query_count\s*=\s*"
                                         r"(\d+)", conf_text + "\n" + "\n".join(lines), re.M)]
    if stated and max(stated) >= EARLY_STOPPING_QUERIES:
        return []
    return [f"{models[0]}.Server.min_query_count = {EARLY_STOPPING_QUERIES}"]


def invalid_message(ids: tuple[str, str, str], exp: Explanation, tries: int) -> str:
    detail = "; ".join(exp.lines()) or "LoadGen gave no reason"
    # `mlharness tune` searches LoadGen scenarios; Interactive has only the user.conf route
    tune = "" if ids[2] == lgs.INTERACTIVE else f" or find the settings with `mlharness tune --scenario {ids[2]}`"
    return (f"{'/'.join(ids)}: the performance run is INVALID after {tries} attempt(s), so the compliance runs "
            f"were not started. {detail}. Give the fix with --user-conf (a user.conf line){tune}.")


# the development overrides of `mlharness run`; the effective user.conf holds them as lines
SETTING_FLAGS = ("--min-duration-ms", "--min-query-count", "--max-query-count", "--target-qps", "--target-latency-ms",
                 "--samples-per-query", "--performance-sample-count")


def set_user_conf(argv: list[str], conf: Path) -> list[str]:
    """``argv`` with ``--user-conf conf`` (replacing any earlier one) and without the LoadGen setting flags:
    ``conf`` is an effective user.conf that states them, and a flag would override its later lines (a
    calibrated ``min_query_count``, a retry's fix)."""
    out = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in SETTING_FLAGS:
            skip = True
        else:
            out.append(arg)
    if "--user-conf" in out:
        out[out.index("--user-conf") + 1] = str(conf)
    else:
        out[out.index("--scenario") + 2:out.index("--scenario") + 2] = ["--user-conf", str(conf)]
    return out


__all__ = ["PerformanceInvalid", "audit_resizable", "audit_verdict", "early_stopping_floor", "resize_audit", "invalid_message", "keep", "set_user_conf", "used_conf",
           "verdict", "with_fixes"]
