"""A synthetic image+question set for image+text models, scored by exact match, and the oracle table of it.

The set is a folder: ``images/vq_XXXX.png`` (one coloured shape on white, of varied sizes), ``questions.jsonl``
(one ``{"image": "images/vq_0000.png", "question": "...", "answer": "red"}`` row per sample) and
``answers.txt`` (each sample's answer on its own line: the labels file of the generic ``exact_match`` metric).
The ``vlm_questions`` dataset manifest turns each row into chat messages (a system message, then the image and
the question), which is all an image+text model's manifest needs from it.

:func:`ensure_oracle_table` writes the ``token-oracle`` framework's table for the set: each conversation's key
(:attr:`mlharness.predictors.chat.ChatPrompt.key`) -> its answer, so the oracle scores exact match 100 exactly when
the chat path (messages built at load time, the answer streamed back as text) is right.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError, MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json, read_text_bounded

QUESTIONS_FILE = "questions.jsonl"
ANSWERS_FILE = "answers.txt"
MARKER = "vlm_questions.json"  # written last: its presence marks the set complete
SYSTEM = "Answer with one word."  # the system message of every conversation (the dataset manifest's hook too)
COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 60, 220), "yellow": (240, 210, 20)}
SHAPES = ("square", "circle", "triangle")
QUESTIONS = {"colour": "What colour is the shape?", "shape": "What shape is drawn?"}
DEFAULT_COUNT = 8


def _draw(shape: str, colour: tuple[int, int, int], width: int, height: int) -> Any:
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(im)
    s = min(width, height) * 3 // 4
    x, y = (width - s) // 2, (height - s) // 2
    if shape == "square":
        d.rectangle((x, y, x + s, y + s), fill=colour)
    elif shape == "circle":
        d.ellipse((x, y, x + s, y + s), fill=colour)
    else:
        d.polygon([(x + s // 2, y), (x, y + s), (x + s, y + s)], fill=colour)
    return im


def write_vlm_questions(out: Path | str, count: int = DEFAULT_COUNT, seed: int = 0) -> Path:
    """Write ``count`` images with a question and a one-word answer each into the folder ``out``."""
    out = Path(out)
    if count < 1:
        raise DatasetError(f"synthetic vlm_questions: count must be >= 1, got {count}")
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        colour = list(COLOURS)[int(rng.integers(len(COLOURS)))]
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        name = f"images/vq_{i:04d}.png"
        _draw(shape, COLOURS[colour], int(rng.integers(40, 97)), int(rng.integers(40, 97))).save(out / name)
        asked = "colour" if i % 2 == 0 else "shape"
        rows.append({"image": name, "question": QUESTIONS[asked], "answer": colour if asked == "colour" else shape})
    (out / QUESTIONS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (out / ANSWERS_FILE).write_text("".join(r["answer"] + "\n" for r in rows))
    (out / MARKER).write_text(json.dumps({"count": count, "seed": seed}))
    return out


def read_questions(root: Path | str) -> list[dict[str, Any]]:
    """The rows of ``root/questions.jsonl``, each checked to name an image and a question."""
    path = Path(root) / QUESTIONS_FILE
    try:
        text = read_text_bounded(path, "questions file", DATA_FILE_LIMIT, error=DatasetError)
    except OSError as e:
        raise DatasetError(f"cannot read the questions file {path}: {e}") from e
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise DatasetError(f"{path}, line {n}: not JSON: {e}") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("image", "question")):
            raise DatasetError(f"{path}, line {n}: a row is an object with 'image' and 'question' strings")
        rows.append(row)
    if not rows:
        raise DatasetError(f"{path} holds no questions")
    return rows


def messages(root: Path | str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The conversation of one row, as the ``vlm_questions`` dataset manifest's hook builds it."""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": [{"type": "image", "image": str(Path(root) / row["image"])},
                                         {"type": "text", "text": row["question"]}]}]


def synthetic_dir() -> Path:
    from mlharness.tasks.generative import synthetic_cache

    return synthetic_cache("vlm_questions_synth")


def ensure_vlm_questions(out: Path | str | None = None, count: int = DEFAULT_COUNT) -> Path:
    """The synthetic set in ``out`` (default: the cache), written unless it is complete there."""
    out = Path(out) if out is not None else synthetic_dir()
    try:  # the marker is the small JSON write_vlm_questions writes last
        if read_json(out / MARKER, "synthetic set's marker", 1 << 20).get("count", 0) >= count:
            return out
    except (MLHarnessError, AttributeError, TypeError):
        pass
    return write_vlm_questions(out, max(count, DEFAULT_COUNT))


def oracle_table(root: Path | str) -> dict[str, Any]:
    """The token-oracle table of one set: conversation key -> answer text (``chat``)."""
    from mlharness.predictors.chat import parse_chat

    rows = read_questions(root)
    chat = {parse_chat(messages(root, row), i).key: row["answer"] for i, row in enumerate(rows)}
    return {"format": 1, "eos_token_id": 0, "dataset": str(root), "entries": {}, "chat": chat}


def ensure_oracle_table(path: Path | str) -> Path:
    """``model.generator`` of tiny-vlm-oracle: the table of the synthetic set in the cache (written if needed)."""
    from mlharness.tasks.generative import ensure_table

    root = ensure_vlm_questions()
    return ensure_table(path, [root / QUESTIONS_FILE, root / "images"], lambda: oracle_table(root))
