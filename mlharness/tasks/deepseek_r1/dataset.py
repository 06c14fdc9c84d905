"""The deepseek-r1 dataset: 4,388 questions from AIME, MATH500, GPQA, MMLU-Pro and LiveCodeBench, in the official
file ``mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl``: a pickled pandas DataFrame, one row per sample, read by
the reference's ``run_mlperf.py`` (``text_input``, and ``tok_input`` for backends fed token ids) and by
``eval_accuracy.py`` (``ground_truth``, ``dataset``, ``question``).

Columns: ``dataset`` (``gpqa``, ``mmlu_pro``, ``math500``, ``aime1983``, ``livecodebench``: the grader is picked
by substring), ``question``, ``text_input`` (the prompt text), ``tok_input`` (its token ids, chat template
applied), ``tok_input_len``, ``ground_truth`` (a letter, a LaTeX answer, an integer, or a LiveCodeBench
``question_id``) and ``metric``. LiveCodeBench's tests are not in the official file (the reference loads them
from the ``livecodebench/code_generation_lite`` release_v1 set); mlharness reads them from a column
``lcb_tests`` (JSON: ``inputs``, ``outputs``, ``fn_name``, as ``CodeGenerationProblem.get_evaluation_sample``
builds them) when the file has one, as the synthetic set does, else from a JSON file mapping question_id to
that object (accuracy option ``lcb_tests``). The synthetic set also carries ``reference_answer``, the text the
oracle answers with.

A pickle can run code when loaded: open only dataset files from a source you trust (the MLCommons download or
``mlharness dataset synth deepseek-r1``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_bytes_bounded
from mlharness.tasks.generative import PromptSet, find_data_file

DATASET_FILE = "mlperf_deepseek_r1_dataset_4388_fp8_eval.pkl"
FULL_COUNT = 4388
REQUIRED = ("dataset", "ground_truth", "tok_input")
MAX_OUTPUT_TOKENS = 20000  # the reference's max output sequence length


def dataset_file(root: Path | str, name: str = DATASET_FILE) -> Path:
    return find_data_file(root, name, "deepseek-r1: {path} not found (pass --dataset-path: a folder holding {name} "
                                      "or the file itself; `mlharness dataset synth deepseek-r1 --out DIR` writes a "
                                      "synthetic one)")


def read_frame(path: Path | str) -> Any:
    """The DataFrame of a dataset pickle, checked for the columns the benchmark reads."""
    import pandas as pd

    path = Path(path)
    # the official pickle of 4,388 samples is tens of MiB: 4 GiB holds it with room
    data = read_bytes_bounded(path, "the deepseek-r1 dataset", 4 * DATA_FILE_LIMIT, error=DatasetError)
    try:
        frame = pickle.loads(data)  # noqa: S301 - the official format; see the module note
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError) as e:
        raise DatasetError(f"cannot read the deepseek-r1 dataset {path}: {e}") from e
    if not isinstance(frame, pd.DataFrame):
        raise DatasetError(f"{path}: expected a pickled pandas DataFrame, found {type(frame).__name__}")
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing or frame.empty:
        raise DatasetError(f"{path}: {'no rows' if frame.empty else 'lacks the column(s) ' + ', '.join(missing)}"
                           f" (columns: {', '.join(map(str, frame.columns))})")
    for i, ids in enumerate(frame["tok_input"]):
        if len(ids) == 0 or not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in ids):
            raise DatasetError(f"{path}: row {i}: 'tok_input' must be a non-empty list of integer token ids")
    return frame.reset_index(drop=True)


def lcb_tests_of(frame: Any, row: int, extra: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The LiveCodeBench tests of a row: its ``lcb_tests`` cell, else ``extra[question_id]``."""
    cell = frame["lcb_tests"].iloc[row] if "lcb_tests" in frame.columns else None
    if isinstance(cell, str) and cell:
        tests = json.loads(cell)
    else:
        tests = (extra or {}).get(str(frame["ground_truth"].iloc[row]))
    if tests is None:
        return None
    if not isinstance(tests, dict) or not isinstance(tests.get("inputs"), list) or not isinstance(
            tests.get("outputs"), list) or len(tests["inputs"]) != len(tests["outputs"]):
        raise DatasetError(f"row {row}: LiveCodeBench tests must be an object with 'inputs' and 'outputs' lists of "
                           f"the same length (and 'fn_name' for functional problems)")
    return tests


class DeepSeekR1Data(PromptSet):
    """One dataset file in memory: the prompts as int32 arrays (what ``preprocess`` returns) and the frame."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.frame = read_frame(self.path)
        self.prompts = [np.asarray(list(ids), dtype=np.int32) for ids in self.frame["tok_input"]]
