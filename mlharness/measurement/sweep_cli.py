"""The terminal side of ``mlharness sweep``: options to a :class:`SweepConfig`, a table per point, the summary."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from mlharness.measurement.goodput import parse_slos
from mlharness.measurement.sweep import SweepConfig, sweep
from mlharness.measurement.sweep_plan import parse_values


def config(args: argparse.Namespace, say: Callable[[str], None], on_point: Callable[[dict], None]) -> SweepConfig:
    conc = bool(args.concurrency or args.min_concurrency is not None or args.max_concurrency is not None)
    if conc and (args.qps or args.min_qps is not None or args.max_qps is not None):
        raise_both()
    lo = args.min_concurrency if conc else args.min_qps
    hi = args.max_concurrency if conc else args.max_qps
    return SweepConfig(
        manifest=args.manifest, scenario=args.scenario, output=Path(args.output).absolute(),
        axis="concurrency" if conc else None,
        qps=parse_values(args.qps, False, "--qps") if args.qps else [],
        concurrency=[int(v) for v in parse_values(args.concurrency, True, "--concurrency")] if args.concurrency
        else [],
        plan=args.plan, min_value=lo, max_value=hi,
        points=args.points, slo=parse_slos(args.slo), repeats=args.repeats, seconds=args.seconds,
        queries=args.queries, dataset_path=args.dataset_path, count=args.count, resume=args.resume, progress=say,
        on_point=on_point)


def raise_both() -> None:
    from mlharness.errors import MLHarnessError

    raise MLHarnessError("--qps/--min-qps/--max-qps and --concurrency/--min-concurrency/--max-concurrency are two "
                         "axes: give one")


def _pcts(d: dict[str, Any] | None) -> str:
    if not d:
        return "n/a"
    return ", ".join(f"{k} {v:,.3f}" for k, v in d.items() if v is not None and k in ("p50", "p90", "p99")) + " ms"


def point_table(p: dict[str, Any]) -> Table:
    table = Table(title=f"{p['label']} ({p['dir']})", show_header=False, title_justify="left")
    table.add_row("result", "[green]VALID[/]" if p["valid"] else
                  f"[red]INVALID[/] ({escape('; '.join(p['invalid_reasons']))})")
    table.add_row("throughput", f"{p['throughput']:,.2f} samples/s" if p["throughput"] is not None else "n/a")
    if p.get("tokens_per_s") is not None:
        per_user = p.get("tokens_per_s_per_user")
        table.add_row("tokens/s", f"{p['tokens_per_s']:,.2f}" + (f" ({per_user:,.2f} per user)" if per_user else ""))
    table.add_row("latency", _pcts(p.get("latency_ms")))
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        if p.get(key):
            table.add_row(name, _pcts(p[key]))
    if p.get("goodput") is not None:
        table.add_row("goodput", f"{p['goodput']:,.2f} samples/s ({p['good_samples']}/{p['samples']} samples "
                      f"met every SLO)")
    return table


def _median(agg: dict[str, Any], key: str) -> str:
    return "n/a" if not agg.get(key) else f"{agg[key]['median']:,.2f}"


def run_sweep(args: argparse.Namespace, out: Any, say: Callable[[str], None]) -> int:
    cfg = config(args, say, lambda p: out.print(point_table(p)))
    state = sweep(cfg)
    unit = "QPS" if state["axis"] == "target_qps" else "requests in flight"
    summary = Table("value", "runs", "throughput (median)", "p99 ms (median)", "goodput (median)", "valid",
                    title=f"sweep over {unit}: {escape(str(cfg.output))}/sweep.json", title_justify="left")
    for a in state["aggregates"]:
        summary.add_row(f"{a['value']:g}", str(a["repeats"]), _median(a, "throughput"), _median(a, "latency_p99_ms"),
                        _median(a, "goodput"), "VALID" if a["valid"] else "INVALID")
    out.print(summary)
    knee = state["knee"]
    out.print(f"knee: {knee['value']:g} {unit} ({escape(knee['reason'])})" if knee else "knee: not reached")
    out.print(f"highest VALID: {state['max_valid']:g} {unit}" if state["max_valid"] is not None
              else "highest VALID: none of the runs was VALID")
    return 0
