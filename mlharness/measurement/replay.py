"""``mlharness replay TRACE --endpoint URL``: play a trace's sessions against an OpenAI-compatible server through
the normal run (real LoadGen, one sample per session; docs/sessions.md).

The trace is read first (:func:`mlharness.kinds.sessions.traces.load_trace`: a malformed one exits 2 naming its line and
field); the run's manifest is then written for it (a ``type: session`` input whose ``parameters`` are the replay
options, framework ``openai`` at the endpoint, a ``preprocess`` returning the trace's sessions) and run as
``mlharness run`` would. How sessions start picks the scenario: one at a time (SingleStream, the default), at
``--session-rate`` sessions/s (Server: LoadGen's Poisson arrivals), as recorded (``--timing recorded``: Offline,
each session at its ``start_s``) or ``--concurrency N`` at a time (Offline). Every session is played once (accuracy
mode) unless ``--mode performance`` lets LoadGen's sizing decide.

Several values of ``--session-rate`` or ``--concurrency`` (``0.5,1,2``) sweep them: one run per value in its own
folder under ``--output``, ``sweep.json`` (the report's) and ``sweep_sessions.json`` with each point's goodput over
sessions. ``mlharness sweep --replay`` runs the same loop (:func:`replay`, ``sweep_mode``) as performance runs sized
as a sweep's points, with the knee and the highest VALID value (:mod:`.replay_sweep`).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mlharness import numbers
from mlharness.errors import SettingsError
from mlharness.fileguard import read_json
from mlharness.run.run_args import add_run_options
from mlharness.userfiles import RECORD_LIMIT

REPLAY_FLAGS = ("--round", "--count", "--mode", "--user-conf", "--min-duration-ms", "--min-query-count",
                "--max-query-count", "--target-latency-ms", "--performance-sample-count", "--no-calibrate",
                "--trace", "--telemetry-interval-ms", "--output", "--results-root", "--system", "--no-progress",
                "--scenario")
SWEEP_FILE = "sweep_sessions.json"
MAX_THINK_SCALE = 1e6  # think times multiplied by more than this are a typo
MAX_SESSION_RATE = 1e6  # sessions started per second: LoadGen's target_qps, of which each is one session
PREPROCESS = '''from mlharness.kinds.sessions.traces import load_trace

_SESSIONS = []


def preprocess(ctx, index):
    if not _SESSIONS:
        _SESSIONS.extend(load_trace({path!r}, {fmt!r}))
    return _SESSIONS[index]
'''


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a trace's sessions (multi-turn, tool calls, think times) against an "
                       "OpenAI-compatible endpoint through LoadGen")
    p.add_argument("trace_file", metavar="TRACE", type=Path, help="the trace file (docs/sessions.md: Trace formats)")
    p.add_argument("--endpoint", required=True, action="append", metavar="URL", help="the OpenAI-compatible server")
    p.add_argument("--timing", choices=("recorded", "rate"), default=None, help="recorded: each session starts at "
                   "its recorded start (Offline); rate: at --session-rate (Server)")
    p.add_argument("--session-rate", default=None, help="sessions started per second (Server); a list sweeps "
                   "(as mlharness sweep --replay)")
    p.add_argument("--concurrency", default=None, help="sessions in flight at most (Offline); a list sweeps")
    add_replay_flags(p)
    add_run_options(p, only=REPLAY_FLAGS, override={"--scenario": {"required": False, "default": None, "help":
                    "default: Server with --session-rate, Offline with --timing recorded or --concurrency, else "
                    "SingleStream"}})
    p.set_defaults(func=cmd_replay)


def add_replay_flags(p: Any) -> None:
    """The flags of a replay that ``mlharness replay`` and ``mlharness sweep --replay`` share (one definition)."""
    p.add_argument("--model", default=None, help="the served model's name (default: what GET /v1/models names)")
    p.add_argument("--format", default="auto", help="the trace's format (default: auto, told by its first record)")
    p.add_argument("--history", choices=("generated", "recorded"), default="generated", help="each turn's history: "
                   "the model's own earlier answers (default) or the trace's recorded ones")
    p.add_argument("--affinity-header", default=None, metavar="NAME", help="send the session's id in this header "
                   "(e.g. X-Session-ID, for routers keeping a session on one replica)")
    p.add_argument("--cache-bust", action="store_true", help="salt each session's first message: no two sessions "
                   "share a prefix")
    p.add_argument("--think-scale", type=numbers.argtype("--think-scale", minimum=0, maximum=MAX_THINK_SCALE),
                   default=1.0, help="multiply think times (0: no waits)")
    p.add_argument("--max-tokens", type=numbers.argtype("--max-tokens", integer=True, minimum=1, maximum=2**31 - 1),
                   default=None, help="a turn's cap where the trace states none "
                   "(default 1024)")
    p.add_argument("--turn-timeout-s", type=numbers.argtype("--turn-timeout-s", minimum=0, above=True,
                                                            maximum=numbers.MAX_TIMEOUT_S, unit=" s"),
                   default=600.0, help="a turn unanswered by then fails the run")
    for name, what in (("ttft", "time to first token of every turn"), ("tpot", "time per output token of every "
                       "turn"), ("session", "whole session, end to end")):
        p.add_argument(f"--slo-{name}-ms", type=numbers.argtype(f"--slo-{name}-ms", minimum=0, above=True,
                                                                 maximum=numbers.MAX_TIMEOUT_S * 1000, unit=" ms"),
                       default=None, help=f"goodput: the {what}, at most this")


def values(text: str | None, flag: str, kind: type) -> list[Any]:
    """The comma-separated values of ``flag``, each checked (:mod:`mlharness.numbers`) as that flag's."""
    if text is None:
        return []
    parts = [v for v in str(text).split(",") if v.strip()]
    if not parts:
        raise numbers.flag(flag).fail(f"expected a number or a comma-separated list, got {text!r}")
    high = numbers.MAX_WORKERS if kind is int else MAX_SESSION_RATE
    return [numbers.parse(v, numbers.flag(flag), integer=kind is int, minimum=0, above=True, maximum=high)
            for v in parts]


def scenario_of(args: argparse.Namespace) -> str:
    if args.scenario:
        return args.scenario
    if args.session_rate is not None or args.timing == "rate":
        return "Server"
    if args.timing == "recorded" or args.concurrency is not None:
        return "Offline"
    return "SingleStream"


def parameters(args: argparse.Namespace, concurrency: int | None) -> dict[str, Any]:
    """The session input's ``parameters`` (mlharness/kinds/sessions/input.py) the flags ask for."""
    params: dict[str, Any] = {"history": args.history, "cache_bust": args.cache_bust,
                              "think_scale": args.think_scale, "turn_timeout_s": args.turn_timeout_s,
                              "timing": "asap" if concurrency is not None else "recorded"}
    if args.affinity_header:
        params["affinity_header"] = args.affinity_header
    if args.max_tokens is not None:
        params["max_tokens"] = args.max_tokens
    if concurrency is not None:
        params["concurrency"] = concurrency
    for name in ("ttft", "tpot", "session"):
        value = getattr(args, f"slo_{name}_ms")
        if value is not None:
            params[f"slo_{name}_ms"] = value
    return params


def write_manifest(folder: Path, trace: Path, fmt: str, count: int, endpoints: list[str], model: str | None,
                   params: dict[str, Any]) -> Path:
    options: dict[str, Any] = {"endpoints": list(endpoints)}
    if model:
        options["model"] = model
    manifest = {
        "name": "session-replay", "description": f"replay of {trace}",
        "framework": {"name": "openai", "version": "*", "warmup": 1, "options": options},
        "inputs": [{"name": "session", "type": "session", "parameters": params}],
        "outputs": [{"name": "answers", "element_type": "uint8"}],
        "response": {"kind": "session"},
        "dataset": {"name": "trace", "init": f"def init(count):\n    return min(count or {count}, {count})\n"},
        "preprocess": PREPROCESS.format(path=str(trace.resolve()), fmt=fmt),
    }
    path = folder / "session-replay.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def replay(args: argparse.Namespace, say: Callable[[str], None] | None = None, progress: Any = None,
           sweep_mode: bool = False, on_point: Callable[[dict[str, Any]], None] | None = None) -> list[dict]:
    """Every point the flags ask for (one, or a sweep); returns each point's run folder and session summary.

    The one loop of session points: ``mlharness replay`` (one point, or a list in the mode given) and ``mlharness
    sweep --replay`` (``sweep_mode``: performance runs sized as the sweep's points, the scenario told by the axis).
    A sweep writes ``sweep.json`` and ``sweep_sessions.json`` (:mod:`.replay_sweep`) after each point; ``on_point``
    hears each point's figures."""
    from mlharness.kinds.sessions.traces import check_sessions, load_trace
    from mlharness.measurement import replay_sweep as rs
    from mlharness.run.run_args import overrides_of, run_options
    from mlharness.run.runner import run

    rates = values(args.session_rate, "--session-rates" if sweep_mode else "--session-rate", float)
    conc = values(args.concurrency, "--concurrency", int)
    if rates and conc:
        raise SettingsError("--session-rate (Server) and --concurrency (Offline) are two ways to start sessions: "
                            "give one")
    if sweep_mode and not (rates or conc):
        raise SettingsError("sweep --replay: give the points, --session-rates R1,R2,... (Server) or --concurrency "
                            "C1,C2,... (Offline)")
    points: list[tuple[str, float | None, int | None]] = ([(f"rate-{r:g}", r, None) for r in rates]
                                                          or [(f"concurrency-{c}", None, c) for c in conc]
                                                          or [("", None, None)])
    sweep = sweep_mode or len(points) > 1
    if sweep and args.output is None:
        raise SettingsError("a sweep (several --session-rate or --concurrency values) needs --output: the folder "
                            "of its runs")
    root = Path(args.output).absolute() if sweep else None
    if sweep_mode and root is not None and root.exists():
        raise SettingsError(f"{root} exists; a sweep never writes over one (choose another --output)")
    sessions = load_trace(args.trace_file, args.format)  # a malformed trace: DatasetError naming line and field (exit 2)
    check_sessions(sessions, args.trace_file, args.think_scale)  # its waits, scaled, end within the stated limit
    if not sessions:
        raise SettingsError(f"{args.trace_file}: the trace has no sessions")
    scenario = ("Server" if rates else "Offline") if sweep_mode else scenario_of(args)
    mode = "performance" if sweep_mode else (args.mode or "accuracy")
    axis = rs.RATE_AXIS if rates else rs.CONCURRENCY_AXIS
    results: list[dict[str, Any]] = []
    figures: list[dict[str, Any]] = []
    slo = {k: v for k, v in parameters(args, None).items() if k.startswith("slo_")}
    folder = Path(tempfile.mkdtemp(prefix="mlharness-replay-"))
    try:
        for label, rate, concurrency in points:
            manifest = write_manifest(folder, Path(args.trace_file), args.format, len(sessions), args.endpoint,
                                      args.model, parameters(args, concurrency))
            fixed: dict[str, Any] = {"manifest": manifest, "scenario": scenario, "say": say, "progress": progress,
                                     "mode": mode, "endpoints": []}
            if root is not None:
                fixed["output"] = root / label
            sizing = sweep_sizing(args, rate, concurrency) if sweep_mode else {}
            if rate is not None or sizing:
                fixed["overrides"] = overrides_of(args, **sizing, **({} if rate is None else {"target_qps": rate}))
            result = run(run_options(args, **fixed))
            summary = read_json(result.output / "sessions_summary.json", "sessions summary", RECORD_LIMIT, allow_nan=True)
            results.append({"label": label or scenario, "session_rate": rate, "concurrency": concurrency,
                            "output": str(result.output), "summary": summary})
            if root is None:
                continue
            value = float(rate) if rate is not None else int(concurrency or 0)
            figures.append(rs.point_figures(label, value, axis, result.output, root, result, summary, mode))
            state = rs.sweep_state(Path(args.trace_file), scenario, axis, mode, slo, figures,
                                   {"values": rates or conc}, complete=len(figures) == len(points))
            rs.write_sweep(root, state, results)
            if on_point:
                on_point(figures[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


def sweep_sizing(args: argparse.Namespace, rate: float | None, concurrency: int | None) -> dict[str, Any]:
    """A sweep point's LoadGen sizing, as ``mlharness sweep`` sizes its points: ``--min-duration-ms`` (default
    1 s); a rate point asks for the queries early stopping needs for a p99 (``--min-query-count`` over it); a
    concurrency point plays ``--queries`` sessions (default: 4 per session in flight, at least 16) in LoadGen's one
    Offline query, at an expected rate that fills the duration with them."""
    from mlharness.measurement.sweep import MIN_POINT_QUERIES
    from mlharness.measurement.sweep_cli import DEFAULT_POINT_MS

    ms = args.min_duration_ms if args.min_duration_ms is not None else DEFAULT_POINT_MS
    if ms < 1:
        raise SettingsError(f"--min-duration-ms {ms}: must be at least 1")
    if rate is not None:
        return {"min_duration_ms": ms, "min_query_count": args.min_query_count or MIN_POINT_QUERIES}
    queries = getattr(args, "queries", None) or max(16, 4 * int(concurrency or 1))
    return {"min_duration_ms": ms, "min_query_count": queries, "target_qps": queries / (ms / 1000.0)}


def _ms(d: dict[str, Any] | None, key: str = "p50") -> str:
    return "n/a" if not d or d.get(key) is None else f"{d[key]:,.1f}"


def cmd_replay(args: argparse.Namespace, out: Any) -> int:
    from rich.markup import escape
    from rich.table import Table

    from mlharness.progress import RunProgress, output_console

    err = output_console(stderr=True)
    results = replay(args, say=lambda text: err.print(f"[dim]{escape(text)}[/]", highlight=False),
                     progress=RunProgress(err, live=not args.no_progress))
    table = Table("point", "sessions ok", "session p50/p99 ms", "TTFT p50/p99 ms", "TPOT p50 ms", "sessions/s",
                  "client cache hits", "goodput", "output", title="session replay", title_justify="left")
    for r in results:
        s = r["summary"]
        g = s["goodput"]
        hit = s.get("client_hit_rate")
        table.add_row(r["label"], f"{s['sessions_ok']}/{s['sessions']}",
                      f"{_ms(s['session_latency_ms'])} / {_ms(s['session_latency_ms'], 'p99')}",
                      f"{_ms(s['turn']['ttft_ms'])} / {_ms(s['turn']['ttft_ms'], 'p99')}", _ms(s["turn"]["tpot_ms"]),
                      "n/a" if s["sessions_per_s"] is None else f"{s['sessions_per_s']:.3g}",
                      "n/a" if hit is None else f"{hit:.1%}",
                      "n/a" if g["fraction"] is None else f"{g['fraction']:.0%} ({g['good_sessions']} sessions)",
                      escape(r["output"]))
    out.print(table)
    return 0


# flags of `mlharness sweep` that choose its points or runs otherwise than a replay sweep does
NOT_WITH_REPLAY = ("qps", "plan", "min_qps", "max_qps", "min_concurrency", "max_concurrency", "slo", "manifest",
                   "framework", "dataset", "dataset_path", "count", "agent", "network", "resume")


def cmd_sweep_replay(args: argparse.Namespace, out: Any, say: Callable[[str], None]) -> int:
    """``mlharness sweep --replay TRACE``: the points of :func:`replay` in sweep mode, a table of each point's
    session figures, the knee and the highest VALID value."""
    from rich.markup import escape
    from rich.table import Table

    from mlharness.measurement.replay_sweep import RATE_AXIS
    from mlharness.measurement.sweep import SWEEP_FILE
    from mlharness.progress import RunProgress, output_console

    given = [n for n in NOT_WITH_REPLAY if getattr(args, n, None) not in (None, False, [])]
    if given:
        raise SettingsError(f"sweep --replay: {', '.join('--' + n.replace('_', '-') for n in given)} do(es) not "
                            "apply: a replay sweep runs the trace's sessions at the --endpoint, over the "
                            "--session-rates or --concurrency values given, with the --slo-*-ms service levels")
    if getattr(args, "repeats", 1) != 1:
        raise SettingsError("sweep --replay: --repeats is not supported; each value is one run")
    if not args.endpoint:
        raise SettingsError("sweep --replay: give --endpoint URL, the OpenAI-compatible server to replay against")
    err = output_console(stderr=True)
    points: list[dict[str, Any]] = []
    replay(args, say=say, progress=RunProgress(err, live=not args.no_progress), sweep_mode=True,
           on_point=points.append)
    state = read_json(Path(args.output) / SWEEP_FILE, "sweep state", RECORD_LIMIT, allow_nan=True)
    unit = "sessions/s offered" if state["axis"] == RATE_AXIS else "sessions in flight"
    table = Table("value", "result", "sessions/s", "turns/s", "goodput", "session p50/p90/p99 ms", "TTFT p90 ms",
                  "TPOT p90 ms", "run", title=f"session replay sweep over {unit}: {escape(str(args.output))}/"
                  f"{SWEEP_FILE}", title_justify="left")
    for p in state["points"]:
        g, frac = p["goodput"], p["goodput_fraction"]
        lat = p["latency_ms"]
        table.add_row(f"{p['value']:g}", "VALID" if p["valid"] else f"INVALID ({escape('; '.join(p['invalid_reasons']))})"
                      + ("" if p["meaningful"] else ", not meaningful: too few sessions"),
                      "n/a" if p["sessions_per_s"] is None else f"{p['sessions_per_s']:.3g}",
                      "n/a" if p["turns_per_s"] is None else f"{p['turns_per_s']:.3g}",
                      "n/a" if frac is None else f"{frac:.0%}, {g or 0:.3g}/s ({p['good_sessions']}/{p['sessions']})",
                      " / ".join(_ms(lat, k) for k in ("p50", "p90", "p99")), _ms(p["ttft_ms"], "p90"),
                      _ms(p["tpot_ms"], "p90"), escape(p["dir"]))
    out.print(table)
    knee = state["knee"]
    out.print(f"knee: {knee['value']:g} {unit} ({escape(knee['reason'])})" if knee else "knee: not reached")
    out.print(f"highest VALID: {state['max_valid']:g} {unit}" if state["max_valid"] is not None
              else "highest VALID: none of the runs was VALID (and long enough to mean it)")
    return 0
