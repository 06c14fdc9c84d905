"""The ``openai`` framework's options, checked before anything is sent: each field's type and range, named in the
error; and the vocabulary size that token ids from a server are checked against."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import MLHarnessError, PredictorError
from mlharness.fileguard import read_json
from mlharness.predictors.openai.watch import Deadlines

KNOWN_OPTIONS = frozenset({
    "endpoints", "model", "api_key_env", "tokenizer", "vocab_size", "prompt", "max_concurrency", "generation",
    "server_token_ids", "extra_body", "client_processes", "require_no_prefix_cache",
    # deadlines (seconds)
    "deadline_s", "connect_timeout_s", "first_byte_timeout_s", "first_token_timeout_s", "token_gap_timeout_s",
    "models_timeout_s",
    # retries of HTTP 408/429/5xx before the first token
    "retries", "retry_backoff_s", "retry_max_wait_s",
})
MAX_SECONDS = 7 * 86400.0  # a ceiling that catches a unit mistake (milliseconds given as seconds)
MAX_CONCURRENCY = 16384  # requests in flight at once: the default, and the most max_concurrency may ask for
MAX_RETRIES = 20
MAX_CLIENT_PROCESSES = 64
CONFIG_BYTES = 64 << 20  # config.json / tokenizer.json read to learn the vocabulary size


@dataclass
class OpenAIOptions:
    urls: list[str]
    deadlines: Deadlines
    models_timeout_s: float = 15.0
    retries: int = 4
    retry_backoff_s: float = 0.5
    retry_max_wait_s: float = 10.0
    workers: int = MAX_CONCURRENCY  # requests in flight at once (options.max_concurrency)
    workers_given: bool = False  # max_concurrency was set (too few open files is then an error)
    prompt: str = "auto"
    server_ids: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    vocab_size: int | None = None
    client_processes: int = 1  # processes the requests are spread over (mlharness.predictors.openai.procs)
    no_prefix_cache: bool = False  # fail when the server reports prefix caching (openai.prefix_cache)


class _Reader:
    """Reads options, naming the manifest and the field in every error."""

    def __init__(self, o: dict[str, Any], manifest: str | None):
        self.o = o
        self.where = f"{manifest}: " if manifest else ""

    def fail(self, name: str, value: Any, want: str) -> PredictorError:
        return PredictorError(f"{self.where}framework 'openai': options.{name} is {value!r}; {want}")

    def seconds(self, name: str, default: float) -> float:
        """A positive, finite number of seconds (at most a week)."""
        v = self.o.get(name, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 < v <= MAX_SECONDS:
            raise self.fail(name, v, f"use a positive number of seconds (at most {MAX_SECONDS:g})")
        return float(v)

    def integer(self, name: str, default: int | None, low: int, high: int) -> int | None:
        v = self.o.get(name, default)
        if v is None and default is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise self.fail(name, v, f"use a whole number from {low} to {high}")
        return v


def parse_options(o: dict[str, Any], manifest: str | None = None) -> OpenAIOptions:
    """The options, each checked (``manifest``: the file they come from, named in errors)."""
    r = _Reader(o, manifest)
    unknown = set(o) - KNOWN_OPTIONS
    if unknown:
        raise PredictorError(f"{r.where}unknown 'openai' framework option(s) {sorted(unknown)}; known: "
                             f"{', '.join(sorted(KNOWN_OPTIONS))}")
    urls = o.get("endpoints") or []
    urls = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else urls
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise r.fail("endpoints", o.get("endpoints"), "use a list of URLs")
    urls = [u for u in urls if u]
    if not urls:
        raise PredictorError("framework 'openai' needs options.endpoints: a list of URLs (or --endpoint URL)")
    d = Deadlines()
    deadlines = Deadlines(connect=r.seconds("connect_timeout_s", d.connect),
                          first_byte=r.seconds("first_byte_timeout_s", d.first_byte),
                          first_token=r.seconds("first_token_timeout_s", d.first_token),
                          token_gap=r.seconds("token_gap_timeout_s", d.token_gap),
                          total=r.seconds("deadline_s", d.total))
    prompt = o.get("prompt", "auto")
    if prompt not in ("auto", "tokens", "text"):
        raise r.fail("prompt", prompt, "use auto, tokens or text")
    no_cache = o.get("require_no_prefix_cache", False)
    if not isinstance(no_cache, bool):
        raise r.fail("require_no_prefix_cache", no_cache, "use true or false")
    extra = o.get("extra_body") or {}
    if not isinstance(extra, dict):
        raise r.fail("extra_body", extra, "use a mapping of request fields")
    return OpenAIOptions(
        urls=urls, deadlines=deadlines, models_timeout_s=r.seconds("models_timeout_s", 15.0),
        retries=r.integer("retries", 4, 0, MAX_RETRIES) or 0,
        retry_backoff_s=r.seconds("retry_backoff_s", 0.5), retry_max_wait_s=r.seconds("retry_max_wait_s", 10.0),
        workers=r.integer("max_concurrency", MAX_CONCURRENCY, 1, MAX_CONCURRENCY) or 1,
        workers_given="max_concurrency" in o, prompt=prompt,
        server_ids=bool(o.get("server_token_ids", True)), extra_body=dict(extra),
        vocab_size=r.integer("vocab_size", None, 1, 1 << 31),
        client_processes=r.integer("client_processes", 1, 1, MAX_CLIENT_PROCESSES) or 1, no_prefix_cache=no_cache)


def folder_vocab_size(folder: Any) -> int | None:
    """The vocabulary size a model folder declares: ``config.json``'s ``vocab_size`` (the embedding's rows, which
    bound every id the model can emit), else one more than the largest id in ``tokenizer.json``; None if neither
    says. Reads no file above :data:`CONFIG_BYTES`."""
    if not folder:
        return None
    base = Path(str(folder))
    if not base.is_dir():
        return None
    config = base / "config.json"
    data = _json(config)
    if isinstance(data, dict):
        size = data.get("vocab_size", (data.get("text_config") or {}).get("vocab_size"))
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    data = _json(base / "tokenizer.json")
    if isinstance(data, dict):
        vocab = (data.get("model") or {}).get("vocab")
        ids = list(vocab.values()) if isinstance(vocab, dict) else []
        if isinstance(vocab, list) and vocab:  # Unigram: [piece, score] pairs, the id is the position
            ids = [len(vocab) - 1]
        ids += [t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)]
        ids = [i for i in ids if isinstance(i, int)]
        if ids:
            return max(ids) + 1
    return None


def _json(path: Path) -> Any:
    try:
        if not path.is_file() or path.stat().st_size > CONFIG_BYTES:
            return None
        return read_json(path, "config", CONFIG_BYTES)
    except (OSError, MLHarnessError):
        return None
