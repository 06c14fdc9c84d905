"""Generation by OpenAI-compatible servers: the predictor, and the manifests that send a model's prompts (or its
audio, for transcription) to endpoints instead of a local framework.

The rest of the package is the client's inside: the asyncio request runner (``async_runner``), HTTP and SSE
(``http``, ``sse``), request bodies (``request``), stream checks and deadlines (``stream``, ``watch``), the
manifest's options (``options``), worker processes (``procs``) and transcription endpoints (``audio``). Import the
names below from here; they load the client on first use, so a worker process that needs only the SSE parser does
not import it.
"""

from __future__ import annotations

from typing import Any

PUBLIC = {
    "OpenAIPredictor": "client",
    "endpoint_manifest": "client",
    "transcription_manifest": "client",
}


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{PUBLIC[name]}"), name)


__all__ = list(PUBLIC)
