"""``mlharness replay TRACE --endpoint URL``: play a trace's sessions against an OpenAI-compatible server through
the normal run (real LoadGen, one sample per session; docs/sessions.md).

The trace is read first (:func:`mlharness.sessions.traces.load_trace`: a malformed one exits 2 naming its line and
field); the run's manifest is then written for it (a ``type: session`` input whose ``parameters`` are the replay
options, framework ``openai`` at the endpoint, a ``preprocess`` returning the trace's sessions) and run as
``mlharness run`` would. How sessions start picks the scenario: one at a time (SingleStream, the default), at
``--session-rate`` sessions/s (Server: LoadGen's Poisson arrivals), as recorded (``--timing recorded``: Offline,
each session at its ``start_s``) or ``--concurrency N`` at a time (Offline). Every session is played once (accuracy
mode) unless ``--mode performance`` lets LoadGen's sizing decide.

Several values of ``--session-rate`` or ``--concurrency`` (``0.5,1,2``) sweep them: one run per value in its own
folder under ``--output``, and ``sweep_sessions.json`` with each point's goodput over sessions.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mlharness.errors import SettingsError
from mlharness.run.run_args import add_run_options

REPLAY_FLAGS = ("--round", "--count", "--mode", "--user-conf", "--min-duration-ms", "--min-query-count",
                "--max-query-count", "--target-latency-ms", "--performance-sample-count", "--no-calibrate",
                "--trace", "--telemetry-interval-ms", "--output", "--results-root", "--system", "--no-progress",
                "--scenario")
SWEEP_FILE = "sweep_sessions.json"
PREPROCESS = '''from mlharness.sessions.traces import load_trace

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
    p.add_argument("--model", default=None, help="the served model's name (default: what GET /v1/models names)")
    p.add_argument("--format", default="auto", help="the trace's format (default: auto, told by its first record)")
    p.add_argument("--timing", choices=("recorded", "rate"), default=None, help="recorded: each session starts at "
                   "its recorded start (Offline); rate: at --session-rate (Server)")
    p.add_argument("--session-rate", default=None, help="sessions started per second (Server); a list sweeps")
    p.add_argument("--concurrency", default=None, help="sessions in flight at most (Offline); a list sweeps")
    p.add_argument("--history", choices=("generated", "recorded"), default="generated", help="each turn's history: "
                   "the model's own earlier answers (default) or the trace's recorded ones")
    p.add_argument("--affinity-header", default=None, metavar="NAME", help="send the session's id in this header "
                   "(e.g. X-Session-ID, for routers keeping a session on one replica)")
    p.add_argument("--cache-bust", action="store_true", help="salt each session's first message: no two sessions "
                   "share a prefix")
    p.add_argument("--think-scale", type=float, default=1.0, help="multiply think times (0: no waits)")
    p.add_argument("--max-tokens", type=int, default=None, help="a turn's cap where the trace states none "
                   "(default 1024)")
    p.add_argument("--turn-timeout-s", type=float, default=600.0, help="a turn unanswered by then fails the run")
    for name, what in (("ttft", "time to first token of every turn"), ("tpot", "time per output token of every "
                       "turn"), ("session", "whole session, end to end")):
        p.add_argument(f"--slo-{name}-ms", type=float, default=None, help=f"goodput: the {what}, at most this")
    add_run_options(p, only=REPLAY_FLAGS, override={"--scenario": {"required": False, "default": None, "help":
                    "default: Server with --session-rate, Offline with --timing recorded or --concurrency, else "
                    "SingleStream"}})
    p.set_defaults(func=cmd_replay)


def values(text: str | None, flag: str, kind: type) -> list[Any]:
    if text is None:
        return []
    try:
        out = [kind(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise SettingsError(f"{flag} {text}: expected a number or a comma-separated list") from None
    if not out or any(v <= 0 for v in out):
        raise SettingsError(f"{flag} {text}: every value must be positive")
    return out


def scenario_of(args: argparse.Namespace) -> str:
    if args.scenario:
        return args.scenario
    if args.session_rate is not None or args.timing == "rate":
        return "Server"
    if args.timing == "recorded" or args.concurrency is not None:
        return "Offline"
    return "SingleStream"


def parameters(args: argparse.Namespace, concurrency: int | None) -> dict[str, Any]:
    """The session input's ``parameters`` (mlharness/loadgen/session_input.py) the flags ask for."""
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


def replay(args: argparse.Namespace, say: Callable[[str], None] | None = None, progress: Any = None) -> list[dict]:
    """Every point the flags ask for (one, or a sweep); returns each point's run folder and session summary."""
    from mlharness.run.run_args import overrides_of, run_options
    from mlharness.run.runner import run
    from mlharness.sessions.traces import load_trace

    sessions = load_trace(args.trace_file, args.format)  # a malformed trace: DatasetError naming line and field (exit 2)
    if not sessions:
        raise SettingsError(f"{args.trace_file}: the trace has no sessions")
    rates = values(args.session_rate, "--session-rate", float)
    conc = values(args.concurrency, "--concurrency", int)
    if rates and conc:
        raise SettingsError("--session-rate (Server) and --concurrency (Offline) are two ways to start sessions: "
                            "give one")
    points: list[tuple[str, float | None, int | None]] = ([(f"rate-{r:g}", r, None) for r in rates]
                                                          or [(f"concurrency-{c}", None, c) for c in conc]
                                                          or [("", None, None)])
    sweep = len(points) > 1
    if sweep and args.output is None:
        raise SettingsError("a sweep (several --session-rate or --concurrency values) needs --output: the folder "
                            "of its runs")
    scenario = scenario_of(args)
    results = []
    folder = Path(tempfile.mkdtemp(prefix="mlharness-replay-"))
    try:
        for label, rate, concurrency in points:
            manifest = write_manifest(folder, Path(args.trace_file), args.format, len(sessions), args.endpoint,
                                      args.model, parameters(args, concurrency))
            fixed: dict[str, Any] = {"manifest": manifest, "scenario": scenario, "say": say, "progress": progress,
                                     "mode": args.mode or "accuracy", "endpoints": []}
            if sweep:
                fixed["output"] = Path(args.output) / label
            if rate is not None:
                fixed["overrides"] = overrides_of(args, target_qps=rate)
            result = run(run_options(args, **fixed))
            summary = json.loads((result.output / "sessions_summary.json").read_text())
            results.append({"label": label or scenario, "session_rate": rate, "concurrency": concurrency,
                            "output": str(result.output), "summary": summary})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if sweep:
        (Path(args.output) / SWEEP_FILE).write_text(json.dumps(
            {"trace": str(args.trace_file), "scenario": scenario, "points": results}, indent=2) + "\n")
    return results


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
