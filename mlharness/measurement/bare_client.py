"""The bare client: the least a Python client does to drive an OpenAI-compatible server, the limit ``mlharness bench
client`` holds mlharness's own client against. One aiohttp session, a semaphore of ``concurrency`` requests in
flight, each stream read to its end and its ``token_ids`` counted (each event parsed as JSON, as any client that
keeps the ids must); nothing else (no LoadGen, no deadlines, no checks).

``python -m mlharness.measurement.bare_client --url URL --count N --concurrency C --tokens T [--cpu K]`` prints one
JSON object: requests, tokens, seconds, and the CPU seconds the process spent while they ran."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from mlharness.measurement.fake_openai import raise_open_files_limit


async def drive(url: str, count: int, concurrency: int, tokens: int, model: str = "fake-model") -> dict[str, Any]:
    import aiohttp

    gate = asyncio.Semaphore(concurrency)
    got: list[int] = []

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        body = {"model": model, "prompt": [1, 2, 3 + i % 1000], "max_tokens": tokens, "stream": True,
                "return_token_ids": True}
        n = 0
        async with gate, session.post(f"{url}/v1/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.content:
                if line.startswith(b"data: {"):
                    n += len(json.loads(line[6:])["choices"][0]["token_ids"])
        got.append(n)

    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        start, cpu = time.perf_counter(), _cpu()
        await asyncio.gather(*(one(session, i) for i in range(count)))
        seconds, cpu_s = time.perf_counter() - start, _cpu() - cpu
    return {"requests": len(got), "tokens": sum(got), "seconds": seconds, "cpu_s": cpu_s,
            "requests_per_s": len(got) / seconds, "tokens_per_s": sum(got) / seconds,
            "short": sum(1 for n in got if n != tokens)}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlharness.measurement.bare_client", description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True, help="the server's base URL (http://HOST:PORT)")
    p.add_argument("--count", type=int, required=True, help="requests to send")
    p.add_argument("--concurrency", type=int, required=True, help="requests in flight at most")
    p.add_argument("--tokens", type=int, required=True, help="max_tokens of each request")
    p.add_argument("--model", default="fake-model")
    p.add_argument("--cpu", type=int, default=None, help="pin the client to this core")
    a = p.parse_args(argv)
    if min(a.count, a.concurrency, a.tokens) < 1:
        p.error("--count, --concurrency and --tokens must be at least 1")
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    raise_open_files_limit()  # a socket per stream
    try:
        import uvloop

        run: Any = uvloop.run
    except ImportError:
        run = asyncio.run
    print(json.dumps(run(drive(a.url.rstrip("/"), a.count, a.concurrency, a.tokens, a.model))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
