"""``mlharness compare --html``: the comparison as one self-contained HTML page (inline CSS, no script, no
external resource). Wide tables scroll inside a frame whose edges shade while more lies beyond them, with the
metric column kept in view."""

from __future__ import annotations

from html import escape

from mlharness.measurement.compare import Comparison
from mlharness.measurement.compare_render import COLUMNS, row, title, unpaired

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #222; }
.headline { font-size: 1.15em; font-weight: 600; }
.headline.a, .headline.b { color: #17702b; }
.scroll { overflow-x: auto; max-width: 100%; margin: 0.5em 0 1.5em; border: 1px solid #bbb;
  background: linear-gradient(to right, #fff 30%, rgba(255,255,255,0)) left / 2em 100% no-repeat local,
              linear-gradient(to left, #fff 30%, rgba(255,255,255,0)) right / 2em 100% no-repeat local,
              radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.25), rgba(0,0,0,0)) left / 1em 100% no-repeat scroll,
              radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.25), rgba(0,0,0,0)) right / 1em 100% no-repeat
              scroll; }
.scroll::-webkit-scrollbar { height: 10px; }
.scroll::-webkit-scrollbar-thumb { background: #999; border-radius: 5px; }
table { border-collapse: collapse; font-size: 0.9em; white-space: nowrap; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
th:first-child, td:first-child { position: sticky; left: 0; background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.B { color: #17702b; font-weight: 600; }
td.A { color: #8a5a00; font-weight: 600; }
td.beyond { font-weight: 600; }
code { background: #f5f5f5; padding: 0 0.2em; }
"""
NUMERIC = {"A", "B", "delta (B - A)", "B / A"}


def _cell(column: str, value: str) -> str:
    cls = "num" if column in NUMERIC else ""
    if column == "better" and value in ("A", "B"):
        cls = value
    if column == "spread" and value.startswith("beyond"):
        cls = "beyond"
    return f'<td class="{cls}">{escape(value)}</td>' if cls else f"<td>{escape(value)}</td>"


def render(c: Comparison) -> str:
    parts = [f'<h1>mlharness compare</h1><p class="headline {c.faster or ""}">{escape(c.headline())}</p>',
             f"<p>A = <code>{escape(str(c.a))}</code>, B = <code>{escape(str(c.b))}</code>. Delta = B - A and "
             "ratio = B / A, of the medians where a side has repeats; values are LoadGen's summaries "
             "(latencies in nanoseconds). Spread: with repeats on both sides, the difference is beyond the "
             "run-to-run spread when the ranges [min, max] of the two sides do not overlap.</p>"]
    head = "".join(f"<th>{escape(col)}</th>" for col in COLUMNS)
    for p in c.pairs:
        body = "".join("<tr>" + "".join(_cell(col, v) for col, v in zip(COLUMNS, row(m), strict=True))
                       + "</tr>" for m in p.metrics)
        parts.append(f"<h2>{escape(title(c, p))}</h2><div class=\"scroll\"><table><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table></div>")
    missing = unpaired(c)
    if missing:
        parts.append("<h2>Not paired</h2><ul>" + "".join(f"<li>{escape(x)}</li>" for x in missing) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<link rel=\"icon\" href=\"data:,\">"  # no favicon request: nothing leaves the page
            f"<title>mlharness compare</title><style>{CSS}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")
