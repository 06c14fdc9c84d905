"""Synthetic SQuAD v1.1, so the whole BERT pipeline runs with no download (the models are in :mod:`.models`).

The dataset is a real-format ``dev-v1.1.json`` plus a WordPiece ``vocab.txt``.  Every question starts with a
*key* word (one of the NATO alphabet) and its answer sits in the context between two copies of that key:
``... alpha the Grand Hotel, Paris alpha ...``.  Contexts run to several doc spans, answers are placed in later
spans too, and answers carry articles, punctuation, possessives, accents, numbers, sub-word pieces and unknown
words, so feature conversion, max-context selection, get_final_text and the official normalisation are all
exercised.
"""

from __future__ import annotations

import json
import logging
import os
import random
import string
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError
from mlharness.fileguard import check_regular_file, read_bytes_bounded
from mlharness.tasks.files import atomic_write_bytes

log = logging.getLogger(__name__)

DEFAULT_COUNT = 48
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
KEYS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
        "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
        "whiskey", "xray", "yankee", "zulu"]
NOUNS = ["city", "river", "inn", "station", "tower", "bridge", "museum", "market", "garden", "harbor", "castle",
         "school", "church", "street", "road", "village", "valley", "island", "forest", "mountain", "lake",
         "report", "council", "king", "queen", "army", "train", "ship", "wall", "gate", "house", "farm", "mill"]
ADJECTIVES = ["old", "new", "grand", "great", "small", "northern", "southern", "royal", "ancient", "modern",
              "famous", "quiet", "busy"]
VOWEL_ADJECTIVES = ["old", "ancient", "early", "eastern", "open"]
VERBS = ["open", "visit", "record", "list", "mention", "name", "restore", "own", "cross", "paint"]
FUNCTION = ["the", "a", "an", "of", "and", "in", "to", "was", "is", "by", "for", "on", "at", "with", "from",
            "near", "after", "before", "during", "which", "what", "where", "who", "did", "it", "its", "their"]
NAMES = ["mary", "john", "anna", "peter", "paris", "london", "berlin", "rome", "vienna", "oslo", "cafe"]
UNITS = ["tons", "miles", "people", "years"]
SUFFIXES = ["##s", "##ed", "##ing", "##ly", "##er"]
UNKNOWN = ["Zyxqor", "Qwvurt", "Xqzzyn"]  # never in the vocabulary: tokenised to [UNK]
LONG_QUESTION_EVERY = 7  # every 7th question runs past the 64-token query limit


def build_vocab() -> list[str]:
    words = SPECIALS + list(string.punctuation) + list(string.digits) + [f"##{d}" for d in string.digits]
    words += KEYS + NOUNS + ADJECTIVES + VOWEL_ADJECTIVES + VERBS + FUNCTION + NAMES + UNITS + SUFFIXES
    return list(dict.fromkeys(words))  # unique, first occurrence keeps its place


def _filler_word(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(FUNCTION)
    if kind < 0.55:
        return rng.choice(NOUNS) + rng.choice(["", "", "s"])  # "towers" -> tower ##s
    if kind < 0.7:
        return rng.choice(VERBS) + rng.choice(["", "ed", "ing"])
    if kind < 0.85:
        return rng.choice(ADJECTIVES)
    if kind < 0.97:
        return rng.choice(NAMES).capitalize()
    return str(rng.randint(2, 2999))


def _answer(rng: random.Random) -> tuple[str, list[str]]:
    """(answer text as it appears in the context, further ground truths that are substrings of it)."""
    noun, noun2, adj = rng.choice(NOUNS), rng.choice(NOUNS), rng.choice(ADJECTIVES)
    name = rng.choice(NAMES).capitalize()
    kind = rng.randrange(8)
    if kind == 0:
        core = f"{adj.capitalize()} {noun.capitalize()}"
        return f"the {core}, {name}", [core, f"{core}, {name}"]
    if kind == 1:
        return f"an {rng.choice(VOWEL_ADJECTIVES)} {noun}", [noun]
    if kind == 2:
        number = f"{rng.randint(1, 99)},{rng.randint(100, 999)}"
        return f"{number} {rng.choice(UNITS)}", [number]
    if kind == 3:
        return f"{name}'s {noun}s", [f"{name}'s {noun}s"]
    if kind == 4:
        return f"({noun.capitalize()}) {noun2}", [noun2]
    if kind == 5:
        return f"Café {name}", [f"Café {name}"]
    if kind == 6:
        return f"a {rng.choice(UNKNOWN)} {noun}", [noun]
    return f"{name}.", [name]  # a trailing full stop that normalisation drops


def _question(rng: random.Random, key: str, number: int) -> str:
    if number % LONG_QUESTION_EVERY == LONG_QUESTION_EVERY - 1:
        return f"{key}: " + " ".join(_filler_word(rng) for _ in range(70)) + "?"
    return f"{key}: which {rng.choice(NOUNS)} did the {rng.choice(NOUNS)} {rng.choice(VERBS)}?"


def synthetic_squad(count: int = DEFAULT_COUNT, seed: int = 0) -> dict[str, Any]:
    """A SQuAD v1.1 dev json with ``count`` questions, deterministic for a given seed."""
    if count < 1:
        raise DatasetError(f"synthetic SQuAD: count must be >= 1, got {count}")
    rng = random.Random(seed)
    articles: list[dict[str, Any]] = []
    done = 0
    while done < count:
        n_questions = min(rng.randint(1, 4), count - done)
        keys = rng.sample(KEYS, n_questions)
        n_words = rng.randint(450, 800)  # several 384-token features per question once split into WordPieces
        words = [_filler_word(rng) for _ in range(n_words)]
        # one answer in the last third (a later doc span), the others anywhere; inserted back to front
        slots = sorted([rng.randint(2 * n_words // 3, n_words - 1)]
                       + [rng.randint(1, n_words - 1) for _ in range(n_questions - 1)])
        # sorted by (slot, key): at a shared slot the later insertion lands first, so the context lists the
        # answers in exactly this order
        items = sorted(zip(slots, keys, [_answer(rng) for _ in range(n_questions)], strict=True))
        for slot, key, (text, _) in reversed(items):
            words[slot:slot] = [key, text, key]
        context = " ".join(words)
        qas = []
        cursor = 0
        for _, key, (text, variants) in items:
            start = context.index(f"{key} {text} {key}", cursor) + len(key) + 1
            cursor = start
            truths = [{"answer_start": start, "text": text}]
            truths += [{"answer_start": start + text.index(v), "text": v} for v in variants]
            qas.append({"answers": truths, "question": _question(rng, key, done + len(qas)),
                        "id": f"{seed:04x}{done + len(qas):020x}"})
        done += len(qas)
        if not articles or len(articles[-1]["paragraphs"]) == 3:
            articles.append({"title": f"Synthetic_{len(articles)}", "paragraphs": []})
        articles[-1]["paragraphs"].append({"context": context, "qas": qas})
    return {"data": articles, "version": "1.1"}


def write_synthetic_squad(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write ``dev-v1.1.json`` and ``vocab.txt`` into ``out`` (the layout the squad dataset manifest reads)."""
    out = Path(out)
    files = {"vocab.txt": "".join(f"{w}\n" for w in build_vocab()).encode("utf-8"),
             "dev-v1.1.json": json.dumps(synthetic_squad(count, seed)).encode("utf-8")}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():  # the vocabulary first: the data file is what makes the set complete
            if os.path.lexists(out / name):  # a FIFO or folder there is not a file mlharness wrote: never replaced
                check_regular_file(out / name, "synthetic SQuAD file", error=DatasetError)
            if not (out / name).is_file() or (out / name).stat().st_size != len(data) or \
                    read_bytes_bounded(out / name, "synthetic SQuAD file", len(data), error=DatasetError) != data:
                atomic_write_bytes(out / name, data)
    except OSError as e:
        raise DatasetError(f"synthetic SQuAD: cannot write {out}: {e}") from e
    return out


def ensure_synthetic_squad(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """The synthetic set in ``out``, (re)written only when its files differ from what ``count``/``seed`` give."""
    return write_synthetic_squad(out, count, seed)
