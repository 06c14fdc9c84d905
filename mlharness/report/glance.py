"""The runs table of the HTML page as a reader scans it: per run the benchmark, scenario, result, primary metric
with its unit, p99 against its bound, accuracy under its metric's own name with its direction, and whether it
is submittable, narrow enough for a 1280 px window. Every other column of the report (test, mode, batch,
compliance, target, p50/p90/p99, LoadGen's metric name) and every note of the run (also those the page says
once for several runs) sit behind a ``<details>`` toggle at the end of the row: plain HTML, no script."""

from __future__ import annotations

from html import escape

from mlharness.report.collect import Run
from mlharness.report.render import COLUMNS, notes, p99_cell, row

GLANCE = ("run", "benchmark", "scenario", "result", "metric", "p99 vs bound", "accuracy", "submittable", "details")
_SHOWN = {"run", "benchmark", "scenario", "result", "value", "accuracy", "submittable"}


def _result(r: Run, cells: dict[str, str]) -> tuple[str, str]:
    text = cells["result"] or ("accuracy run" if r.mode == "accuracy" else "")
    if "FAIL" in text or "INVALID" in text or "UNKNOWN" in text:
        return text, "FAIL"
    return text, "VALID" if text.startswith("VALID") else ""


def _submittable(cells: dict[str, str]) -> tuple[str, str]:
    text = cells["submittable"]
    return text, "VALID" if text == "yes" else ("FAIL" if text.startswith("no") else "")


def _td(text: str, cls: str = "", raw: bool = False) -> str:
    body = text if raw else escape(text)
    return f'<td class="{cls}">{body}</td>' if cls else f"<td>{body}</td>"


def _details(cells: dict[str, str], run_notes: list[str]) -> str:
    items = [(c, cells[c]) for c in COLUMNS if c not in _SHOWN and cells[c]]
    if not (items or run_notes):
        return ""
    dl = "".join(f"<dt>{escape(c)}</dt><dd>{escape(v)}</dd>" for c, v in items)
    lis = "".join(f"<li>{escape(x)}</li>" for x in run_notes)
    return (f"<details><summary>more</summary><dl>{dl}</dl>" + (f"<ul>{lis}</ul>" if lis else "")
            + "</details>")


def table(runs: list[Run], failed: list[bool]) -> str:
    """The runs table; each row's toggle holds all of the run's notes, those the page says once included."""
    head = "".join(f"<th>{escape(c)}</th>" for c in GLANCE)
    body = []
    for r, bad in zip(runs, failed, strict=True):
        cells = dict(zip(COLUMNS, row(r), strict=True))
        result, result_cls = _result(r, cells)
        sub, sub_cls = _submittable(cells)
        p99 = p99_cell(r)
        metric = escape(cells["value"]) + (f'<span class="sub">{escape(cells["metric"])}</span>'
                                           if cells["value"] and cells["metric"] else "")
        tds = [_td(escape(r.rel).replace("/", "/<wbr>"), raw=True), _td(cells["benchmark"]),
               _td(cells["scenario"]), _td(result, result_cls), _td(metric, "num", raw=True),
               _td(escape(p99).replace("; ", "<br>"), "lat FAIL" if "over the bound" in p99 else "lat", raw=True),
               _td(escape(cells["accuracy"]) + ('<span class="sub FAIL">target MISSED</span>'
                                                 if "MISSED" in cells["target"] else ""), "acc", raw=True),
               _td(sub, sub_cls), _td(_details(cells, notes(r)), "more", raw=True)]
        body.append(('<tr class="failed">' if bad else "<tr>") + "".join(tds) + "</tr>")
    return (f'<div class="scroll"><table class="glance"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}'
            "</tbody></table></div><p class=\"hint\">“more” opens the rest of a run's columns and all its notes."
            "</p>")
