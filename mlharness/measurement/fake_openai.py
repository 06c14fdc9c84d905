"""A fast fake OpenAI-compatible completions server: the other end of the ``openai`` predictor's benchmark and tests.

It generates nothing: ``POST /v1/completions`` streams ``text/event-stream`` chunks at a fixed pace, each carrying
one token as ``choices[0].text`` (``" w<id>"``) and ``choices[0].token_ids`` (vLLM's ``return_token_ids``
style), then ``data: [DONE]``, in a chunked body that ends properly so one keep-alive connection serves request
after request. Token ``i`` of an answer is :func:`token_ids` of the prompt: a client can check every id. The
answer has the request's ``max_tokens`` tokens (``tokens`` when it sets none), or stops earlier, as at an EOS,
after ``eos_after`` tokens (never before the request's ``min_tokens``). ``stream_options.include_usage`` adds the
usage chunk ``vllm bench serve`` reads. ``GET /v1/models`` names the served model; ``GET /stats`` tells the
connections opened, the requests, the streams open now and the most that were open at once (``POST /stats/reset``
zeroes the counters, open streams excepted). ``POST /v1/chat/completions`` takes chat messages with images (each
data URL checked to decode) and streams an oracle table's answer or an echo naming each image's sha256
(:mod:`mlharness.measurement.fake_openai_server`); ``--prefix-cache`` makes it report cached prompt tokens as a
server with prefix caching on does; ``--slots K`` streams at most K answers at once, the others waiting for a free
slot (an accelerator's batch: ``scripts/bench_pipeline.py --served``).

It is HTTP/1.1 over bare asyncio streams (uvloop when installed; :mod:`mlharness.measurement.fake_openai_server`),
one task per connection and one loop timer per chunk: one core streams tens of thousands of chunks a second and
holds ten thousand streams (the open-files limit is raised to its hard limit, the listen backlog is large).

Run it as ``python -m mlharness.measurement.fake_openai --port 0 --tokens N --delay-ms D [--port-file F]
[--cpu K]``; it prints ``PORT <n>`` once listening. From Python, :class:`FakeOpenAI` starts it in a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import select
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from mlharness.fileguard import UnusableFile, read_json
from mlharness.measurement.fake_openai_server import (
    DEFAULT_VOCAB,
    FakeServer,
    raise_open_files_limit,
    serve,
    token_ids,
)

__all__ = ["DEFAULT_VOCAB", "FakeOpenAI", "FakeServer", "main", "raise_open_files_limit", "token_ids"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlharness.measurement.fake_openai", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed as 'PORT <n>')")
    p.add_argument("--tokens", type=int, default=128, help="tokens of an answer when the request sets no max_tokens")
    p.add_argument("--eos-after", type=int, default=None, help="end every answer after this many tokens, as at "
                   "an EOS, even when max_tokens is larger")
    p.add_argument("--delay-ms", type=float, default=10.0, help="wait before each chunk (0: as fast as possible)")
    p.add_argument("--vocab", type=int, default=DEFAULT_VOCAB, help="token ids stay below this")
    p.add_argument("--model", default="fake-model", help="the served model's name")
    p.add_argument("--port-file", type=Path, default=None, help="write the port there once listening")
    p.add_argument("--cpu", type=int, default=None, help="pin the server to this core")
    p.add_argument("--chat-answers", type=Path, default=None, help="a JSON object: ChatPrompt.key -> answer text "
                   "(chat conversations it lacks are refused); without it a chat is answered by an echo")
    p.add_argument("--prefix-cache", action="store_true", help="report cached prompt tokens in chat answers and "
                   "enable_prefix_caching=\"True\" in /metrics")
    p.add_argument("--slots", type=int, default=None, help="stream at most this many answers at once; the others "
                   "wait for a free slot before their first byte (an accelerator's batch)")
    a = p.parse_args(argv)
    if a.tokens < 0 or a.delay_ms < 0 or a.vocab < 4 or (a.eos_after is not None and a.eos_after < 0):
        p.error("--tokens, --delay-ms and --eos-after must be >= 0 and --vocab >= 4")
    if a.slots is not None and a.slots < 1:
        p.error(f"--slots {a.slots}: expected at least 1 (or no --slots: no bound)")
    if a.cpu is not None:
        try:
            os.sched_setaffinity(0, {a.cpu})
        except (OSError, ValueError) as e:
            p.error(f"--cpu {a.cpu}: cannot pin to that core ({e}); cores here: {sorted(os.sched_getaffinity(0))}")
    raise_open_files_limit()
    try:
        import uvloop
    except ImportError:
        uvloop = None
    answers = None
    if a.chat_answers is not None:
        try:
            answers = read_json(a.chat_answers, "--chat-answers file")
        except UnusableFile as e:
            p.error(str(e))
        if not isinstance(answers, dict) or not all(isinstance(v, str) for v in answers.values()):
            p.error(f"--chat-answers {a.chat_answers}: not a JSON object of answer strings")
    server = FakeServer(a.tokens, a.delay_ms / 1000.0, a.eos_after, a.vocab, a.model, answers, a.prefix_cache,
                        a.slots)
    coro = serve(server, a.port, a.port_file)
    if uvloop is not None:
        uvloop.run(coro)
    else:
        asyncio.run(coro)
    return 0


class FakeOpenAI:
    """The fake server in a subprocess on 127.0.0.1, for ``with`` blocks: ``.url`` (``http://127.0.0.1:PORT``),
    ``.stats()``, ``.reset()``, ``.pid``; killed on exit."""

    def __init__(self, tokens: int = 128, delay_s: float = 0.01, cpu: int | None = None, eos_after: int | None = None,
                 vocab: int = DEFAULT_VOCAB, model: str = "fake-model", start_timeout_s: float = 30.0,
                 chat_answers: Path | None = None, prefix_cache: bool = False, slots: int | None = None):
        self.args = [sys.executable, "-m", "mlharness.measurement.fake_openai", "--port", "0", "--tokens",
                     str(tokens), "--delay-ms", repr(delay_s * 1000.0), "--vocab", str(vocab), "--model", model]
        self.args += [] if cpu is None else ["--cpu", str(cpu)]
        self.args += [] if eos_after is None else ["--eos-after", str(eos_after)]
        self.args += [] if chat_answers is None else ["--chat-answers", str(chat_answers)]
        self.args += ["--prefix-cache"] if prefix_cache else []
        self.args += [] if slots is None else ["--slots", str(slots)]
        self.model, self.start_timeout_s = model, start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=50)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def __enter__(self) -> FakeOpenAI:
        src = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            self.url = f"http://127.0.0.1:{self._port()}"
        except BaseException:
            self.__exit__()
            raise
        # stderr drained from now on (a full pipe would stall the server); its tail is kept for errors
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        return self

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail.append(line.decode(errors="replace"))

    def _port(self) -> int:
        assert self.proc is not None and self.proc.stdout is not None
        end = time.monotonic() + self.start_timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = end - time.monotonic()
            ready = select.select([self.proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                raise RuntimeError(f"the fake OpenAI server did not start within {self.start_timeout_s:g} s")
            byte = os.read(self.proc.stdout.fileno(), 1)
            if not byte:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"the fake OpenAI server exited before listening: {err.strip()[-2000:]}")
            line += byte
        return int(line.split()[1])

    def _call(self, method: str, path: str) -> dict[str, Any]:
        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "/stats")

    def reset(self) -> dict[str, Any]:
        return self._call("POST", "/stats/reset")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


if __name__ == "__main__":
    sys.exit(main())
