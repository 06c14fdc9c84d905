"""Side by side: one multi-turn agentic trace replayed against one local OpenAI-compatible server by mlharness's
session player, by AIPerf and by GuideLLM; prints sessions/s, turns/s and the client's CPU time per turn.

    .venv/bin/python scripts/bench_sessions.py [--trace T.jsonl] [--sessions 16 --turns 6] [--concurrency 4]
        [--aiperf PATH/TO/aiperf] [--guidellm PATH/TO/guidellm]

AIPerf and GuideLLM pin libraries mlharness does not, so each goes in a virtual environment of its own
(``python3 -m venv ../aiperf-env && ../aiperf-env/bin/pip install aiperf==0.13.0``; GuideLLM 0.8.1 likewise, it needs
Python 3.12) and is named here, or found on PATH.

The server is a small aiohttp one in this file, run in its own process on 127.0.0.1 (the project's fake OpenAI
server, ``mlharness/measurement/fake_openai_server.py``, answers chat with text only and checks messages as image
prompts are checked; an agentic replay needs answers that call tools): it streams each answer as ``--tokens``
chunks, ``--token-delay-ms`` apart, a ``bash`` tool call when the request offers tools and text otherwise, then a
usage chunk. Each client runs in its own process, one after another, so its CPU time (user + system, its child
processes included, from ``RUSAGE_CHILDREN``) is its own; rates are over each client's whole process, start-up
included, and, where the tool reports it, over its own measurement window.

What each client replays of the trace (``--trace``, else ``mlharness.kinds.sessions.synth.synthetic_agentic_trace``):

- mlharness: the trace as sessions (``load_trace``), every session through :class:`SessionPlayer` with
  ``history: generated`` (the server's own answers in the history, the recorded tool results re-keyed to its call
  ids), ``--concurrency`` sessions at once, think times scaled by ``--think-scale`` (0: none).
- AIPerf: the trace converted to its ``mooncake_trace`` rows with ``message_mode: delta`` (one row per turn: the
  turn's new messages, the session's ``tools``; AIPerf threads the live answers, tool calls included, into the
  history), ``--concurrency`` conversations at once, no fixed schedule. AIPerf does not re-key recorded tool results
  to the live call ids (its documentation says so), so a server that checks the pairing would refuse them; this
  server does not check. AIPerf counts tokens with a tokenizer it would fetch from the Hugging Face Hub; here its
  ``builtin`` one (tiktoken's o200k_base, no network) unless ``--tokenizer`` names a local one.
- GuideLLM: GuideLLM's file datasets express a conversation as turn-indexed columns (``prefix``, ``prompt_0``,
  ``output_tokens_count_0``, ...) of user text; its tool calling is a user turn that expects a tool call followed by
  one injected (mocked) tool result and a text answer, so an agentic chain of tool calls answered by the trace's
  recorded results cannot be expressed from a file. The trace is flattened: each client turn becomes a user prompt
  (tool results as their text), the answers are the server's. Same concurrency.

A tool that is absent (its executable not found) is skipped with a line saying so. This is a script, not a test:
its numbers depend on the host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- the server (its own process)

def serve(port: int, tokens: int, delay_s: float) -> None:
    from aiohttp import web

    counter = {"n": 0}

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        counter["n"] += 1
        rid = f"chatcmpl-{counter['n']}"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: dict[str, Any]) -> None:
            await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": rid, "object": "chat.completion.chunk", "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        n = max(1, min(tokens, int(body.get("max_tokens") or tokens)))
        if body.get("tools"):
            call = f"call_{counter['n']}"
            await send(chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": call, "type": "function",
                                                                    "function": {"name": "bash", "arguments": ""}}]}))
            parts = ['{"command": "', *["ls " for _ in range(max(0, n - 2))], '"}']
            for part in parts:
                if delay_s:
                    await asyncio.sleep(delay_s)
                await send(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
            await send(chunk({}, "tool_calls"))
        else:
            for i in range(n):
                if delay_s:
                    await asyncio.sleep(delay_s)
                await send(chunk({"role": "assistant", "content": f"w{i} "} if i == 0 else {"content": f"w{i} "}))
            await send(chunk({}, "stop"))
        prompt = len(json.dumps(body.get("messages", []))) // 4
        if body.get("stream_options", {}).get("include_usage"):
            await send({"id": rid, "object": "chat.completion.chunk", "choices": [],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", lambda r: web.Response(text="ok"))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---------------------------------------------------------------- mlharness's player (its own process)

def play(url: str, trace: Path, concurrency: int, think_scale: float, max_tokens: int) -> None:
    from mlharness.kinds.sessions.openai_engine import OpenAIChatEngine
    from mlharness.kinds.sessions.replay import ReplayOptions, SessionPlayer
    from mlharness.kinds.sessions.traces import load_trace

    sessions = load_trace(trace)

    async def main() -> dict[str, Any]:
        engine = OpenAIChatEngine(url, "fake", max_connections=concurrency)
        player = SessionPlayer(engine, ReplayOptions(think_scale=think_scale, max_tokens=max_tokens))
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int, s: Any) -> Any:
            async with gate:
                return await player.play(s, i)

        start = time.perf_counter()
        done = await asyncio.gather(*(one(i, s) for i, s in enumerate(sessions)))
        wall = time.perf_counter() - start
        await engine.aclose()
        return {"sessions": sum(r.ok for r, _ in done), "turns": sum(len(a) for _, a in done), "window_s": wall,
                "diverged": sum(t.diverged for r, _ in done for t in r.turns),
                "errors": [r.error for r, _ in done if r.error][:3]}

    print(json.dumps(asyncio.run(main())))


# ---------------------------------------------------------------- trace conversions

def aiperf_rows(sessions: list[Any], max_tokens: int) -> list[dict[str, Any]]:
    rows = []
    for s in sessions:
        for k, turn in enumerate(s.turns):
            msgs = list(turn.messages)
            if k == 0 and s.system:
                msgs = [{"role": "system", "content": s.system}, *msgs]
            row: dict[str, Any] = {"session_id": s.id, "message_mode": "delta", "messages": msgs,
                                   "output_length": turn.max_tokens or max_tokens}
            tools = s.tools_for(turn)
            if tools:
                row["tools"] = list(tools)
            if k == 0:
                row["timestamp"] = 0
            else:
                row["delay"] = 0
            rows.append(row)
    return rows


def guidellm_rows(sessions: list[Any], max_tokens: int) -> list[dict[str, Any]]:
    rows = []
    for s in sessions:
        row: dict[str, Any] = {"prefix": s.system or ""}
        for k, turn in enumerate(s.turns):
            row[f"prompt_{k}"] = "\n\n".join(str(m.get("content") or "") for m in turn.messages)
            row[f"output_tokens_count_{k}"] = turn.max_tokens or max_tokens
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the driver

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the server on 127.0.0.1:{port} did not come up within {timeout_s:g} s")


def run_client(name: str, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None
               ) -> tuple[subprocess.CompletedProcess | None, float, float]:
    """Run one client to its end; its wall time and CPU seconds (user + system, its children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        print(f"{name}: no result within {timeout_s:g} s", file=sys.stderr)
        return None, time.perf_counter() - start, 0.0
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(f"{name}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}", file=sys.stderr)
    return done, wall, cpu


def find_tool(given: str | None, name: str) -> str | None:
    for candidate in ([given] if given else []) + [shutil.which(name) or ""]:
        if candidate and Path(candidate).exists():
            return candidate
    return None


def aiperf_window(artifacts: Path) -> tuple[float | None, int | None]:
    """AIPerf's own measurement: its benchmark duration (s) and request count, from its JSON export."""
    for f in artifacts.rglob("profile_export_aiperf.json"):
        data = json.loads(f.read_text())
        dur = data.get("benchmark_duration", {})
        count = data.get("request_count", {})
        return (dur.get("avg") if isinstance(dur, dict) else dur), (
            int(count.get("avg")) if isinstance(count, dict) and count.get("avg") is not None else None)
    return None, None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help="an agentic trace (default: a synthetic one)")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32, help="chunks per answer")
    ap.add_argument("--token-delay-ms", type=float, default=0.0)
    ap.add_argument("--think-scale", type=float, default=0.0)
    ap.add_argument("--aiperf", help="the aiperf executable (default: on PATH)")
    ap.add_argument("--guidellm", help="the guidellm executable (default: on PATH)")
    ap.add_argument("--tokenizer", help="a local tokenizer directory for AIPerf and GuideLLM")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per client")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--play", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve, a.tokens, a.token_delay_ms / 1000)
    if a.play:
        return play(a.play[0], Path(a.play[1]), a.concurrency, a.think_scale, a.tokens)

    from mlharness.kinds.sessions.synth import synthetic_agentic_trace
    from mlharness.kinds.sessions.traces import load_trace

    work = Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    trace = a.trace or synthetic_agentic_trace(work / "trace.jsonl", sessions=a.sessions, turns=a.turns)
    sessions = load_trace(trace)
    n_sessions, n_turns = len(sessions), sum(len(s.turns) for s in sessions)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--tokens", str(a.tokens),
                               "--token-delay-ms", str(a.token_delay_ms)])
    rows: list[tuple[str, str, float | None, float | None, float | None]] = []
    try:
        wait_up(port)
        done, wall, cpu = run_client("mlharness", [sys.executable, __file__, "--play", url, str(trace),
                                                   "--concurrency", str(a.concurrency), "--tokens", str(a.tokens),
                                                   "--think-scale", str(a.think_scale)], a.timeout)
        if done is not None and done.returncode == 0:
            r = json.loads(done.stdout.strip().splitlines()[-1])
            note = f"{r['turns']} turns answered, {r['diverged']} diverged, window {r['window_s']:.2f} s"
            rows.append(("mlharness", note, r["sessions"] / wall, r["turns"] / wall, cpu / max(1, r["turns"])))
            rows.append(("mlharness (window)", "the player's own timing", r["sessions"] / r["window_s"],
                         r["turns"] / r["window_s"], None))
        rows += bench_aiperf(a, url, work, sessions, n_sessions, n_turns)
        rows += bench_guidellm(a, url, work, sessions, n_sessions, n_turns)
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"\ntrace: {trace} ({n_sessions} sessions, {n_turns} turns); {a.concurrency} sessions at once; "
          f"answers of {a.tokens} chunks, {a.token_delay_ms:g} ms apart; rates over each client's whole process")
    print(f"{'client':<20} {'sessions/s':>11} {'turns/s':>9} {'CPU ms/turn':>12}  note")
    for name, note, sps, tps, cpt in rows:
        def f(x: float | None, scale: float = 1.0) -> str:
            return "-" if x is None else f"{x * scale:.2f}"
        print(f"{name:<20} {f(sps):>11} {f(tps):>9} {f(cpt, 1000):>12}  {note}")


def bench_aiperf(a: argparse.Namespace, url: str, work: Path, sessions: list[Any], n_sessions: int, n_turns: int
                 ) -> list[tuple[str, str, float | None, float | None, float | None]]:
    exe = find_tool(a.aiperf, "aiperf")
    if exe is None:
        print("aiperf: not found (give --aiperf); skipped", file=sys.stderr)
        return [("aiperf", "skipped: not installed", None, None, None)]
    data = work / "aiperf.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in aiperf_rows(sessions, a.tokens)))
    out = work / "aiperf-artifacts"
    cmd = [exe, "profile", "--model", "fake", "--url", url, "--endpoint-type", "chat", "--streaming",
           "--input-file", str(data), "--custom-dataset-type", "mooncake_trace", "--no-fixed-schedule",
           "--concurrency", str(a.concurrency), "--conversation-num", str(n_sessions),
           "--tokenizer", a.tokenizer or "builtin", "--artifact-dir", str(out), "--ui-type", "none"]
    # no HF_HUB_OFFLINE here: AIPerf's offline path refuses a local tokenizer directory (HFValidationError); its
    # online path loads a local directory without the network
    done, wall, cpu = run_client("aiperf", cmd, a.timeout)
    if done is None or done.returncode != 0:
        return [("aiperf", "failed (see above)", None, None, None)]
    window, count = aiperf_window(out)
    turns = count or n_turns
    rows = [("aiperf", f"{turns} requests; window {window or 0:.2f} s", n_sessions / wall, turns / wall,
             cpu / max(1, turns))]
    if window:
        rows.append(("aiperf (window)", "its benchmark_duration", n_sessions / window, turns / window, None))
    return rows


def bench_guidellm(a: argparse.Namespace, url: str, work: Path, sessions: list[Any], n_sessions: int, n_turns: int
                   ) -> list[tuple[str, str, float | None, float | None, float | None]]:
    exe = find_tool(a.guidellm, "guidellm")
    if exe is None:
        print("guidellm: not found (give --guidellm); skipped", file=sys.stderr)
        return [("guidellm", "skipped: not installed", None, None, None)]
    data = work / "guidellm.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in guidellm_rows(sessions, a.tokens)))
    out = work / "guidellm-out"
    backend = {"kind": "openai_http", "target": url, "model": "fake", "request_format": "/v1/chat/completions"}
    cmd = [exe, "run", "--backend", json.dumps(backend), "--profile", f"kind=concurrent,streams={a.concurrency}",
           "--data", f"kind=json_file,path={data}", "--constraint", f"kind=max_requests,count={n_turns}",
           "--output", f"kind=json,path={out / 'benchmarks.json'}", "--disable-console-interactive"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done, wall, cpu = run_client("guidellm", cmd, a.timeout, env)
    if done is None or done.returncode != 0:
        return [("guidellm", "failed (see above)", None, None, None)]
    return [("guidellm", f"{n_turns} requests (tool results flattened to user text)", n_sessions / wall,
             n_turns / wall, cpu / max(1, n_turns))]


if __name__ == "__main__":
    main()
