"""The llama3.1-8b dataset: CNN/DailyMail 3.0.0 validation articles in the official ``cnn_eval.json`` layout.

The file is a JSON array, one object per sample: ``instruction`` (``{"llama": <template>}``), ``input`` (the
article), ``tok_input`` (the token ids of the whole prompt, ``tokenizer.encode(template.format(input=article))``,
BOS first, no chat template) and ``output`` (the reference summary). The SUT feeds ``tok_input`` to the model;
the accuracy metric scores the decoded responses against ``output``. The datacenter set is ``cnn_eval.json``
(13368 samples), the edge set ``sample_cnn_eval_5000.json`` (5000).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json
from mlharness.tasks.generative import PromptSet, find_data_file, local_tokenizer

PROMPT_TEMPLATE = ("Summarize the following news article in 128 tokens. Please output the summary only, without any "
                   "other text.\n\nArticle:\n{input}\n\nSummary:")
DATASET_FILE = "cnn_eval.json"
EDGE_DATASET_FILE = "sample_cnn_eval_5000.json"
FULL_COUNT = 13368
EDGE_COUNT = 5000
FIELDS = ("instruction", "input", "tok_input", "output")


def dataset_file(root: Path | str, name: str = DATASET_FILE) -> Path:
    """The dataset JSON: ``root`` itself when it is a file, else ``root/name``."""
    return find_data_file(root, name, "CNN/DailyMail: {path} not found (pass --dataset-path: a folder holding "
                                      "{name} or the JSON file itself; `mlharness dataset synth cnndm --out DIR` "
                                      "writes a synthetic one)")


def read_records(path: Path | str) -> list[dict[str, Any]]:
    """The records of a cnn_eval.json, each checked for the official fields."""
    try:
        records = read_json(Path(path), "CNN/DailyMail file", DATA_FILE_LIMIT, error=DatasetError)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"cannot read CNN/DailyMail file {path}: {e}") from e
    if not isinstance(records, list) or not records:
        raise DatasetError(f"{path}: expected a non-empty JSON array of samples ({', '.join(FIELDS)})")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or any(k not in rec for k in FIELDS):
            missing = [k for k in FIELDS if not isinstance(rec, dict) or k not in rec]
            raise DatasetError(f"{path}: sample {i} lacks the field(s) {', '.join(missing)}")
        ids = rec["tok_input"]
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool)
                                                           for t in ids):
            raise DatasetError(f"{path}: sample {i}: 'tok_input' must be a non-empty list of integer token ids")
        if not isinstance(rec["output"], str):
            raise DatasetError(f"{path}: sample {i}: 'output' must be the reference summary text")
    return records


class CnnDm(PromptSet):
    """One cnn_eval.json in memory: the prompts as int32 arrays (what ``preprocess`` returns) and the targets."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        records = read_records(self.path)
        self.prompts = [np.asarray(r["tok_input"], dtype=np.int32) for r in records]
        self.targets = [r["output"] for r in records]
        self.articles = [r["input"] for r in records]


def load_tokenizer(path: Path | str) -> Any:
    """The tokenizer of a local checkpoint folder, loaded as the official evaluation.py loads it (no download)."""
    return local_tokenizer(path, "the model's checkpoint folder, or the 'tokenizer' folder `mlharness dataset synth "
                                 "cnndm` writes beside cnn_eval.json", model_max_length=128000, padding_side="left",
                           use_fast=False)


def encode_prompt(tokenizer: Any, article: str) -> list[int]:
    """``tok_input`` as the official set has it: the template filled with the article, encoded with BOS."""
    return [int(t) for t in tokenizer.encode(PROMPT_TEMPLATE.format(input=article))]
