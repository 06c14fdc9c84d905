"""``mlharness analyze lower-bound``: its command, its tables and its report (Markdown beside a plot of the
per-layer times: in the model, alone, and the bound they add up to)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from mlharness.errors import MLHarnessError
from mlharness.progress import output_console

err = output_console(stderr=True)
PLOT = "lower_bound_layers.png"
PLOTTED = 30  # layers in the plot: those the model spends most in


def register(sub: argparse._SubParsersAction) -> None:
    an = sub.add_parser("analyze", help="analyses of a model beyond its runs").add_subparsers(dest="action",
                                                                                            required=True)
    lb = an.add_parser("lower-bound", help="an ONNX model's sequential, parallel and fused lower bounds from its "
                       "layers timed alone, against its measured latency, with advice")
    lb.add_argument("model", help="an .onnx file, or a built-in manifest whose model is one (its model file is "
                    "fetched or generated as for a run)")
    lb.add_argument("--batch", type=int, default=1, help="the size of each input's first symbolic dimension")
    lb.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="the size of a named symbolic "
                    "dimension (repeat)")
    lb.add_argument("--runs", type=int, default=20, help="profiled runs per layer and of the model (medians)")
    lb.add_argument("--threads", type=int, default=None, help="ONNX Runtime's intra-op threads (default: its own)")
    lb.add_argument("--top", type=int, default=10, help="rows per advice table")
    lb.add_argument("--results-root", type=Path, default=Path("results"), help="whose evaluation database keeps "
                    "the layer timings (default: ./results)")
    lb.add_argument("--db", default=None, metavar="URL", help="a database URL instead of the results root's")
    lb.add_argument("--output", type=Path, default=None, help="a new folder for lower_bound.json, "
                    "lower_bound.md and the plot")
    lb.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    lb.set_defaults(func=cmd_lower_bound)


def _model_file(ref: str) -> Path:
    from mlharness.measurement.lowerbound import check_inputs

    path = Path(ref)
    if path.suffix.lower() == ".onnx":
        return check_inputs(path)
    from mlharness.manifest.loader import load_manifest
    from mlharness.run.factory import resolve_model_file

    loaded = load_manifest(ref)
    if loaded.model.framework.name != "onnxruntime":
        raise MLHarnessError(f"{loaded.path}: its model runs on {loaded.model.framework.name}; analyze lower-bound "
                             "reads ONNX models (export it with torch.onnx.export, or give the .onnx file)")
    return check_inputs(resolve_model_file(loaded))


def _dims(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name or not value.isdigit() or int(value) < 1:
            raise MLHarnessError(f"--dim {item}: expected NAME=N with N a positive whole number")
        out[name] = int(value)
    return out


def cmd_lower_bound(args: argparse.Namespace, out: Any) -> int:
    from mlharness.measurement.lowerbound import LowerBoundConfig, analyze
    from mlharness.results_db.db import sqlite_url

    if args.output is not None and args.output.exists():
        raise MLHarnessError(f"--output {args.output} exists; give a new folder")
    for flag, value in (("--batch", args.batch), ("--runs", args.runs), ("--top", args.top)):
        if value < 1:
            raise MLHarnessError(f"{flag} {value}: expected at least 1")
    if args.db is None:
        args.results_root.mkdir(parents=True, exist_ok=True)
    cfg = LowerBoundConfig(model=_model_file(args.model), db=args.db or sqlite_url(args.results_root),
                           batch=args.batch, dims=_dims(args.dim), runs=args.runs, threads=args.threads, top=args.top,
                           progress=lambda text: err.print(f"[dim]{escape(text)}[/]"))
    result = analyze(cfg)
    if args.output is not None:
        write(result, args.output)
    if args.json:
        print(json.dumps(result))
    else:
        for table in tables(result):
            out.print(table)
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.3f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:,.1f}%"


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    b, m = r["bounds_s"], r["measured_s"]
    return [("sequential lower bound", _ms(b["sequential"])), ("parallel lower bound", _ms(b["parallel"])),
            ("fused lower bound", _ms(b["fused"])), ("measured, optimisations off", _ms(m["unoptimised"])),
            ("measured, ORT's optimisations on", _ms(m["optimised"])),
            ("kernels in the model (optimisations off)", _ms(m["kernels_unoptimised"])),
            ("gap: unoptimised - sequential", _ms(r["gap_s"])),
            ("measured / sequential bound", f"{m['unoptimised'] / b['sequential']:.2f}x" if b["sequential"] else "-"),
            ("layer configurations", f"{r['configurations']} ({r['configurations_from_db']} from the database)"),
            ("not measured alone", ", ".join(r["not_measured_alone"][:5]) or "none")]


def tables(r: dict[str, Any]) -> list[Table]:
    head = Table(title=f"lower bounds of {r['model']} (batch {r['batch']}, {r['nodes']} nodes) in ms",
                 show_header=False)
    for k, v in summary_rows(r):
        head.add_row(k, escape(v))
    a = r["advice"]
    layers = Table("node", "op", "in model ms", "alone ms", "excess ms", "share of gap",
                   title="layers slower in the model than alone")
    for x in a["layers"]:
        layers.add_row(escape(x["node"]), x["op"], _ms(x["in_model_s"]), _ms(x["alone_s"]), _ms(x["excess_s"]),
                       _pct(x["share_of_gap"]))
    ops = Table("op", "nodes", "in model ms", "alone ms", "excess ms", "share of gap", title="by operator")
    for x in a["operators"]:
        ops.add_row(x["op"], str(x["nodes"]), _ms(x["in_model_s"]), _ms(x["alone_s"]), _ms(x["excess_s"]),
                    _pct(x["share_of_gap"]))
    fw = a["framework_overhead"]
    ops.caption = f"framework overhead (latency outside kernels): {_ms(fw['seconds'])} ms, {_pct(fw['share_of_gap'])}"
    fus = Table("chain", "ops", "apart ms", "fused ms", "saving ms", title="fusion candidates")
    for f in a["fusions"]:
        fus.add_row(escape(" > ".join(f["nodes"])), f["ops"], _ms(f["apart_s"]), _ms(f["fused_s"]),
                    _ms(f["saving_s"]))
    return [head, layers, ops, fus]


def write(r: dict[str, Any], folder: Path) -> None:
    """lower_bound.json, lower_bound.md and the per-layer plot in the new folder ``folder``."""
    folder.mkdir(parents=True)
    (folder / "lower_bound.json").write_text(json.dumps(r, indent=1))
    plotted = plot(r, folder / PLOT)
    lines = [f"# Lower bounds of {Path(r['model']).name}", "", f"Batch {r['batch']}, {r['nodes']} nodes, "
             f"{r['runs']} profiled runs each; host: {r['host']}.", "", "| figure | value (ms) |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary_rows(r)]
    lines += ["", "## Layers slower in the model than alone", "", "| node | op | in model ms | alone ms | excess ms "
              "| share of gap |", "|---|---|---|---|---|---|"]
    lines += [f"| {x['node']} | {x['op']} | {_ms(x['in_model_s'])} | {_ms(x['alone_s'])} | {_ms(x['excess_s'])} | "
              f"{_pct(x['share_of_gap'])} |" for x in r["advice"]["layers"]]
    lines += ["", "## Fusion candidates", "", "| chain | apart ms | fused ms | saving ms |", "|---|---|---|---|"]
    lines += [f"| {' > '.join(f['nodes'])} | {_ms(f['apart_s'])} | {_ms(f['fused_s'])} | {_ms(f['saving_s'])} |"
              for f in r["advice"]["fusions"]]
    if plotted:
        lines += ["", f"![per-layer times]({PLOT})"]
    (folder / "lower_bound.md").write_text("\n".join(lines) + "\n")


def plot(r: dict[str, Any], path: Path) -> bool:
    """Bars per layer (the most expensive in the model): in the model, alone; and each layer's share of the
    sequential bound as a line. False where matplotlib is not installed (the report extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = sorted(r["layers"], key=lambda x: -x["in_model_s"])[:PLOTTED]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.4), 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [x["in_model_s"] * 1e3 for x in rows], width=0.4, label="in the model")
    ax.bar([x + 0.2 for x in xs], [x["alone_s"] * 1e3 for x in rows], width=0.4, label="alone (lower bound)")
    ax.set_xticks(list(xs), [x["node"] for x in rows], rotation=90, fontsize=6)
    ax.set_ylabel("kernel time (ms)")
    ax.set_title(f"{Path(r['model']).name}: sequential bound {_ms(r['bounds_s']['sequential'])} ms, measured "
                 f"{_ms(r['measured_s']['unoptimised'])} ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
