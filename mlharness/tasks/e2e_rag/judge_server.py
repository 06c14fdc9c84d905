"""A deterministic stand-in for e2e-rag-qna's LLM judge: an OpenAI-compatible ``/v1/chat/completions`` endpoint
that reads :data:`~mlharness.tasks.e2e_rag.judge.JUDGE_PROMPT`'s fields back out of the request and rules by
normalised match. It is NOT an LLM and its figures are not the benchmark's: it lets the accuracy path (and its
failure modes) run without a GPU, in tests and for users checking their setup.

The rule: the answer is correct when the ground truth, lower-cased with punctuation dropped and spaces collapsed,
appears as a run of whole words in the answer so normalised (``1843`` in ``It was founded in 1843.``), and the
answer is not empty or ``unknown``. The reply is a fenced JSON block, as chat models often answer, so the client's
code-block extraction is exercised.

Modes, for testing the client's failures: ``malformed`` (a reply with no JSON in it), ``hang`` (no reply until
the server stops, at most ``hang_s``), ``trickle`` (a reply whose bytes come one every 0.2 s, for at most
``hang_s``: each wait is short, the whole is not), ``http500``. With ``target`` set, the mode applies only to questions that
contain it; the others are answered by the rule.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("ok", "malformed", "hang", "trickle", "http500")
_FIELDS = re.compile(r"QUESTION: (?P<q>.*?)\n\nGROUND TRUTH ANSWER: (?P<gt>.*?)\n\nLLM ANSWER: (?P<a>.*?)\n\n"
                     r"Grade in two steps\.", re.DOTALL)


def normalise(text: str) -> list[str]:
    return re.sub(r"[^\w\s]", " ", text.lower()).split()


def rule(ground_truth: str, answer: str) -> bool:
    """The stand-in's verdict: the normalised ground truth is a run of whole words of the normalised answer."""
    gt, words = normalise(ground_truth), normalise(answer)
    if not gt or not words or words == ["unknown"]:
        return False
    return any(words[i:i + len(gt)] == gt for i in range(len(words) - len(gt) + 1))


class JudgeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, mode: str = "ok", target: str | None = None, hang_s: float = 30.0,
                 host: str = "127.0.0.1"):
        if mode not in MODES:
            raise ValueError(f"judge server mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode, self.target, self.hang_s = mode, target, hang_s
        self.stopping = threading.Event()
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []  # every request body, for tests of what a client sends
        self.lock = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/chat/completions"

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: JudgeServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the client reports what matters
        pass

    def _send(self, status: int, body: dict[str, Any], trickle: bool = False) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not trickle:
            self.wfile.write(data)
            return
        deadline = time.monotonic() + self.server.hang_s
        for byte in data:
            if self.server.stopping.wait(0.2) or time.monotonic() > deadline:
                return
            self.wfile.write(bytes([byte]))
            self.wfile.flush()

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        with self.server.lock:
            self.server.requests += 1
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            prompt = body["messages"][-1]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            self._send(400, {"error": {"message": "expected a chat completion request"}})
            return
        with self.server.lock:
            self.server.bodies.append(body)
        fields = _FIELDS.search(prompt)
        if fields is None:
            self._send(400, {"error": {"message": "not e2e-rag-qna's judge prompt"}})
            return
        mode = self.server.mode if self.server.target is None or self.server.target in fields["q"] else "ok"
        if mode == "hang":
            deadline = time.monotonic() + self.server.hang_s
            while not self.server.stopping.is_set() and time.monotonic() < deadline:
                self.server.stopping.wait(0.05)
            return
        if mode == "http500":
            self._send(500, {"error": {"message": "judge unavailable (stand-in http500 mode)"}})
            return
        if mode == "malformed":
            content = "I think the answer is probably correct, but I am not sure."
        else:
            correct = rule(fields["gt"], fields["a"])
            why = "the ground truth appears in the answer" if correct else "the ground truth is not in the answer"
            content = "```json\n" + json.dumps({"correct": correct, "reasoning": why}, indent=4) + "\n```"
        self._send(200, {"id": "judge-standin", "object": "chat.completion", "model": body.get("model", ""),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}]},
                   trickle=mode == "trickle")


def serve(port: int, mode: str = "ok", seconds: float | None = None) -> None:
    """Run the stand-in in the foreground until interrupted (or for ``seconds``)."""
    server = JudgeServer(port=port, mode=mode)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        if seconds is None:
            while thread.is_alive():
                thread.join(0.5)
        else:
            time.sleep(seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":  # python -m mlharness.tasks.e2e_rag.judge_server --port 8123
    import argparse

    parser = argparse.ArgumentParser(description="e2e-rag-qna's stand-in judge (normalised match, not an LLM)")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--mode", choices=MODES, default="ok")
    args = parser.parse_args()
    print(f"stand-in judge (normalised match, not an LLM) at http://127.0.0.1:{args.port}/v1/chat/completions")
    serve(args.port, args.mode)
