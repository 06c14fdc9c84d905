"""The stand-in e2e-rag-qna judge (``mlharness.tasks.e2e_rag.judge_server``) on 127.0.0.1 for one test, stopped
when the test ends, hanging calls included."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from mlharness.tasks.e2e_rag.judge_server import JudgeServer


@contextlib.contextmanager
def running_judge(mode: str = "ok", target: str | None = None, hang_s: float = 10.0) -> Iterator[JudgeServer]:
    server = JudgeServer(port=0, mode=mode, target=target, hang_s=hang_s)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(timeout=5)
