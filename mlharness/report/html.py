"""The report as one self-contained HTML page: inline CSS, figures as inline SVG, no script, no external
resource (it opens offline and from an e-mail attachment alike).

Wide tables sit in a scroll container whose edges cast a shadow while columns are hidden on that side (a CSS-only
cue: the shadows are backgrounds that scroll away with the content), with an always-drawn scroll bar and the
first column kept in view."""

from __future__ import annotations

from html import escape

from mlharness.kinds.registry import report_sections
from mlharness.report import glance, plots, plots_sweep, plots_time, sweep
from mlharness.report.render import (
    COMPARE_COLUMNS,
    TOKEN_COLUMNS,
    VERDICT_COLUMNS,
    Report,
    compare_rows,
    host_lines,
    shared_notes,
    telemetry_lines,
    token_rows,
    verdict_rows,
)
from mlharness.telemetry.breakdown import summary_lines

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em 2em; color: #222;
       max-width: 100%; }
h1 { margin-top: 0; }
.scroll { overflow-x: auto; max-width: 100%; margin: 0.5em 0 0.3em; border: 1px solid #ccc;
  background: linear-gradient(to right, #fff 30%, rgba(255,255,255,0)) left center / 40px 100% no-repeat local,
    linear-gradient(to left, #fff 30%, rgba(255,255,255,0)) right center / 40px 100% no-repeat local,
    radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.3), rgba(0,0,0,0)) left center / 14px 100% no-repeat scroll,
    radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.3), rgba(0,0,0,0)) right center / 14px 100% no-repeat
    scroll; }
.scroll::-webkit-scrollbar { height: 12px; }
.scroll::-webkit-scrollbar-track { background: #eee; }
.scroll::-webkit-scrollbar-thumb { background: #888; border-radius: 6px; }
.hint { font-size: 0.8em; color: #666; margin: 0 0 1.5em; }
table { border-collapse: separate; border-spacing: 0; font-size: 0.85em; }
th, td { border-right: 1px solid #ddd; border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left;
         vertical-align: top; }
th { background: #f0f0f0; white-space: nowrap; }
thead th { white-space: normal; min-width: 3.5em; }  /* "TTFT p99 (ms)" over two lines: columns stay narrow */
th:first-child, td:first-child { position: sticky; left: 0; z-index: 1; background: #fff;
  box-shadow: 2px 0 3px rgba(0,0,0,.12); min-width: 6em; max-width: 22em; }
th:first-child { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.long { min-width: 11em; max-width: 30em; }
.VALID, .PASS { color: #17702b; font-weight: 600; }
.INVALID, .MISSED, .FAIL { color: #b3261e; font-weight: 600; }
tr.failed td:first-child { border-left: 4px solid #b3261e; }
ul.facts { background: #f7f7f7; padding: 0.6em 1em 0.6em 2em; border: 1px solid #e3e3e3; }
section.run { border-top: 1px solid #ddd; margin-top: 1em; }
h2, h3 { overflow-wrap: anywhere; }
figure { margin: 1em 0; max-width: 100%; }
figure svg { max-width: 100%; height: auto; }
code { background: #f5f5f5; padding: 0 0.2em; overflow-wrap: anywhere; }
table.glance { width: 100%; }
table.glance td.lat { font-variant-numeric: tabular-nums; min-width: 7em; }
table.glance td.acc { min-width: 10em; }
.sub { display: block; font-size: 0.85em; color: #666; white-space: normal; }
td.more details > summary { cursor: pointer; color: #1f4e9c; white-space: nowrap; }
td.more dl { display: grid; grid-template-columns: max-content minmax(10em, 24em); gap: 0.1em 0.8em; margin: 0.3em 0; }
details:not([open]) > :not(summary) { display: none; }
td.more dt { color: #555; }
td.more dd { margin: 0; overflow-wrap: anywhere; }
td.more ul { margin: 0.3em 0; padding-left: 1.2em; max-width: 34em; }
section.group { margin-top: 1.2em; }
.figs { display: flex; flex-wrap: wrap; gap: 0 1.5em; align-items: flex-start; }
.figs figure { flex: 0 1 calc(50% - 0.75em); min-width: 440px; margin: 0.5em 0; }
"""
NUMERIC = {"batch", "value", "p50 (ms)", "p90 (ms)", "p99 (ms)", "other value", "other / this", "other p99 (ms)",
           "p99 other / this", "offered", "repeat", "throughput", "TTFT p99 (ms)", "TPOT p99 (ms)", "tokens/s",
           "tokens/s/user", "goodput (samples/s)", "TTFT p50 (ms)", "TTFT p90 (ms)", "TPOT p50 (ms)", "TPOT p90 (ms)",
           "TTFT limit (ms)", "TPOT limit (ms)", "sessions/s", "turns/s", "session p50 (ms)", "session p90 (ms)",
           "session p99 (ms)", "goodput (sessions/s)"}
# the sweep table's columns behind each point's "more" toggle: the rest fit a 1280 px window
SWEEP_MORE = ("repeat", "p50 (ms)", "tokens/s", "tokens/s/user", "run", "session p50 (ms)")
LONG = {"compliance", "numbers", "why INVALID", "target", "result", "accuracy"}


def _class(column: str, value: str) -> str:
    if column in NUMERIC:
        return "num"
    if column in ("result", "verdict", "compliance"):
        if "FAIL" in value or "INVALID" in value or "UNKNOWN" in value:
            return "FAIL long" if column != "verdict" else "FAIL"
        if value.startswith("VALID") or "PASS" in value:
            return "VALID"
    if column == "target" and "MISSED" in value:
        return "MISSED long"
    return "long" if column in LONG else ""


def _table(columns: tuple[str, ...], rows: list[list[str]], failed: list[bool] | None = None,
           hidden: tuple[str, ...] = ()) -> str:
    """A table; the ``hidden`` columns go behind a "more" toggle at the end of each row, and a column empty in
    every row is left out."""
    keep = [i for i, c in enumerate(columns) if i == 0 or any(r[i] for r in rows)]
    more = [i for i in keep if columns[i] in hidden]
    shown_cols = [i for i in keep if i not in more]
    head = "".join(f"<th>{escape(columns[i])}</th>" for i in shown_cols) + ("<th>details</th>" if more else "")
    body = []
    for i, r in enumerate(rows):
        cells = []
        for j in shown_cols:
            c, v = columns[j], r[j]
            cls = _class(c, v)
            text = escape(v).replace("/", "/<wbr>") if j == 0 else escape(v)  # paths wrap at a /
            cells.append(f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>")
        if more:
            items = "".join(f"<dt>{escape(columns[j])}</dt><dd>{escape(r[j])}</dd>" for j in more if r[j])
            cells.append(f'<td class="more"><details><summary>more</summary><dl>{items}</dl></details></td>'
                         if items else '<td class="more"></td>')
        tr = '<tr class="failed">' if failed and failed[i] else "<tr>"
        body.append(tr + "".join(cells) + "</tr>")
    hint = ('<p class="hint">A table wider than the window scrolls sideways (a shadow marks the side with hidden '
            "columns); its first column stays in place.</p>" if len(shown_cols) > 7 else '<p class="hint"></p>')
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f"</div>{hint}")


def _figure(svg: str | None, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>" if svg else ""


def _list(items: list[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<ul{attr}>" + "".join(f"<li>{escape(x)}</li>" for x in items) + "</ul>" if items else ""


def _layers(report: Report, rel: str, top: int) -> str:
    b = report.layers.get(rel)
    if b is None:
        return ""
    cols = ("operator", "count", "total (ms)", "mean (us)", "share")
    out = []
    for title, rows in (("Operators by type", b.by_type), ("Operators by layer (type and input shapes)",
                                                           b.by_layer)):
        data = [[r.key, str(r.count), f"{r.total_us / 1000:,.3f}", f"{r.mean_us:,.1f}", f"{100 * r.share:.1f}%"]
                for r in rows[:top]]
        out.append(f"<h4>{escape(title)}</h4>" + _table(cols, data))
    out.append(_list(summary_lines(b)))
    return "".join(out)


def _sweep(report: Report) -> list[str]:
    s = report.sweep
    if s is None:
        return []
    figures = [
        _figure(plots_sweep.latency_vs_throughput(s), "Latency percentiles against throughput of each sweep "
                "point: green circles VALID, red crosses INVALID, the blue ring the knee."),
        _figure(plots_sweep.tokens_per_user(s), "Tokens/s per user against tokens/s; the dashed line is the "
                "Pareto front (no other point is better on both)."),
        _figure(plots_sweep.goodput_vs_load(s), "Goodput (completions within the SLO per second) and "
                "throughput against the offered load."),
    ]
    return [f"<h2>Sweep <code>{escape(str(s.path))}</code></h2>", _list(sweep.facts(s), "facts"),
            _table(sweep.columns(s), sweep.rows(s), [not p.get("valid") for p in s.points], SWEEP_MORE), *figures]


def _groups(report: Report) -> list[str]:
    """The figures of the runs, one section per (benchmark, scenario): no figure puts runs of different models
    or scenarios on one axis (their numbers share no scale, and an Offline latency is no response time)."""
    groups: dict[tuple[str, str], list] = {}
    for r in report.runs:
        groups.setdefault((r.benchmark, r.scenario or ""), []).append(r)
    out = []
    for (bench, scenario), runs in groups.items():
        rels = {r.rel for r in runs}
        name = f"{bench} {scenario}".strip()
        stages = {k: v for k, v in report.stages.items() if k in rels}
        rates = {k: v for k, v in report.rates.items() if k in rels}
        figures = [
            _figure(plots.throughput_of_runs(runs), f"{name}: the result of each Offline performance run. No "
                    "latency percentiles: an Offline latency is the time into the one query, not a response time."),
            _figure(plots.latency_percentiles(runs), f"{name}: latency percentiles of each performance run "
                    "(log scale)."),
            _figure(plots.throughput_vs_batch(runs), f"{name}: throughput of runs that differ in batch size."),
            _figure(plots_time.token_distributions(runs), f"{name}: time to first token and time per output "
                    "token of each run: the fraction of samples at or under each latency."),
            _figure(plots_time.throughput_over_time(rates, name), f"{name}: throughput over time of each traced "
                    "run, from the completions in its mlharness_trace.json."),
            _figure(plots.stage_breakdown(stages, name), f"{name}: time per stage of the timed path, from each "
                    "run's mlharness_trace.json."),
            _figure(plots.gpu_utilisation(runs), f"{name}: GPU utilisation sampled through NVML during each run."),
            _figure(plots.cpu_utilisation(runs), f"{name}: CPU utilisation of the harness process during each run."),
        ]
        if any(figures):
            out.append(f'<section class="group" data-benchmark="{escape(bench)}" data-scenario="{escape(scenario)}">'
                       f'<h3>{escape(name)}</h3><div class="figs">{"".join(figures)}</div></section>')
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def render(report: Report, top_layers: int = 10) -> str:
    runs = report.runs
    parts = [f"<h1>mlharness report</h1><p><code>{escape(str(report.root))}</code>: {_count(len(runs), 'run')}, "
             f"{_count(len(report.verdicts), 'compliance verdict')}. Latencies in milliseconds, from LoadGen's "
             "summaries.</p>", _list(host_lines(report), "facts")]
    parts += _sweep(report)
    common, own = shared_notes(runs)
    if runs:
        every = "".join(f"<p>{escape(who)}:</p>" + _list(xs, "facts") for who, xs in common)
        parts.append("<h2>Runs</h2>" + every + glance.table(
            runs, [r.result == "INVALID" or any(v.passed is not True for v in r.verdicts) for r in runs]))
    if report.verdicts:
        vrows = verdict_rows(report)
        parts.append("<h2>Compliance</h2>" + _table(VERDICT_COLUMNS, vrows, [v[4] != "PASS" for v in vrows]))
    tokens = token_rows(report)
    if tokens:
        parts.append("<h2>Token latencies</h2>" + _table(TOKEN_COLUMNS, tokens))
    if report.skipped:
        parts.append(f"<p>Left out: {len(report.skipped)} failed or partial run folders.</p>")
    for section in report_sections():  # each data kind's own (sessions' turns, a pipeline's stages)
        parts += section(runs, _figure, _table)
    groups = _groups(report)
    if groups:
        parts.append("<h2>Figures</h2><p>One section per benchmark and scenario.</p>" + "".join(groups))
    for r in runs:
        items, tel, layers = own[r.rel], telemetry_lines(r), _layers(report, r.rel, top_layers)
        if not (items or tel or layers):
            continue
        block = [f'<section class="run"><h3>{escape(r.rel)}</h3>', _list(items)]
        if tel:
            block.append("<h4>Telemetry</h4>" + _list(tel))
        block.append(layers + "</section>")
        parts.append("".join(block))
    if report.other is not None:
        rows, only_a, only_b = compare_rows(report)
        parts.append(f"<h2>Compared with <code>{escape(str(report.other.root))}</code></h2>"
                     + _table(COMPARE_COLUMNS, rows))
        missing = [f"only in {report.root}: {r.rel}" for r in only_a]
        missing += [f"only in {report.other.root}: {r.rel}" for r in only_b]
        parts.append(_list(missing))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\">"  # no favicon request: nothing leaves the page
            f"<title>mlharness report</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")
