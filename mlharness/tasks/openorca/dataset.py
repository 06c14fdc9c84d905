"""The llama2-70b dataset: 24,576 OpenOrca (GPT-4) samples in the official pickle layout.

``open_orca_gpt4_tokenized_llama.sampled_24576.pkl`` is a pickled pandas DataFrame, one row per sample, with the
columns the reference's ``processorca.py`` leaves: ``id`` (``<origin>.<number>``), ``system_prompt``, ``question``,
``output`` (the GPT-4 response, the reference answer), ``input`` (the Llama 2 chat prompt built from the system
prompt and the question), ``tok_input`` (the prompt's token ids: the tokenizer's BOS, the ids of ``input``, which
itself starts with the text ``<s>``, and the response-init token ``▁`` last), ``tok_output`` (the ids of
``output``, BOS first), ``origin`` (cot, flan, niv or t0), ``tok_input_length`` and ``tok_output_length``. The SUT
feeds ``tok_input`` to the model; the accuracy metric scores the decoded responses against ``output``.

A pickle runs code when it is read, as the reference reads it: load only a file from a source you trust (the
MLCommons download or ``mlharness dataset synth openorca``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_bytes_bounded
from mlharness.tasks.generative import PromptSet, find_data_file, local_tokenizer

DATASET_FILE = "open_orca_gpt4_tokenized_llama.sampled_24576.pkl"
FULL_COUNT = 24576
COLUMNS = ("id", "system_prompt", "question", "output", "input", "tok_input", "tok_output", "origin",
           "tok_input_length", "tok_output_length")
ORIGINS = ("cot", "flan", "niv", "t0")
PROMPT_SYSTEM = "<s>[INST] <<SYS>>\n{}\n<</SYS>>\n\n{} [/INST]"
PROMPT_NO_SYSTEM = "<s>[INST] {} [/INST]"
RESPONSE_INIT = "\u2581"  # Llama 2's "▁" (id 29871), appended to every tok_input
EOS_TOKEN_ID = 2  # Llama 2's </s>


def format_prompt(system_prompt: str, question: str) -> str:
    """The ``input`` column: the Llama 2 chat prompt, with the system block only when there is a system prompt."""
    if system_prompt:
        return PROMPT_SYSTEM.format(system_prompt, question)
    return PROMPT_NO_SYSTEM.format(question)


def dataset_file(root: Path | str, name: str = DATASET_FILE) -> Path:
    """The dataset pickle: ``root`` itself when it is a file, else ``root/name``."""
    return find_data_file(root, name, "OpenOrca: {path} not found (pass --dataset-path: a folder holding {name} or "
                                      "the pickle itself; `mlharness dataset synth openorca --out DIR` writes a "
                                      "synthetic one)")


def read_frame(path: Path | str) -> Any:
    """The DataFrame of an OpenOrca pickle, checked for the columns the benchmark reads."""
    try:
        import pandas as pd
    except ImportError as e:
        raise DatasetError(f"the OpenOrca pickle needs pandas (pip install 'mlharness[llm]'): {e}") from e
    path = Path(path)
    # the official pickle (24,576 samples with their token ids) is about 100 MiB
    data = read_bytes_bounded(path, "OpenOrca pickle", DATA_FILE_LIMIT, error=DatasetError)
    try:  # a compressed pickle (p.pkl.gz) is read as pandas reads it by path: the suffix names the compression
        from pandas.io.common import infer_compression

        frame = pd.read_pickle(io.BytesIO(data), compression=infer_compression(str(path), "infer"))
    except Exception as e:  # an unpickling error can be of any type
        raise DatasetError(f"cannot read OpenOrca pickle {path}: {type(e).__name__}: {e}") from e
    if not isinstance(frame, pd.DataFrame):
        raise DatasetError(f"{path}: expected a pickled pandas DataFrame, found {type(frame).__name__}")
    missing = [c for c in ("tok_input", "output") if c not in frame.columns]
    if missing:
        raise DatasetError(f"{path}: the DataFrame lacks the column(s) {', '.join(missing)} (it has "
                           f"{', '.join(map(str, frame.columns))})")
    if len(frame) == 0:
        raise DatasetError(f"{path}: the DataFrame has no rows")
    return frame


def token_list(value: Any, where: str) -> list[int]:
    """A ``tok_input``/``tok_output`` cell as a list of ints (a list or a 1-D integer array)."""
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise DatasetError(f"{where} must be a non-empty list of integer token ids")
    return [int(t) for t in arr]


def targets_of(frame: Any, path: Path | str) -> list[str]:
    """The ``output`` column (the reference answers), each checked to be text."""
    targets = list(frame["output"])
    for i, t in enumerate(targets):
        if not isinstance(t, str):
            raise DatasetError(f"{path}: row {i}: 'output' must be the reference answer text, "
                               f"found {type(t).__name__}")
    return targets


class OpenOrca(PromptSet):
    """One OpenOrca pickle in memory: the prompts as int32 arrays (what ``preprocess`` returns) and the targets."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        frame = read_frame(self.path)
        self.prompts = [np.asarray(token_list(v, f"{self.path}: row {i}: 'tok_input'"), dtype=np.int32)
                        for i, v in enumerate(frame["tok_input"])]
        self.targets = targets_of(frame, self.path)


def load_tokenizer(path: Path | str) -> Any:
    """The tokenizer of a local checkpoint folder, loaded as the official evaluate-accuracy.py loads it."""
    return local_tokenizer(path, "the model's checkpoint folder, or the 'tokenizer' folder `mlharness dataset synth "
                                 "openorca` writes beside the pickle", model_max_length=2048, padding_side="left",
                           use_fast=False)


def encode_prompt(tokenizer: Any, text: str, response_init_id: int) -> list[int]:
    """``tok_input`` as processorca.py makes it: the tokenizer's ids of ``input`` and the response-init token."""
    return [int(t) for t in tokenizer(text)["input_ids"]] + [int(response_init_id)]


def encode_output(tokenizer: Any, text: str) -> list[int]:
    """``tok_output``: the tokenizer's ids of the reference answer (BOS first, nothing appended)."""
    return [int(t) for t in tokenizer(text)["input_ids"]]
