"""vLLM's OpenAI-compatible server (the CPU build) on a free 127.0.0.1 port, for the tests against a real server:
``with vllm_server(python, model, log, "--max-model-len", "640") as url: ...``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

START_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def vllm_server(python: str, model: Path, log_dir: Path, log_name: str, *extra_args: str) -> Iterator[str]:
    """Serve ``model`` as ``tiny`` (float32, 1 GiB of KV cache, one thread) with ``extra_args`` added; yields the
    base URL once ``/v1/models`` answers (the test fails after :data:`START_TIMEOUT_S` or if the server exits),
    the server's output in ``log_dir/LOG_NAME-PORT.log``; stopped (SIGTERM, then SIGKILL after 30 s) at the end."""
    port = free_port()
    log = log_dir / f"{log_name}-{port}.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                                 "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
                                 "--dtype", "float32", *extra_args],
                                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the vLLM server did not come up in {START_TIMEOUT_S} s:\n"
                                f"{log.read_text()[-3000:]}")
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
