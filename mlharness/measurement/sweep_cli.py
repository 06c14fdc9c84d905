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

RUN_FIELDS = ("framework", "dataset", "device", "round", "user_conf", "max_batchsize", "server_max_wait_ms",
              "threads", "workers", "instances", "threads_per_instance", "pin_cores", "load_workers", "trace",
              "telemetry_interval_ms", "ignore_framework_version", "calibrate", "endpoints", "agents", "network",
              "agent_options")
DEFAULT_POINT_MS = 1000  # each point's min_duration without --min-duration-ms
RESULTS_ROOT = Path("results")  # the root whose evaluation database gets each point's row (when the sweep is in it)


def config(args: argparse.Namespace, say: Callable[[str], None], on_point: Callable[[dict], None]) -> SweepConfig:
    from mlharness.progress import RunProgress, output_console
    from mlharness.run.run_args import manifest_of, run_options

    err = output_console(stderr=True)

    conc = bool(args.concurrency or args.min_concurrency is not None or args.max_concurrency is not None)
    if conc and (args.qps or args.min_qps is not None or args.max_qps is not None):
        raise_both()
    lo = args.min_concurrency if conc else args.min_qps
    hi = args.max_concurrency if conc else args.max_qps
    # the shared run options every point starts from; the sweep sets each point's rate, sizing and folder
    base = run_options(args, scenario=args.scenario)
    given = {name: getattr(base, name) for name in RUN_FIELDS}
    defaults = {name: getattr(type(base)(scenario=args.scenario), name) for name in RUN_FIELDS}
    ms = args.min_duration_ms if args.min_duration_ms is not None else DEFAULT_POINT_MS
    if ms < 1:
        from mlharness.errors import MLHarnessError

        raise MLHarnessError(f"--min-duration-ms {ms}: must be at least 1")
    return SweepConfig(
        manifest=manifest_of(args), scenario=args.scenario, output=Path(args.output).absolute(),
        axis="concurrency" if conc else None,
        qps=parse_values(args.qps, False, "--qps") if args.qps else [],
        concurrency=[int(v) for v in parse_values(args.concurrency, True, "--concurrency")] if args.concurrency
        else [],
        plan=args.plan, min_value=lo, max_value=hi,
        points=args.points, slo=parse_slos(args.slo), repeats=args.repeats, seconds=ms / 1000.0,
        min_query_count=args.min_query_count, queries=args.queries, dataset_path=args.dataset_path,
        count=args.count, resume=args.resume, progress=say, on_point=on_point,
        run={k: v for k, v in given.items() if v != defaults[k]},
        sizing={k: getattr(args, k) for k in ("max_query_count", "target_latency_ms", "performance_sample_count")
                if getattr(args, k) is not None},
        progress_bar=lambda: RunProgress(err, live=not args.no_progress))


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
    if p.get("node"):  # measured on a node of a cluster (sweep --cluster)
        table.add_row("node", f"{p['node']['node_id'][:12]} ({p['node']['address']})")
    table.add_row("result", "[green]VALID[/]" if p["valid"] else
                  f"[red]INVALID[/] ({escape('; '.join(p['invalid_reasons']))})")
    if not p.get("meaningful", True):
        table.add_row("not meaningful", f"{p['samples']} queries, under the {p['min_queries']} the rules' early "
                      "stopping needs for a p99: never named as the knee or the highest VALID value")
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
    from mlharness.results_db.at_commit import index_committed

    def on_point(p: dict[str, Any]) -> None:
        out.print(point_table(p))
        # the point's row in the evaluation database of the default results root, when the sweep lies in it (a
        # sweep has no --results-root: ./results is the root `mlharness results list` takes by default)
        index_committed(cfg.output / p["dir"], RESULTS_ROOT)

    cfg = config(args, say, on_point)
    failed: list[Any] = []
    if getattr(args, "cluster", None):  # each point a run job on a node (mlharness/measurement/sweep_cluster.py)
        from mlharness.measurement.sweep_cluster import sweep_on_cluster

        state, failed = sweep_on_cluster(cfg, args.cluster, args.constraints, getattr(args, "share_host", False))
    else:
        state = sweep(cfg)
    unit = "QPS" if state["axis"] == "target_qps" else "requests in flight"
    summary = Table("value", "runs", "throughput (median)", "p99 ms (median)", "goodput (median)", "valid",
                    "meaningful",
                    title=f"sweep over {unit}: {escape(str(cfg.output))}/sweep.json", title_justify="left")
    for a in state["aggregates"]:
        summary.add_row(f"{a['value']:g}", str(a["repeats"]), _median(a, "throughput"), _median(a, "latency_p99_ms"),
                        _median(a, "goodput"), "VALID" if a["valid"] else "INVALID",
                        "yes" if a.get("meaningful", True) else "no: too few queries")
    out.print(summary)
    knee = state["knee"]
    short = [a["value"] for a in state["aggregates"] if not a.get("meaningful", True)]
    if short:
        out.print(f"not meaningful (fewer queries than the rules' minimum; left out of the knee and the highest "
                  f"VALID value): {', '.join(f'{v:g}' for v in short)} {unit}; --min-query-count (default: the "
                  "minimum) sizes each point")
    out.print(f"knee: {knee['value']:g} {unit} ({escape(knee['reason'])})" if knee else "knee: not reached")
    out.print(f"highest VALID: {state['max_valid']:g} {unit}" if state["max_valid"] is not None
              else "highest VALID: none of the runs was VALID")
    if failed:
        from mlharness.errors import RunFailed

        raise RunFailed(f"{len(failed)} point(s) of the sweep failed: " + "; ".join(
            f"{o.job.key} ({o.error})" for o in failed) + "; `mlharness sweep ... --resume` measures them again")
    return 0
