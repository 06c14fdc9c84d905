"""The report as one self-contained HTML page: inline CSS, figures as inline SVG, no script, no external
resource (it opens offline and from an e-mail attachment alike)."""

from __future__ import annotations

from html import escape

from mlharness.report import plots
from mlharness.report.render import (
    COLUMNS,
    COMPARE_COLUMNS,
    Report,
    compare_rows,
    notes,
    row,
    telemetry_lines,
)
from mlharness.telemetry.breakdown import summary_lines

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.VALID { color: #17702b; font-weight: 600; }
.INVALID, .MISSED { color: #b3261e; font-weight: 600; }
section.run { border-top: 1px solid #ddd; margin-top: 1em; }
figure { margin: 1em 0; }
figure svg { max-width: 100%; height: auto; }
code { background: #f5f5f5; padding: 0 0.2em; }
"""
NUMERIC = {"batch", "value", "p50 (ns)", "p90 (ns)", "p99 (ns)", "other value", "other / this",
           "other p99 (ns)", "p99 other / this"}


def _table(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c, v in zip(columns, r, strict=True):
            cls = "num" if c in NUMERIC else (v if v in ("VALID", "INVALID") else "")
            if c == "target" and "MISSED" in v:
                cls = "MISSED"
            cells.append(f'<td class="{cls}">{escape(v)}</td>' if cls else f"<td>{escape(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(svg: str | None, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>" if svg else ""


def _layers(report: Report, rel: str, top: int) -> str:
    b = report.layers.get(rel)
    if b is None:
        return ""
    cols = ("operator", "count", "total (ms)", "mean (us)", "share")
    out = []
    for title, rows in (("Operators by type", b.by_type), ("Operators by layer (type and input shapes)",
                                                           b.by_layer)):
        data = [[r.key, str(r.count), f"{r.total_us / 1000:.3f}", f"{r.mean_us:.1f}", f"{100 * r.share:.1f}%"]
                for r in rows[:top]]
        out.append(f"<h4>{escape(title)}</h4>" + _table(cols, data))
    out.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in summary_lines(b)) + "</ul>")
    return "".join(out)


def render(report: Report, top_layers: int = 10) -> str:
    runs = report.runs
    parts = [f"<h1>mlharness report</h1><p><code>{escape(str(report.root))}</code>: {len(runs)} runs. Values "
             "are LoadGen's summaries verbatim (latencies in nanoseconds).</p>",
             _table(COLUMNS, [row(r) for r in runs])]
    if report.skipped:
        parts.append(f"<p>Left out: {len(report.skipped)} failed or partial run folders.</p>")
    figures = [
        _figure(plots.latency_percentiles(runs), "Latency percentiles of each performance run (log scale)."),
        _figure(plots.throughput_vs_batch(runs), "Throughput of runs of one benchmark and scenario that "
                                                 "differ in batch size."),
        _figure(plots.stage_breakdown(report.stages), "Time per stage of the timed path, from each run's "
                                                      "mlharness_trace.json."),
        _figure(plots.gpu_utilisation(runs), "GPU utilisation sampled through NVML during each run."),
        _figure(plots.cpu_utilisation(runs), "CPU utilisation of the harness process during each run."),
    ]
    if any(figures):
        parts.append("<h2>Figures</h2>" + "".join(figures))
    for r in runs:
        items = notes(r)
        tel = telemetry_lines(r)
        layers = _layers(report, r.rel, top_layers)
        if not (items or tel or layers):
            continue
        block = [f'<section class="run"><h3>{escape(r.rel)}</h3>']
        if items:
            block.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in items) + "</ul>")
        if tel:
            block.append("<h4>Telemetry</h4><ul>" + "".join(f"<li>{escape(x)}</li>" for x in tel) + "</ul>")
        block.append(layers + "</section>")
        parts.append("".join(block))
    if report.other is not None:
        rows, only_a, only_b = compare_rows(report)
        parts.append(f"<h2>Compared with <code>{escape(str(report.other.root))}</code></h2>"
                     + _table(COMPARE_COLUMNS, rows))
        missing = [f"only in {report.root}: {r.rel}" for r in only_a]
        missing += [f"only in {report.other.root}: {r.rel}" for r in only_b]
        if missing:
            parts.append("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in missing) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\">"  # no favicon request: nothing leaves the page
            f"<title>mlharness report</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")
