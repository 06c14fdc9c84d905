"""Whether the server reuses cached prompt prefixes, where it says so.

Some benchmarks (qwen3-vl-235b-a22b) require prefix caching off: a repeated system prompt or image would otherwise
be computed once and reused, which the rules forbid. A server tells it two ways: vLLM's ``/metrics`` has a
``vllm:cache_config_info`` line whose ``enable_prefix_caching`` label is ``"True"`` when the cache is on (read
once, at load), and an answer's ``usage.prompt_tokens_details.cached_tokens`` counts the prompt tokens it took
from the cache (read from every answer that reports usage). Both are kept in the run's metadata (the predictor's ``prefix_cache``);
the first answer that reused cached tokens is a warning on the terminal (a cache that is merely on is only logged:
vLLM turns it on by default, and most benchmarks allow it). With the framework option
``require_no_prefix_cache: true`` the run fails instead: at load when ``/metrics`` says the cache is on, else at
the first answer that reused one.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from typing import Any

from mlharness.errors import PredictorError

log = logging.getLogger(__name__)

METRICS_TIMEOUT_S = 5.0
METRICS_BYTES = 8 << 20
_CONFIG = re.compile(rb'^vllm:cache_config_info\{[^}]*enable_prefix_caching="(\w+)"', re.M)


class PrefixCacheWatch:
    """The run's record of cached prompt tokens (``describe`` goes into the run's metadata)."""

    def __init__(self, required_off: bool):
        self.required_off = required_off
        self.metrics: dict[str, bool] = {}  # endpoint -> enable_prefix_caching, where /metrics says
        self.requests = 0  # answers that reused cached prompt tokens
        self.tokens = 0
        self._lock = threading.Lock()

    def configured(self, base: str, enabled: bool | None) -> None:
        if enabled is None:
            return
        self.metrics[base] = enabled
        if not enabled:
            return
        what = f"{base} has prefix caching on (its /metrics: enable_prefix_caching=\"True\")"
        if self.required_off:
            raise PredictorError(f"framework 'openai': {what}, and options.require_no_prefix_cache is set: start "
                                 f"the server without it (vllm serve --no-enable-prefix-caching)")
        log.info("%s; answers may reuse cached prompt prefixes (options.require_no_prefix_cache refuses that)", what)

    def answered(self, cached: int, index: int, url: str) -> None:
        """An answer whose prompt reused ``cached`` tokens (> 0) from the server's cache."""
        with self._lock:
            self.requests += 1
            self.tokens += cached
            first = self.requests == 1
        what = (f"endpoint {url}, sample {index} (qsl_idx): the server reused {cached} cached prompt token(s) "
                f"(usage.prompt_tokens_details.cached_tokens): prefix caching is on")
        if self.required_off:
            raise PredictorError(f"{what}, and options.require_no_prefix_cache is set")
        if first:
            log.warning("%s; the run's metadata counts every such answer (predictor.prefix_cache)", what)

    def merge(self, requests: int, tokens: int) -> None:
        """What a client process's answers reused (its own watch already failed them where that is required)."""
        with self._lock:
            first = self.requests == 0 and requests > 0
            self.requests += requests
            self.tokens += tokens
        if first:
            log.warning("the server reused %d cached prompt token(s) (usage.prompt_tokens_details.cached_tokens): "
                        "prefix caching is on; the run's metadata counts every such answer", tokens)

    def describe(self) -> dict[str, Any]:
        return {"required_off": self.required_off, "metrics_enabled": dict(self.metrics),
                "requests_with_cached_tokens": self.requests, "cached_prompt_tokens": self.tokens}


async def metrics_prefix_caching(session: Any, base: str) -> bool | None:
    """What the server's ``/metrics`` says of prefix caching (vLLM's ``cache_config_info``); None when it has no
    such page or line (not every server reports it)."""
    root = base[:-3] if base.endswith("/v1") else base

    async def get() -> bytes:
        # its own connection, closed after: the pool's connections are the requests' (kept alive between them)
        async with session.get(f"{root}/metrics", headers={"Connection": "close"}) as r:
            if r.status != 200:
                return b""
            return await r.content.read(METRICS_BYTES)

    try:
        text = await asyncio.wait_for(get(), METRICS_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a server without /metrics says nothing of its cache
        log.debug("GET %s/metrics: %s", root, e)
        return None
    m = _CONFIG.search(text)
    return None if m is None else m.group(1).lower() == b"true"
