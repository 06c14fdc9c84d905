"""Why LoadGen called a performance run INVALID, and what fixes it.

LoadGen writes its verdict into ``mlperf_log_summary.txt`` (``Result is : INVALID`` followed by one line per
requirement: performance constraints (the latency bound, or TTFT/TPOT), min duration, min queries, early
stopping), its own recommendations and the early-stopping result; errors and warnings go to
``mlperf_log_detail.txt`` as ``:::MLLOG`` events whose value is the message. This module reads both and turns
them into: the requirement(s) that failed, LoadGen's recommendation(s), and the flag or user.conf line that
fixes the run, with a value computed from what the run measured. :func:`explain_run` also writes the whole next
command line (:func:`next_command`): the fixes with every flag the next run needs besides them (the rate, the query
count that early stopping needs at that rate, the duration), since a stated rate turns calibration off and with it
the raised query count.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.calibration.calibrate import EARLY_STOPPING_QUERIES, LATENCY_HEADROOM
from mlharness.loadgen.logs import read_detail
from mlharness.paths import MANIFESTS_DIR
from mlharness.rounds import early_stopping_waived, get_round
from mlharness.userfiles import read_log_text, read_optional_json

# the fix for a query that ended early: 1.75 x the rate the run reached (a measured rate, not a timed batch's)
FIX_OFFLINE_HEADROOM = 1.75

REQUIREMENTS = {  # summary line -> what it means
    "Performance constraints satisfied": "latency bound (the target latency percentile at target_qps)",
    "Min duration satisfied": "min duration",
    "Min queries satisfied": "min queries",
    "Early stopping satisfied": "early stopping",
}
_STATUS = re.compile(r"^\s*(Performance constraints satisfied|Min duration satisfied|Min queries satisfied|"
                     r"Early stopping satisfied)\s*:\s*(\S+)")
SERVER_BACKOFF = 0.5  # a Server run over its latency bound: try half the rate (mlharness tune finds the best)
SHORT_QUERY, SHORT_QUERY_FACTOR = 0.25, 3.0  # an Offline query under 25% of min_duration: expect 3x its rate
QUERY_SLACK = 1.25  # queries suggested when early stopping needed more: what it asked for, plus 25%


@dataclass
class Fix:
    flag: str  # e.g. "--target-latency-ms 0.0137"
    conf_line: str  # e.g. "mymodel.SingleStream.target_latency = 0.0137" (one line per setting)

    def text(self) -> str:
        return f"{self.flag}   (or in the user.conf: {self.conf_line.replace(chr(10), '; ')})"

    def values(self) -> dict[str, str]:
        """The flags this fix sets and their values, e.g. {"--target-qps": "120.5"}."""
        words = self.flag.split()
        return dict(zip(words[::2], words[1::2], strict=False))


@dataclass
class Explanation:
    valid: bool
    failed: list[str] = field(default_factory=list)  # requirement names that failed
    recommendations: list[str] = field(default_factory=list)  # LoadGen's own words
    fixes: list[Fix] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # LoadGen errors, as text
    warnings: list[str] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)  # token runs: the failed TTFT/TPOT p99 against its limit
    bound: list[str] = field(default_factory=list)  # Server: the latency bound and where it comes from
    command: str | None = None  # the next run's whole command line (explain_run, from the run's metadata)
    waived: str | None = None  # VALID under the round's rules though LoadGen's line reads INVALID: why (waive)

    def lines(self) -> list[str]:
        out = [self.waived] if self.valid and self.waived else []
        if not self.valid:
            out.append("INVALID because: " + (", ".join(f"{f} not met" for f in self.failed) or "(no failed "
                                                  "requirement named in the summary)"))
            out += self.bound
            out += self.measured
            out += [f"LoadGen recommends: {r}" for r in self.recommendations]
            out += [f"fix: {f.text()}" for f in self.fixes]
            if self.command:
                out.append(f"next run: {self.command}")
            out += [f"LoadGen error: {e}" for e in self.errors]
            out += [f"LoadGen warning: {w}" for w in self.warnings]
        return out


def summary_sections(text: str) -> dict[str, Any]:
    """The summary's verdict lines, recommendations, early stopping lines, and 'key : value' stats."""
    status: dict[str, bool] = {}
    recommendations: list[str] = []
    early: list[str] = []
    stats: dict[str, str] = {}
    section = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _STATUS.match(line)
        if m:
            status[m.group(1)] = m.group(2).lower() == "yes"
            continue
        stripped = line.strip()
        if stripped.startswith("Recommendations:"):
            section = "rec"
            continue
        if "Early Stopping Result:" in stripped:
            section = "early"
            continue
        if stripped.startswith("====") or not stripped:
            section = None
            continue
        target = {"rec": recommendations, "early": early}.get(section)
        if target is not None:
            if stripped.startswith("* "):
                target.append(stripped[2:].strip())
            elif target:  # a wrapped line continues the previous item
                target[-1] += " " + stripped
            continue
        if ":" in stripped:
            k, _, v = stripped.partition(":")
            stats.setdefault(k.strip(), v.strip())
    return {"status": status, "recommendations": recommendations, "early_stopping": early, "stats": stats}


def _num(stats: dict[str, str], *names: str) -> float | None:
    for name in names:
        try:
            return float(stats[name].replace(",", ""))
        except (KeyError, ValueError):
            continue
    return None


def _ms(value: float) -> str:
    return f"{value:.4g}"


def fixes_for(scenario: str, model: str, failed: list[str], sec: dict[str, Any]) -> list[Fix]:
    stats, fixes = sec["stats"], []
    conf = f"{model}.{scenario}"
    if "min duration" in failed:
        if scenario in ("SingleStream", "MultiStream"):
            mean_ns = _num(stats, "Mean latency (ns)")
            if mean_ns:
                v = _ms(LATENCY_HEADROOM * mean_ns / 1e6)
                fixes.append(Fix(f"--target-latency-ms {v}", f"{conf}.target_latency = {v}"))
        elif scenario == "Offline":
            sps = _num(stats, "Samples per second")
            if sps:
                # a query much shorter than min_duration is dominated by its start: its rate understates
                spq, min_ms = _num(stats, "samples_per_query"), _num(stats, "min_duration (ms)")
                short = bool(spq and min_ms and spq / sps < SHORT_QUERY * min_ms / 1000.0)
                v = f"{FIX_OFFLINE_HEADROOM * sps * (SHORT_QUERY_FACTOR if short else 1):.2f}"
                fixes.append(Fix(f"--target-qps {v}", f"{conf}.target_qps = {v}"))
        else:
            qps = _num(stats, "target_qps")
            if qps:
                v = f"{qps * 2:.2f}"
                fixes.append(Fix(f"--target-qps {v}", f"{conf}.target_qps = {v}"))
    latency_failed = "latency bound" in failed or any(f in ("TTFT", "TPOT") for f in failed)
    if "early stopping" in failed and not latency_failed:  # over the bound, more queries would not help
        text = " ".join(sec["early_stopping"])
        processed = _num({"n": (re.findall(r"[Pp]rocessed (?:at least )?(\d+)", text) or [""])[-1]}, "n") or 0
        more = re.search(r"at least (\d+) more queries", text)
        total = re.search(r"at least\s+(\d+) total queries", text)
        need = processed + int(more.group(1)) if more else (int(total.group(1)) if total else None)
        if need:
            n = int(need * QUERY_SLACK)
            fixes.append(Fix(f"--min-query-count {n}", f"{conf}.min_query_count = {n}"))
    if latency_failed:
        qps = _num(stats, "target_qps")
        done = _num(stats, "Completed samples per second")
        if qps and done:  # an overloaded system completes fewer than arrive: half of what it managed, not of the rate
            qps = min(qps, done)
        if qps:
            v = f"{qps * SERVER_BACKOFF:.4g}"
            flag, line = f"--target-qps {v}", f"{conf}.target_qps = {v}"
            # a rate given on the command line turns calibration off, and with it the raised min_query_count: at
            # the lower rate min_duration alone would hold too few queries for early stopping to accept the p99
            min_s = (_num(stats, "min_duration (ms)") or 0) / 1000.0
            if "latency bound" in failed and float(v) * min_s < EARLY_STOPPING_QUERIES:
                flag += f" --min-query-count {EARLY_STOPPING_QUERIES}"
                line += f"\n{conf}.min_query_count = {EARLY_STOPPING_QUERIES}"
            fixes.append(Fix(flag, f"{line}   (or find the highest VALID rate: mlharness tune --scenario {scenario})"))
    return fixes


def bound_findings(failed: list[str], stats: dict[str, str], bound: dict[str, Any] | None,
                   model: str) -> tuple[list[str], Fix | None]:
    """Server: the bound and its source; when even one sample at a time is over it, say so and which bound the
    model can meet (then no lower rate can make the run VALID)."""
    from mlharness.calibration.server_bound import derived_ms

    b = (bound or {}).get("target_latency") or {}
    limit_ns = _num(stats, "target_latency (ns)")
    limit = float(b["ms"]) if b.get("ms") else (limit_ns / 1e6 if limit_ns else None)
    if not limit:
        return [], None
    lines = [f"latency bound: p99 <= {limit:.6g} ms, from " + (b.get("source") or "the run's TestSettings "
                                                                  "(target_latency in mlperf_log_summary.txt)")]
    if "latency bound" not in failed and "early stopping" not in failed:
        return lines, None
    single, fastest = b.get("single_sample_p99_ms"), _num(stats, "Min latency (ns)")
    if single is not None and single > limit:
        slow, what = float(single), "even one sample at a time takes p99"
    elif fastest is not None and fastest / 1e6 > limit:
        slow, what = fastest / 1e6, "even the fastest query took"
    else:
        return lines, None
    z = f"{derived_ms(slow):g}"
    lines.append(f"{what} {slow:.4g} ms > the bound {limit:.6g} ms: no rate meets this bound; a bound this model "
                 f"can meet: --target-latency-ms {z}")
    return lines, Fix(f"--target-latency-ms {z}", f"{model}.Server.target_latency = {z}")


TOKEN_LIMITS = {  # failed constraint -> (summary line of its p99, summary line of its limit, what it measures)
    "TTFT": ("99.00 percentile first token latency (ns)", "ttft_latency (ns)", "time to first token"),
    "TPOT": ("99.00 percentile time to output token (ns)", "tpot_latency (ns)", "time per output token"),
}


def token_measured(failed: list[str], stats: dict[str, str]) -> list[str]:
    """For a failed TTFT/TPOT constraint: its p99 against the limit, and whether a lower rate can help at all."""
    out = []
    for name, (p99_key, limit_key, what) in TOKEN_LIMITS.items():
        p99, limit = _num(stats, p99_key), _num(stats, limit_key)
        if name not in failed or p99 is None or not limit:
            continue
        line = f"{name} ({what}) p99 {p99 / 1e6:.4g} ms over its limit {limit / 1e6:.4g} ms"
        low = _num(stats, {"TTFT": "Min First Token latency (ns)", "TPOT": "Min Time per Output Token (ns)"}[name])
        if low is not None and low > limit:
            line += ("; even the fastest sample took longer, so a lower target_qps cannot fix it: the model (or "
                     "its batch size) is too slow for this limit")
        out.append(line)
    return out


def explain(summary_text: str, events: list[dict[str, Any]], scenario: str, model: str,
            bound: dict[str, Any] | None = None) -> Explanation:
    """From the summary's text and the detail log's events (``bound``: the run metadata's latency_bound)."""
    sec = summary_sections(summary_text)
    valid = bool(re.search(r"^Result is\s*:\s*VALID", summary_text, re.M))
    failed = [REQUIREMENTS[k].split(" (")[0] for k, ok in sec["status"].items() if not ok]
    recs = list(sec["recommendations"])
    for r in recs:  # TTFT/TPOT show up only as recommendations of the performance constraints
        for token in ("TTFT", "TPOT"):
            if r.startswith(f"{token} constrain") and token not in failed:
                failed.append(token)
    if "latency bound" in failed and any(f in ("TTFT", "TPOT") for f in failed):
        failed.remove("latency bound")
    errors, warnings = [], []
    for ev in events:
        meta = ev.get("metadata") or {}
        key = str(ev.get("key", ""))
        text = str(ev.get("value", "")).strip() or key
        if meta.get("is_error") or key.startswith("error"):
            errors.append(text)
        elif meta.get("is_warning") or key.startswith("warning"):
            warnings.append(text)
    exp = Explanation(valid, failed, recs if not valid else [], errors=list(dict.fromkeys(errors)),
                      warnings=list(dict.fromkeys(warnings)))
    if not valid:
        exp.fixes = fixes_for(scenario, model, failed, sec)
        exp.measured = token_measured(failed, sec["stats"])
        if any("cannot fix it" in m for m in exp.measured):  # a lower rate would not help: do not suggest one
            exp.fixes = [f for f in exp.fixes if not f.flag.startswith("--target-qps")]
        if scenario == "Server" and not any(f in ("TTFT", "TPOT") for f in failed):
            exp.bound, fix = bound_findings(failed, sec["stats"], bound, model)
            if fix is not None:  # neither a lower rate nor more queries would help: only a larger bound
                exp.fixes = [fix]
    return exp


def explain_run(outdir: Path, scenario: str, model: str | None = None, record: Path | None = None) -> Explanation:
    """Explain the LoadGen logs in a run directory (an Interactive run is a LoadGen Server run); ``model``: the
    LoadGen model of its conf lines (None: the one its mlharness_run.json names); ``record``: where that file is,
    when not beside the logs (a submission run's record folder)."""
    scenario = "Server" if scenario == "Interactive" else scenario
    summary = Path(outdir) / "mlperf_log_summary.txt"
    detail = Path(outdir) / "mlperf_log_detail.txt"
    text = read_log_text(summary, "LoadGen summary") if summary.is_file() else ""
    md = _run_metadata(record if record is not None else outdir)
    model = model if model is not None else str(md.get("conf_model") or "")
    exp = explain(text, read_detail(detail) if detail.is_file() else [], scenario, model, md.get("latency_bound"))
    exp = waive(exp, md.get("round"), model)
    if not exp.valid and md:
        exp.command = next_command(md, scenario, exp.fixes, summary_sections(text)["stats"])
    return exp


def waive(exp: Explanation, round_name: str | None, model: str) -> Explanation:
    """mlharness's verdict under the round's rules: a run LoadGen calls INVALID for early stopping alone is VALID
    for a benchmark whose results the round's checker reads as endpoints results, which it never holds to early
    stopping (:func:`mlharness.rounds.early_stopping_waived`); it is not resized or run again. Any other unmet
    requirement (min duration, min queries, the latency bound) keeps it INVALID."""
    if exp.valid or exp.failed != ["early stopping"] or not early_stopping_waived(round_name, model):
        return exp
    name = get_round(round_name).name
    exp.valid, exp.recommendations, exp.fixes = True, [], []
    exp.waived = (f"VALID under round {name}'s rules: early stopping waived for {model} results, packaged in the "
                  "endpoints layout; LoadGen's own line reads INVALID for that reason only")
    return exp


def _run_metadata(outdir: Path) -> dict[str, Any]:
    """The run's mlharness_run.json ({} when absent or unreadable)."""
    md = read_optional_json(Path(outdir) / "mlharness_run.json", "run record")
    return md if isinstance(md, dict) else {}


_FLAG_OF = {"min_duration_ms": "--min-duration-ms", "min_query_count": "--min-query-count",
            "max_query_count": "--max-query-count", "target_qps": "--target-qps",
            "target_latency_ms": "--target-latency-ms", "samples_per_query": "--samples-per-query",
            "performance_sample_count": "--performance-sample-count"}


def next_command(md: dict[str, Any], scenario: str, fixes: list[Fix], stats: dict[str, str]) -> str | None:
    """The whole command line of the next run: this run's manifest, scenario and development flags, the fixes'
    flags over them, and for Server the rate and the query count early stopping needs at that rate, or, when the fix
    is a new latency bound for a calibrated rate, no rate, so that the next run calibrates against the new bound
    (None when no fix names a flag)."""
    flags = [f.flag for f in fixes if f.flag.startswith("--")]
    if not flags:
        return None
    given: dict[str, str] = {_FLAG_OF[k]: _plain(v) for k, v in (md.get("overrides") or {}).items() if k in _FLAG_OF}
    for fix in fixes:
        if fix.flag.startswith("--"):
            given.update(fix.values())
    if "--min-duration-ms" not in given and _num(stats, "min_duration (ms)") is not None:
        given["--min-duration-ms"] = _plain(_num(stats, "min_duration (ms)"))
    stated_rate = "--target-qps" in given
    if scenario == "Server" and not stated_rate and any(f.startswith("--target-latency-ms") for f in flags):
        # a new latency bound and a rate this run calibrated: the next run calibrates its rate against the new
        # bound (and sizes its queries for early stopping) rather than repeat a rate measured against the old one;
        # a stated count too small for early stopping would leave it INVALID, so it is not repeated
        if int(float(given.get("--min-query-count", EARLY_STOPPING_QUERIES))) < EARLY_STOPPING_QUERIES:
            given.pop("--min-query-count", None)
    elif scenario == "Server":
        qps = given.get("--target-qps") or (_plain(_num(stats, "target_qps")) if _num(stats, "target_qps") else None)
        if qps:
            given["--target-qps"] = qps
            # a stated rate turns calibration off: the count early stopping needs comes with it
            count = int(float(given.get("--min-query-count", _num(stats, "min_query_count") or 0)))
            min_s = float(given.get("--min-duration-ms", 0)) / 1000.0
            # (the summary's count may be the one calibration raised: the next run states it itself)
            if float(qps) * min_s < EARLY_STOPPING_QUERIES and not _count_fixed(fixes):
                given["--min-query-count"] = str(max(count, EARLY_STOPPING_QUERIES))
    path = Path(str((md.get("manifest") or {}).get("path") or ""))
    name = (md.get("manifest") or {}).get("name")
    manifest = name if name and path.is_relative_to(MANIFESTS_DIR) else str(path)
    words = ["mlharness", "run", "--manifest", manifest, "--scenario", str(md.get("scenario") or scenario),
             "--mode", "performance"]
    if md.get("dataset_path"):
        words += ["--dataset-path", str(md["dataset_path"])]
    if md.get("user_conf") and not Path(str(md["user_conf"])).is_relative_to(MANIFESTS_DIR.parent / "user_conf"):
        words += ["--user-conf", str(md["user_conf"])]
    for flag, value in given.items():
        words += [flag, value]
    return shlex.join(words)


def _count_fixed(fixes: list[Fix]) -> bool:
    """A fix states the query count itself (early stopping's own figure)."""
    return any("--min-query-count" in f.flag for f in fixes)


def _plain(value: Any) -> str:
    v = float(value)
    return str(int(v)) if v.is_integer() else f"{v:g}"


def error_texts(errors: list[dict[str, Any]]) -> list[str]:
    """The messages of the detail log's error events (``detail_values(...)["errors"]``), not their key names."""
    return [str(e.get("value") or e.get("key")).strip() for e in errors]


__all__ = ["Explanation", "Fix", "error_texts", "explain", "explain_run", "summary_sections", "waive"]
