"""What ``mlharness compare`` shows, shared by the terminal table and the HTML page: one row per metric of a
pair, with the sign of the difference, the ratio B / A, the better side and the spread verdict."""

from __future__ import annotations

from collections import Counter
from typing import Any

from mlharness.measurement.compare import Comparison, MetricDelta, Pair, Side, fmt
from mlharness.report.collect import Run

COLUMNS = ("metric", "A", "B", "delta (B - A)", "B / A", "better", "spread")


def side_cell(s: Side) -> str:
    if len(s.values) == 1:
        return fmt(s.values[0])
    return f"{fmt(s.median)} [{fmt(s.low)}, {fmt(s.high)}] n={len(s.values)}"


def metric_label(m: MetricDelta) -> str:
    unit = f" ({m.unit})" if m.unit and f"({m.unit})" not in m.name else ""
    return f"{m.name}{unit}, {'higher' if m.higher_is_better else 'lower'} is better"


def row(m: MetricDelta) -> list[str]:
    d = m.delta
    delta = ("+" if d > 0 else "") + fmt(d)
    ratio = "" if m.ratio is None else f"{m.ratio:.4f}"
    better = {"a": "A", "b": "B"}.get(m.better, "same")
    spread = m.verdict + (f" (Welch p={m.p_value:.3g})" if m.p_value is not None else "")
    return [metric_label(m), side_cell(m.a), side_cell(m.b), delta, ratio, better, spread]


def title(c: Comparison, p: Pair) -> str:
    """The pair's benchmark, scenario and mode, and its runs (relative to A and B; the side itself when the
    side is a run folder)."""
    names = p.a.label if p.a.benchmark == p.b.benchmark else f"{p.a.label} / {p.b.benchmark}"
    a = ", ".join(str(c.a) if r == "." else r for r in p.a.rels)
    b = ", ".join(str(c.b) if r == "." else r for r in p.b.rels)
    text = f"{names}: A {a} vs B {b}"
    if p.a.mode == "performance":
        text += f" (A {results(p.a.runs)}; B {results(p.b.runs)})"
    return text


def results(runs: list[Run]) -> str:
    """LoadGen's verdicts of a side's runs: "VALID", or counts such as "2 VALID, 1 INVALID"."""
    counts = Counter(r.result or "no result" for r in runs)
    if len(runs) == 1:
        return next(iter(counts))
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda x: -x[1]))


def unpaired(c: Comparison) -> list[str]:
    out = [f"only in A ({c.a}): {g.label}: {', '.join(g.rels)}" for g in c.only_a]
    return out + [f"only in B ({c.b}): {g.label}: {', '.join(g.rels)}" for g in c.only_b]


def print_terminal(c: Comparison, console: Any) -> None:
    from rich.markup import escape as markup_escape
    from rich.table import Table

    from mlharness.report.treefiles import printable

    def escape(text: str) -> str:  # values from the trees: no markup, no control characters
        return markup_escape(printable(text))

    faster = c.faster
    style = "bold green" if faster else "bold"
    console.print(f"[{style}]{escape(c.headline())}[/]", highlight=False)
    console.print(f"A = {escape(str(c.a))}, B = {escape(str(c.b))}; delta = B - A, ratio = B / A (of the "
                  "medians where there are repeats)", highlight=False)
    for p in c.pairs:
        table = Table(*COLUMNS, title=escape(title(c, p)), title_justify="left")
        for m in p.metrics:
            cells = [escape(x) for x in row(m)]
            if m.better != "same":
                cells[5] = f"[{'green' if m.better == 'b' else 'yellow'}]{cells[5]}[/]"
            table.add_row(*cells)
        console.print(table)
    for line in unpaired(c):
        console.print(escape(line), highlight=False)
