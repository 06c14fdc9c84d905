"""Requests/s of the ``openai`` predictor's chat path against a bare request loop, on the same local server.

Both send the same chat requests (a system message, an image as a base64 data URL and a question) to the fake
OpenAI-compatible server (:mod:`mlharness.measurement.fake_openai`: it decodes every image and streams an answer of
about 90 one-character tokens, then its usage), with the same number of requests in flight:

- **mlharness**: the ``openai`` predictor driven as an Offline run drives it: every request submitted at once
  with a token stream each (``TokenRequest`` holding the ``ChatPrompt``), ``generation.text`` on, so each sample
  completes with its text as UTF-8 bytes; its deadlines, checks and retries in place.
- **bare**: one aiohttp session (on uvloop), a semaphore, the same request bodies (built before the clock
  starts), each stream read to its end as it arrives, split into events and every event parsed with orjson to keep
  the text (what any client that keeps the answer does); nothing else. ``--bare lines`` reads line by line and
  parses with ``json`` instead, as :mod:`mlharness.measurement.bare_client` (the ``bench client`` baseline) does.

The two alternate for ``--rounds`` rounds; the median of each is reported with the ratio (the goal: 0.95 or more),
and the bench process's CPU time a request (user + system, the server's excluded), which a busy host disturbs less
than the rates.
``--cold`` leaves the chat payloads unbuilt before each mlharness round (the first request of a sample then
serialises its messages on the timed path). The bench pins itself to one core and the server to another where
there are two.

    python scripts/bench_chat.py [--count 512] [--concurrency 64] [--image-side 256] [--rounds 5] [--delay-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlharness.measurement.fake_openai import FakeOpenAI  # noqa: E402
from mlharness.predictors import PREDICTORS  # noqa: E402
from mlharness.predictors.base import PredictorConfig  # noqa: E402
from mlharness.predictors.chat import ChatPrompt, parse_chat  # noqa: E402
from mlharness.predictors.generative import GenerationConfig, TokenRequest  # noqa: E402
from mlharness.predictors.openai import chat_body  # noqa: E402

MAX_TOKENS = 256
RUN_TIMEOUT_S = 300.0


def make_prompts(count: int, side: int, distinct: int) -> list[ChatPrompt]:
    """``count`` samples over ``distinct`` noise images of ``side`` pixels (PNG), each its own question."""
    from PIL import Image

    rng = np.random.default_rng(0)
    images = []
    for _ in range(distinct):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buf, "PNG")
        images.append(buf.getvalue())
    return [parse_chat([{"role": "system", "content": "Answer in one line."},
                        {"role": "user", "content": [{"type": "image", "image": images[i % distinct]},
                                                     {"type": "text", "text": f"What is in picture {i}?"}]}], i)
            for i in range(count)]


class Stream:
    """The token stream of one sample: counts what an Offline SUT keeps."""

    def __init__(self, sink: list) -> None:
        self.sink = sink

    def first(self, ids: np.ndarray) -> None:
        pass

    def done(self, ids: np.ndarray, response: np.ndarray | None = None) -> None:
        self.sink.append((len(ids), 0 if response is None else len(response)))

    def fail(self, error: BaseException) -> None:
        self.sink.append(error)


def run_mlharness(url: str, prompts: list[ChatPrompt], concurrency: int, cold: bool) -> tuple[float, float]:
    """Requests/s and the process's CPU seconds a request."""
    g = GenerationConfig(max_new_tokens=MAX_TOKENS)
    g.text = True
    p = PREDICTORS.get("openai")(PredictorConfig(
        model_path=None, input_names=[], output_names=[], generation=g,
        options={"endpoints": [url], "model": "fake-model", "max_concurrency": concurrency}))
    p.load()
    if cold:
        chat_body._cache.clear()
    else:  # as at load time: each sample's messages serialised before LoadGen starts
        for pr in prompts:
            chat_body.payload(pr)
    got: list = []
    try:
        start, cpu = time.perf_counter(), _cpu()
        p.submit([TokenRequest(pr.index, pr) for pr in prompts], [Stream(got) for _ in prompts])
        if not p.drain(RUN_TIMEOUT_S):
            raise RuntimeError("the mlharness requests did not finish")
        seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    finally:
        p.close()
    bad = [x for x in got if isinstance(x, BaseException)]
    if bad or len(got) != len(prompts):
        raise RuntimeError(f"mlharness: {len(bad)} failed ({bad[:1]}), {len(got)} of {len(prompts)} done")
    return len(prompts) / seconds, cpu / len(prompts)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def _bare(url: str, bodies: list[bytes], concurrency: int, lines: bool) -> float:
    import aiohttp
    from orjson import loads

    gate = asyncio.Semaphore(concurrency)
    texts: list[str] = []

    async def one(session: aiohttp.ClientSession, body: bytes) -> None:
        parts = []
        async with gate, session.post(f"{url}/v1/chat/completions", data=body,
                                      headers={"Content-Type": "application/json"}) as r:
            r.raise_for_status()
            if lines:  # as mlharness.measurement.bare_client reads: line by line, json per event
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        for c in json.loads(line[6:])["choices"]:
                            parts.append(c["delta"].get("content") or "")
                texts.append("".join(parts))
                return
            pending = b""
            async for chunk in r.content.iter_any():  # events split as they arrive, each parsed once (orjson)
                pending += chunk
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    if event.startswith(b"data: {"):
                        for c in loads(event[6:])["choices"]:
                            parts.append(c["delta"].get("content") or "")
        texts.append("".join(parts))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        start, cpu = time.perf_counter(), _cpu()
        await asyncio.gather(*(one(session, b) for b in bodies))
        seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    if len(texts) != len(bodies) or not all(texts):
        raise RuntimeError("bare: some answers were empty")
    return len(bodies) / seconds, cpu / len(bodies)


def run_bare(url: str, prompts: list[ChatPrompt], concurrency: int, lines: bool = False) -> tuple[float, float]:
    fields = {"model": "fake-model", "stream": True, "stream_options": {"include_usage": True},
              "max_tokens": MAX_TOKENS, "temperature": 0.0}
    bodies = [json.dumps({"messages": pr.openai_messages, **fields}).encode() for pr in prompts]
    try:
        import uvloop

        return uvloop.run(_bare(url, bodies, concurrency, lines))
    except ImportError:
        return asyncio.run(_bare(url, bodies, concurrency, lines))


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--count", type=int, default=512, help="requests per round")
    a.add_argument("--concurrency", type=int, default=64, help="requests in flight, both clients")
    a.add_argument("--image-side", type=int, default=256, help="pixels of each (square, noise) PNG image")
    a.add_argument("--distinct", type=int, default=16, help="different images among the samples")
    a.add_argument("--rounds", type=int, default=5)
    a.add_argument("--delay-ms", type=float, default=0.0, help="the server's wait before each chunk")
    a.add_argument("--bare", choices=("events", "lines"), default="events", help="events: the bare loop splits "
                   "each read into events and parses them with orjson; lines: line by line with json, as "
                   "mlharness.measurement.bare_client does")
    a.add_argument("--cold", action="store_true", help="leave the chat payloads unbuilt before mlharness rounds")
    args = a.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[-1] if len(cores) > 1 else None
    if server_core is not None:
        os.sched_setaffinity(0, {cores[0]})
    threading.current_thread().name = "bench"
    prompts = make_prompts(args.count, args.image_side, args.distinct)
    body_kb = len(chat_body.payload(prompts[0]).messages) / 1024
    chat_body._cache.clear()
    ours, bare, ours_cpu, bare_cpu = [], [], [], []
    with FakeOpenAI(delay_s=args.delay_ms / 1000.0, cpu=server_core) as srv:
        run_bare(srv.url, prompts[: args.concurrency], args.concurrency)  # warm both paths once
        run_mlharness(srv.url, prompts[: args.concurrency], args.concurrency, cold=False)
        for r in range(args.rounds):
            rate, cpu = run_bare(srv.url, prompts, args.concurrency, args.bare == "lines")
            bare.append(rate)
            bare_cpu.append(cpu)
            rate, cpu = run_mlharness(srv.url, prompts, args.concurrency, args.cold)
            ours.append(rate)
            ours_cpu.append(cpu)
            print(f"round {r + 1}: bare {bare[-1]:,.1f} req/s ({bare_cpu[-1] * 1e6:,.0f} us CPU a request), "
                  f"mlharness {ours[-1]:,.1f} req/s ({ours_cpu[-1] * 1e6:,.0f} us) ratio {ours[-1] / bare[-1]:.3f}",
                  flush=True)
    m_ours, m_bare = statistics.median(ours), statistics.median(bare)
    print(json.dumps({"count": args.count, "concurrency": args.concurrency, "image_side": args.image_side,
                      "messages_kb": round(body_kb, 1), "delay_ms": args.delay_ms, "cold": args.cold, "bare": args.bare,
                      "bench_core": cores[0] if server_core is not None else None, "server_core": server_core,
                      "bare_requests_per_s": round(m_bare, 1), "mlharness_requests_per_s": round(m_ours, 1),
                      "ratio": round(m_ours / m_bare, 3),
                      "bare_cpu_us_per_request": round(statistics.median(bare_cpu) * 1e6),
                      "mlharness_cpu_us_per_request": round(statistics.median(ours_cpu) * 1e6)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
