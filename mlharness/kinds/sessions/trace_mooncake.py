"""Mooncake-style traces: rows of token counts and prefix-block hashes, with prompt text synthesised from them.

A row (Mooncake's FAST'25 release, and AIPerf's ``mooncake_trace``) is one request: ``timestamp`` (ms),
``input_length`` and ``output_length`` (tokens), ``hash_ids`` (one id per 512-token block of the prompt; a block's
id stands for that block *and everything before it*, so two rows whose ids start alike share that prefix). The
trace holds no text: the prompt is made here, one block of words per hash id, so that equal hash ids give equal
text and rows that share a hash-id prefix send prompts that share a text prefix, which is what a prefix cache
sees. The last block holds what is left of ``input_length`` (``input_length - 512 * (len(hash_ids) - 1)``); a row
whose counts disagree with its blocks is refused.

Why words: each word is drawn from a list of common English words that tokenizers of the GPT-2, Llama 3 and Qwen
families each encode, with the space before it, as one token, so a block of 512 words is about 512 tokens, and a
prompt about ``input_length`` tokens, whatever the model's tokenizer (the chat template adds its few tokens). The
words of a block are drawn by a generator seeded with the block's hash id, the same in every process and run.

Sessions: rows naming a ``session_id`` (or ``chat_id``, ``conversation_id``) are the turns of that session, in file
order, each turn's message made from its own blocks (as AIPerf replays Mooncake sessions: a later row holds the
turn's new content, the history holds the earlier turns and answers); ``delay`` (ms, AIPerf's field) is the think
time before a later turn. Rows naming no session are a session each. ``timestamp`` gives the session's start,
relative to the trace's first timestamp; ``output_length`` is the turn's token cap (0 taken as 1, since a request
asks for at least one token). A prompt costs about six bytes a token in memory.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from mlharness import numbers
from mlharness.kinds.sessions.model import Session, Turn
from mlharness.kinds.sessions.trace_rows import (
    RECORDED_WHY,
    TURNS_WHY,
    Fields,
    TraceError,
    read_records,
    shown,
)
from mlharness.numbers import MAX_RECORDED_S, MAX_TURNS

BLOCK_TOKENS = 512  # Mooncake's block size, and AIPerf's default (--isl-block-size)
SESSION_FIELDS = ("session_id", "chat_id", "conversation_id")
# each of these, after a space, is one token for the GPT-2, Llama 3 and Qwen tokenizers
WORDS = tuple("""
the of and to in is was for on that with as by at from his her are were be this which or have had an not but they
one all their has been more also its new first can who after two other time into when there would year out about
some only most over years state such people many made then these them up what where between under while during
school world city known part called used three well both later team game life work family group found number
through since house music each may season because before name water than around being however high public national
system day film back long series early best united war government end area river country local second small home
left field way general power should place support following great own old much even every north south east west
based like line children history set major show town play another member down four within language among several
point""".split())


def block_words(hash_id: Any, cache: dict[Any, list[str]]) -> list[str]:
    """The 512 words of a block: the same for the same hash id, in any process (a str seed is hashed with
    SHA-512 by ``random.Random``, not with Python's salted ``hash``)."""
    words = cache.get(hash_id)
    if words is None:
        rng = random.Random(f"mooncake-block:{type(hash_id).__name__}:{hash_id}")
        words = cache[hash_id] = rng.choices(WORDS, k=BLOCK_TOKENS)
    return words


def prompt_text(hash_ids: list[Any], input_length: int, cache: dict[Any, list[str]]) -> str:
    words: list[str] = []
    for i, hid in enumerate(hash_ids):
        block = block_words(hid, cache)
        words.extend(block if i < len(hash_ids) - 1 else block[: input_length - BLOCK_TOKENS * i])
    return " ".join(words)


def read_mooncake(path: Path) -> list[Session]:
    groups: dict[str, list[Fields]] = {}
    for n, (line, row) in enumerate(read_records(path)):
        f = Fields(path, line, row)
        key = next((k for k in SESSION_FIELDS if row.get(k) is not None), None)
        if key is None:
            sid = f"row-{n}"
        else:
            raw = row[key]
            if isinstance(raw, bool) or not isinstance(raw, (str, int)) or raw == "":
                raise f.error(key, f"expected a non-empty string, got {shown(raw)}")
            sid = str(raw)
        group = groups.setdefault(sid, [])
        if len(group) >= MAX_TURNS:
            raise f.error(key, f"session {sid!r} has more than {MAX_TURNS} rows (turns); at most {MAX_TURNS} "
                               f"({TURNS_WHY})")
        group.append(f)
    if not groups:
        raise TraceError(path, None, None, "no rows (a Mooncake trace has one JSON row per request)")
    cache: dict[Any, list[str]] = {}
    rows = [(sid, [request(f, cache) for f in fs]) for sid, fs in groups.items()]
    stamps = [r["timestamp"] for _, rs in rows for r in rs if r["timestamp"] is not None]
    origin = min(stamps) if stamps else 0.0
    for _, rs in rows:  # a session starts at its first timestamp after the trace's first: a replay waits for it
        for r in rs:
            if r["timestamp"] is not None and r["timestamp"] - origin > MAX_RECORDED_S * 1000:
                raise r["fields"].source("timestamp").fail(
                    f"{numbers.fmt(r['timestamp'] - origin)} ms after the trace's first timestamp "
                    f"({numbers.fmt(origin)}); must be <= {numbers.fmt(MAX_RECORDED_S * 1000)} ms ({RECORDED_WHY})")
    return [session(sid, rs, origin) for sid, rs in rows]


def request(f: Fields, cache: dict[Any, list[str]]) -> dict[str, Any]:
    input_length = f.integer("input_length", required=True)
    output_length = f.integer("output_length", required=True, minimum=0)
    hash_ids = f.array("hash_ids")
    if hash_ids is None:
        # no blocks named: text of this row's own, shared with no other row
        hash_ids = [f"{f.path.name}:{f.line}:{i}" for i in range(-(-input_length // BLOCK_TOKENS))]
    for i, hid in enumerate(hash_ids):
        if isinstance(hid, bool) or not isinstance(hid, (int, str)):
            raise f.error(f"hash_ids[{i}]", f"expected an integer or string block id, got {shown(hid)}")
    blocks = -(-input_length // BLOCK_TOKENS)
    if len(hash_ids) != blocks:
        raise f.error("hash_ids", f"{len(hash_ids)} block ids for input_length {input_length}: a prompt of "
                                  f"{input_length} tokens is {blocks} blocks of {BLOCK_TOKENS} (the last one partial)")
    ms = f.number("timestamp")
    delay = f.number("delay", maximum=MAX_RECORDED_S * 1000, unit=" ms", why=RECORDED_WHY)
    return {"line": f.line, "fields": f, "hash_ids": list(hash_ids), "input_length": input_length,
            "max_tokens": max(1, output_length), "timestamp": ms, "delay": delay,
            "text": prompt_text(hash_ids, input_length, cache)}


def session(sid: str, rows: list[dict[str, Any]], origin: float) -> Session:
    turns = tuple(Turn(messages=({"role": "user", "content": r["text"]},),
                       think_s=0.0 if i == 0 or r["delay"] is None else r["delay"] / 1000.0,
                       max_tokens=r["max_tokens"])
                  for i, r in enumerate(rows))
    first = rows[0]["timestamp"]
    meta = {"format": "mooncake", "line": rows[0]["line"], "hash_ids": [r["hash_ids"] for r in rows],
            "input_lengths": [r["input_length"] for r in rows],
            "timestamps_s": [None if r["timestamp"] is None else (r["timestamp"] - origin) / 1000.0 for r in rows]}
    return Session(id=sid, turns=turns, start_s=0.0 if first is None else (first - origin) / 1000.0, meta=meta)
