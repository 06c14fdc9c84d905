"""Commands of the measurement package: ``parity``, ``bench overhead|generate|client``, ``tune``, ``compare``,
``sweep`` and ``coldstart``.

Heavy imports stay inside the handlers; each handler takes (args, console) and returns an exit status."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from mlharness.progress import output_console
from mlharness.run.run_args import add_run_options, deprecated_alias, manifest_default, seconds_to_ms

err = output_console(stderr=True)

# sweep: every point is a Server (or Interactive) performance run whose rate (or concurrency) the sweep sets
SWEEP_GROUPS = ("model", "dataset", "sizing", "execution", "output", "remote")
SWEEP_SKIPS = ("--mode", "--audit-config", "--target-qps", "--samples-per-query", "--results-root", "--system",
               "--no-second-try")  # a sweep judges each point at the rate it asked for
# tune: trial runs of the shared options; --output and --instances are its own (the user.conf it writes, the
# instance counts it tries)
TUNE_GROUPS = ("model", "dataset", "sizing", "remote")
TUNE_FLAGS = ("--manifest", "--framework", "--device", "--round", "--dataset", "--dataset-path", "--count",
              "--scenario", "--min-duration-ms", "--target-latency-ms", "--endpoint", "--agent")
# bench overhead|generate: the timed runs of the shared options it compares (a synthetic dataset by default)
BENCH_FLAGS = ("--manifest", "--dataset-path", "--count", "--min-duration-ms", "--threads")
COLDSTART_FLAGS = ("--manifest", "--dataset-path", "--count", "--device", "--threads")
BENCH_RUN_MS = 5000  # each timed run's min_duration without --min-duration-ms
TUNE_RUN_FIELDS = ("framework", "device", "round", "dataset", "endpoints", "agents", "agent_options")
TUNE_TRIAL_MS = 5000  # each trial's min_duration without --min-duration-ms
SWEEP_OVERRIDES = {
    "--scenario": {"required": False, "default": "Server"},
    "--output": {"required": True, "help": "the sweep's folder (never overwritten): sweep.json and a run folder "
                 "per point"},
}


def register(sub: argparse._SubParsersAction) -> None:
    par = sub.add_parser("parity", help="compare two manifests / framework variants on the same samples")
    par.add_argument("a", help="NAME_OR_PATH[@FRAMEWORK]")
    par.add_argument("b", help="NAME_OR_PATH[@FRAMEWORK]")
    par.add_argument("--dataset-path", default=None)
    par.add_argument("--count", type=int, default=None)
    par.add_argument("--batch", type=int, default=8)
    par.add_argument("--device", default="cpu")
    par.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed l-inf difference")
    par.set_defaults(func=cmd_parity)
    bench = sub.add_parser("bench", help="benchmarks of the harness itself").add_subparsers(dest="action",
                                                                                           required=True)
    bo = bench.add_parser("overhead", help="mlharness vs the bare framework and LoadGen's null floor")
    add_run_options(bo, only=BENCH_FLAGS, override={"--manifest": manifest_default("resnet50-random"),
                                                    "--count": {"default": 64}})
    deprecated_alias(bo, "--seconds", "--min-duration-ms", float, seconds_to_ms)
    bo.add_argument("--rounds", type=int, default=3)
    bo.add_argument("--quick", action="store_true", help="one round of short runs (a few minutes)")
    bo.add_argument("--server-bound-ms", type=float, default=None,
                    help="Server latency bound of the trials (default: 6x the bare batch-1 p90)")
    bo.add_argument("--server-queries", type=int, default=None, help="queries per Server trial (default: 1500)")
    bo.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    bg = bench.add_parser("generate", help="mlharness vs the bare transformers engine on a generative model")
    add_run_options(bg, only=BENCH_FLAGS, override={"--manifest": manifest_default("llama3.1-8b-random"),
                                                    "--count": {"default": 32}})
    deprecated_alias(bg, "--seconds", "--min-duration-ms", float, seconds_to_ms)
    for flag, kind, default in (("--rounds", int, 3), ("--server-queries", int, 32)):
        bg.add_argument(flag, type=kind, default=default)
    bg.add_argument("--quick", action="store_true", help="one round of short runs")
    bg.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    for name in ("overhead", "generate"):
        bench.choices[name].set_defaults(func=cmd_bench)
    bc = bench.add_parser("client", help="mlharness's OpenAI client vs a bare asyncio client (and vllm bench "
                          "serve) against a fast fake server")
    bc.add_argument("--tokens", type=int, default=128, help="tokens of each answer")
    bc.add_argument("--delay-ms", type=float, default=10.0, help="the fake server's wait before each token")
    bc.add_argument("--concurrency", type=int, nargs="+", default=[64], help="requests in flight (a list)")
    bc.add_argument("--rounds", type=int, default=3)
    bc.add_argument("--count", type=int, default=None, help="requests per run (default: 8 per stream, >= 64)")
    bc.add_argument("--manifest", default="llama3.1-8b-random",
                    help="the built-in generative manifest mlharness runs")
    bc.add_argument("--server-qps", type=float, default=None, help="target of the Server runs (default: half "
                    "the bare client's rate of the round); 0 skips them")
    bc.add_argument("--vllm-python", default=os.environ.get("MLHARNESS_VLLM_PYTHON"), help="a Python with "
                    "vLLM: adds vllm bench serve (default: $MLHARNESS_VLLM_PYTHON); 'none' leaves it out")
    bc.add_argument("--workdir", type=Path, default=None, help="keep the run folders there")
    bc.add_argument("--client-processes", type=int, default=1, help="the mlharness runs spread their requests "
                    "over this many client processes (the openai framework's client_processes; they share the "
                    "client's core)")
    bc.add_argument("--quick", action="store_true", help="one round, 16 tokens at 1 ms, concurrency 8, "
                    "64 requests, no vllm bench serve")
    bc.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    bc.set_defaults(func=cmd_bench_client)
    cs = sub.add_parser("coldstart", help="the first answer of a fresh process that must load the model "
                        "(interpreter, harness, framework, model load, first inference) over several trials")
    add_run_options(cs, only=COLDSTART_FLAGS, override={"--manifest": manifest_default("demo")})
    cs.add_argument("--trials", type=int, default=5, help="fresh processes, one after another")
    cs.add_argument("--warm", type=int, default=20, help="answers to the same sample after the first, per trial")
    cs.add_argument("--drop-caches", action="store_true", help="drop the page cache before each trial (root): "
                    "truly cold trials")
    cs.add_argument("--timeout-s", type=float, default=600.0, help="the longest one trial may take")
    cs.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    cs.set_defaults(func=cmd_coldstart)
    tn = sub.add_parser("tune", help="find the settings a VALID run needs and write them as a user.conf")
    tune_groups = add_run_options(tn, TUNE_GROUPS, only=TUNE_FLAGS)
    deprecated_alias(tune_groups["sizing"], "--seconds", "--min-duration-ms", float, seconds_to_ms)
    tn.add_argument("--batch-sizes", type=int, nargs="*", default=[], help="Offline/Server batch sizes to try")
    tn.add_argument("--instances", type=int, nargs="*", default=[], help="instance counts to try")
    tn.add_argument("--steps", type=int, default=5, help="Server search steps")
    tn.add_argument("--output", type=Path, default=Path("user.conf"), help="the user.conf to write (default: "
                    "./user.conf); an existing one is left alone and the result goes to <output>.new")
    tn.add_argument("--force", action="store_true", help="replace an existing --output (the diff is shown)")
    tn.set_defaults(func=cmd_tune)
    cmp = sub.add_parser("compare", help="two result trees or run folders side by side: deltas, ratios, "
                         "which is faster and whether it exceeds the run-to-run spread")
    cmp.add_argument("a", type=Path, nargs="?", default=None, help="results directory, submission tree or run "
                     "folder (A); with --query, the results root the queries select from (default ./results)")
    cmp.add_argument("b", type=Path, nargs="?", default=None, help="results directory, submission tree or run "
                     "folder (B); with --query, B's results root when it is another")
    cmp.add_argument("--query", action="append", default=None, metavar="QUERY", help="twice: A's and B's runs "
                     "as queries of the evaluation database, e.g. --query \"system=a scenario=Server\" "
                     "--query \"system=b scenario=Server\" (fields: those of `mlharness results list`)")
    cmp.add_argument("--db", default=None, metavar="URL", help="with --query: a database URL instead of the "
                     "root's mlharness_results.sqlite")
    cmp.add_argument("--html", type=Path, default=None, metavar="OUT", help="also write the comparison as one "
                     "self-contained HTML page")
    cmp.add_argument("--force", action="store_true", help="replace an existing --html file")
    cmp.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    cmp.set_defaults(func=cmd_compare)
    sw = sub.add_parser("sweep", help="the operating curve: real LoadGen runs over target QPS or concurrency, "
                        "with goodput under SLOs, the knee and the highest VALID value")
    groups = add_run_options(sw, SWEEP_GROUPS, skip=SWEEP_SKIPS, override=SWEEP_OVERRIDES)
    own = groups["sizing"]
    own.add_argument("--qps", default=None, help="target QPS values, comma-separated (e.g. 5,10,20)")
    own.add_argument("--concurrency", default=None, help="requests in flight (generative models), e.g. 1,2,4; "
                     "with --replay, sessions in flight (Offline)")
    own.add_argument("--plan", choices=("adaptive", "even", "log2"), default=None,
                     help="how values are chosen between --min-* and --max-* (default: adaptive; without a range "
                     "it starts at the calibrated rate and doubles or halves from there)")
    for axis, kind in (("qps", float), ("concurrency", int)):
        own.add_argument(f"--min-{axis}", type=kind, default=None)
        own.add_argument(f"--max-{axis}", type=kind, default=None)
    own.add_argument("--points", type=int, default=6, help="values measured by a plan (default: 6)")
    own.add_argument("--slo", default=None, help="per-sample objectives for goodput, e.g. ttft_p99=500ms,"
                     "tpot_p99=30ms or latency_p99=20ms")
    own.add_argument("--repeats", type=int, default=1, help="runs per value")
    own.add_argument("--queries", type=int, default=None, help="concurrency axis: queries per run "
                     "(default: 4 per request in flight, at least 16)")
    deprecated_alias(own, "--seconds", "--min-duration-ms", float, seconds_to_ms)
    groups["output"].add_argument("--resume", action="store_true", help="continue the sweep in --output with the "
                                  "same options")
    cl = sw.add_argument_group("cluster (docs/cluster.md): each point a run on a node, all at once")
    cl.add_argument("--cluster", default=None, metavar="local|auto|ray://HOST:PORT", help="run the points on an "
                    "executor's nodes: 'auto' (the Ray cluster RAY_ADDRESS names or `mlharness cluster "
                    "start` started; never another job's) or 'ray://HOST:PORT' (needs mlharness[cluster]); a list or --plan even|log2 only, no --endpoint/--agent/--replay")
    cl.add_argument("--share-host", action="store_true", help="with --cluster: start each point at once, even "
                    "while another run measures on the same host (by default runs on one host take turns)")
    cl.add_argument("--constraints", default=None, metavar="KEY=VALUE,...", help="with --cluster: what a node "
                    "needs to run a point (as submission run takes it); give what only identical nodes meet")
    from mlharness.measurement.replay import add_replay_flags

    rp = sw.add_argument_group("session replay (docs/sessions.md): sweep a trace's sessions at --endpoint")
    rp.add_argument("--replay", dest="trace_file", metavar="TRACE", type=Path, default=None, help="replay this "
                    "trace's sessions at each point: --session-rates (Server) or --concurrency, sessions in flight "
                    "(Offline)")
    rp.add_argument("--session-rates", dest="session_rate", default=None, help="with --replay: sessions started "
                    "per second, comma-separated (e.g. 0.5,1,2)")
    add_replay_flags(rp)
    sw.set_defaults(func=cmd_sweep)


def cmd_parity(args: argparse.Namespace, out: Any) -> int:
    from mlharness.measurement.parity import compare, format_report, passes

    report = compare(args.a, args.b, args.dataset_path, args.count, args.batch, args.device)
    out.print(format_report(report, args.tolerance), highlight=False)
    return 0 if passes(report, args.tolerance) else 1


def cmd_bench(args: argparse.Namespace, out: Any) -> int:
    import json

    from mlharness.measurement.bench import BenchConfig, bench_overhead, default_dataset, format_figures

    ms = BENCH_RUN_MS if args.min_duration_ms is None else args.min_duration_ms
    if ms < 1:
        from mlharness.errors import MLHarnessError

        raise MLHarnessError(f"--min-duration-ms {ms}: a timed run needs at least 1")
    args.seconds = ms / 1000.0  # the benchmarks' unit
    if args.action == "generate":
        from mlharness.measurement.bench_generate import run_cli

        return run_cli(args, lambda text: out.print(text, highlight=False), lambda t: err.print(f"[dim]{escape(t)}[/]"))
    dataset_path = default_dataset(args.manifest, args.dataset_path, args.count)
    cfg = BenchConfig(manifest=args.manifest, dataset_path=dataset_path, count=args.count,
                      rounds=1 if args.quick else args.rounds, seconds=min(args.seconds, 3.0) if args.quick
                      else args.seconds, threads=args.threads, server_search_steps=1 if args.quick else 5,
                      quick=args.quick, server_bound_ms=args.server_bound_ms, server_queries=args.server_queries,
                      progress=lambda text: err.print(f"[dim]{escape(text)}[/]"))
    figures = bench_overhead(cfg)
    if args.json:
        print(json.dumps(figures, default=float))
    else:
        out.print(format_figures(figures), highlight=False)
    return 0


def cmd_coldstart(args: argparse.Namespace, out: Any) -> int:
    import json

    from mlharness.measurement.coldstart import ColdStartConfig, cold_start, format_figures

    cfg = ColdStartConfig(manifest=args.manifest, trials=args.trials, warm=args.warm, dataset_path=args.dataset_path,
                          count=args.count, device=args.device, threads=args.threads, drop_caches=args.drop_caches,
                          timeout_s=args.timeout_s, progress=lambda text: err.print(f"[dim]{escape(text)}[/]"))
    result = cold_start(cfg)
    if args.json:
        print(json.dumps(result))
    else:
        out.print(format_figures(result))
    return 0


def given_run_fields(opts: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields of ``opts`` among ``names`` that the flags changed from RunOptions' defaults."""
    default = type(opts)(scenario=opts.scenario)
    return {k: getattr(opts, k) for k in names if getattr(opts, k) != getattr(default, k)}


def cmd_tune(args: argparse.Namespace, out: Any) -> int:
    from mlharness.loadgen.bounds import check_args
    from mlharness.measurement.tune import TuneConfig, tune
    from mlharness.run.run_args import manifest_of, run_options

    check_args(args)  # counts, batch sizes, instances and durations in range before any trial
    ms = TUNE_TRIAL_MS if args.min_duration_ms is None else args.min_duration_ms
    if ms < 1:
        from mlharness.errors import MLHarnessError

        raise MLHarnessError(f"--min-duration-ms {ms}: a trial needs at least 1")
    base = run_options(args, scenario=args.scenario)
    cfg = TuneConfig(manifest=manifest_of(args), scenario=args.scenario, dataset_path=args.dataset_path,
                     count=args.count, seconds=ms / 1000.0, run=given_run_fields(base, TUNE_RUN_FIELDS), batch_sizes=args.batch_sizes,
                     instances=args.instances, target_latency_ms=args.target_latency_ms, steps=args.steps,
                     output=args.output, progress=lambda text: err.print(f"[dim]{escape(text)}[/]"),
                     force=args.force, show_diff=lambda text: out.print(escape(text), highlight=False, end=""))
    if args.output.exists() and not args.force:
        err.print(f"{escape(str(args.output))} exists: it is left as it is and the tuned settings go to "
                  f"{escape(str(args.output))}.new (--force replaces it)", highlight=False)
    result = tune(cfg)
    table = Table("trial", "settings", "metric", "valid")
    for t in result.trials:
        settings = ", ".join(f"{k}={v}" for k, v in t.settings.items())
        metric = "n/a" if t.metric is None else f"{t.metric:,.2f}"
        table.add_row(escape(t.what), escape(settings), metric, "VALID" if t.valid else "INVALID")
    out.print(table)
    out.print(f"wrote {escape(str(result.path))}" + (f" ({escape(str(args.output))} exists and was left as it "
              "was; the diff is above; --force replaces it)" if result.kept_existing else "") + ":")
    for line in result.conf_lines:
        out.print(f"  {line}", highlight=False)
    out.print("confirmation run: " + ("[green]VALID[/]" if result.confirmed else
                                      f"[red]INVALID[/] ({escape(str(args.output))} left as it was)"))
    return 0 if result.confirmed else 1


def cmd_compare(args: argparse.Namespace, out: Any) -> int:
    import json

    from mlharness.measurement.compare import compare
    from mlharness.measurement.compare_render import print_terminal
    from mlharness.report.treefiles import check_output
    from mlharness.userfiles import replace_text

    if args.html is not None:
        check_output(args.html, args.force)
    result = compare(*_compared(args))
    if args.html is not None:
        from mlharness.report.compare_html import render

        replace_text(args.html, render(result))  # a new file's mode (0644 usually), not a private 0600
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_terminal(result, out)
    if args.html is not None:
        (err if args.json else out).print(f"wrote {escape(str(args.html))}", highlight=False)
    return 0


def _compared(args: argparse.Namespace) -> tuple[Any, ...]:
    """compare's A and B: two folders, or two queries' run folders (``--query`` twice) with their labels."""
    from mlharness.errors import MLHarnessError

    if not args.query:
        if args.a is None or args.b is None:
            raise MLHarnessError("compare needs two results directories (A B), or --query twice")
        return args.a, args.b
    if len(args.query) != 2:
        raise MLHarnessError(f"compare takes --query twice (A's runs, then B's); got it {len(args.query)} time(s)")
    from mlharness.results_db.store import query_folders

    root_a, only_a = query_folders(args.a, args.db, args.query[0])
    root_b, only_b = query_folders(args.b or args.a, args.db, args.query[1])
    return root_a, root_b, only_a, only_b, f"{root_a} [{args.query[0]}]", f"{root_b} [{args.query[1]}]"


def cmd_bench_client(args: argparse.Namespace, out: Any) -> int:
    import json

    from mlharness.measurement.bench_client import ClientBenchConfig, bench_client, format_figures

    vllm = None if (args.vllm_python or "none").lower() == "none" or args.quick else args.vllm_python
    cfg = ClientBenchConfig(tokens=16 if args.quick else args.tokens, delay_ms=1.0 if args.quick else args.delay_ms,
                            concurrency=[8] if args.quick else args.concurrency, rounds=1 if args.quick else
                            args.rounds, count=64 if args.quick else args.count, manifest=args.manifest,
                            server_qps=args.server_qps, vllm_python=vllm, workdir=args.workdir,
                            progress=lambda text: err.print(f"[dim]{escape(text)}[/]"),
                            client_processes=args.client_processes)
    figures = bench_client(cfg)
    if args.json:
        print(json.dumps(figures))
    else:
        out.print(format_figures(figures), highlight=False)
    return 0


def cmd_sweep(args: argparse.Namespace, out: Any) -> int:
    from mlharness.measurement.sweep_cluster import refuse_shared_remote

    refuse_shared_remote(args)  # --cluster with a server every point would share: refused, saying why
    if args.trace_file is not None or args.session_rate is not None:
        from mlharness.errors import SettingsError
        from mlharness.measurement.replay import cmd_sweep_replay

        if args.trace_file is None:
            raise SettingsError("--session-rates sweeps a trace's sessions: give the trace with --replay TRACE")
        return cmd_sweep_replay(args, out, lambda text: err.print(f"[dim]{escape(text)}[/]"))
    from mlharness.measurement.sweep_cli import run_sweep

    return run_sweep(args, out, lambda text: err.print(f"[dim]{escape(text)}[/]"))
