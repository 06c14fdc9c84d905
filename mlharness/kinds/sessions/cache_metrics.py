"""How much of a replay's prompts a server's prefix cache served, two ways.

- The server's own count: vLLM's Prometheus ``/metrics`` has two counters of prompt tokens,
  ``vllm:prefix_cache_queries_total`` (tokens looked up in the cache) and ``vllm:prefix_cache_hits_total`` (tokens
  found there), summed over their label sets (one per engine). :func:`scrape` reads them before and after a replay,
  and :func:`hit_rate` is the hits over the queries of the difference: the replay's own, whatever ran before.
- The client's count: each answer's ``usage.prompt_tokens_details.cached_tokens`` over its ``prompt_tokens``
  (:func:`client_hit_rate`, over the turns whose usage said both), which any OpenAI-compatible server may report
  (vLLM with ``--enable-prompt-tokens-details``).

The two agree on a vLLM server that served only the replay: vLLM counts a query per prompt it schedules and
reports the same hits as ``cached_tokens``. A preempted and rescheduled prompt is queried twice, so the server's
rate can differ from the client's under memory pressure.
"""

from __future__ import annotations

import logging
import re
import urllib.error
import urllib.request
from collections.abc import Iterable

from mlharness.kinds.sessions.records import SessionRecord

log = logging.getLogger(__name__)

QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
SCRAPE_TIMEOUT_S = 5.0
METRICS_BYTES = 8 << 20
_SAMPLE = re.compile(r"^(vllm:prefix_cache_[a-z_]+)(?:\{[^}]*\})?\s+([-+0-9.eEinfINFNa]+)(?:\s+\d+)?\s*$", re.M)


def scrape(base_url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> dict[str, float] | None:
    """The server's prefix-cache counters (each ``vllm:prefix_cache_*`` sample, summed over its labels); None
    where the server has no ``/metrics`` or it names none of them (not a vLLM server, or one without the cache)."""
    root = base_url.rstrip("/")
    root = root[:-3] if root.endswith("/v1") else root
    try:
        with urllib.request.urlopen(f"{root}/metrics", timeout=timeout_s) as r:  # noqa: S310 - the user's server
            text = r.read(METRICS_BYTES).decode("utf-8", errors="replace")
    except (OSError, urllib.error.URLError, ValueError) as e:
        log.debug("GET %s/metrics: %s", root, e)
        return None
    return parse(text)


def parse(text: str) -> dict[str, float] | None:
    """The ``vllm:prefix_cache_*`` samples of a Prometheus text page, summed per name; None where it has none."""
    out: dict[str, float] = {}
    for m in _SAMPLE.finditer(text):
        try:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
        except ValueError:
            continue
    return out or None


def hit_rate(before: dict[str, float] | None, after: dict[str, float] | None) -> float | None:
    """Hits over queries between two scrapes; None where either scrape lacks the counters or nothing was queried."""
    if not before or not after or not all(k in d for d in (before, after) for k in (QUERIES, HITS)):
        return None
    queries = after[QUERIES] - before[QUERIES]
    hits = after[HITS] - before[HITS]
    return hits / queries if queries > 0 else None


def client_hit_rate(records: Iterable[SessionRecord]) -> float | None:
    """Sum of ``cached_tokens`` over sum of ``prompt_tokens``, over the turns whose usage reported both; None where
    none did."""
    cached = prompt = 0
    for record in records:
        for turn in record.turns:
            if turn.prompt_tokens is not None and turn.cached_tokens is not None:
                cached += turn.cached_tokens
                prompt += turn.prompt_tokens
    return cached / prompt if prompt > 0 else None
