"""The gpt-oss-120b data files (``mlperf_gpt_oss``) in the official layout.

The MLCommons download holds three parquet files, each a table with one row per sample:

- ``acc/acc_eval_inputs.parquet`` (4395 rows): the accuracy set (accuracy mode);
- ``perf/perf_eval_ref.parquet`` (6396 rows): the performance set (performance mode, TEST09);
- ``acc/acc_eval_compliance_gpqa.parquet`` (990 rows): GPQA questions for TEST07.

Columns the reference reads: ``tok_input`` (or ``input_tokens``; the Harmony-rendered prompt's token ids, fed to
the model as they are), ``dataset`` (the family: its name contains ``gpqa``, ``aime``, ``livecodebench``, ...) and
``ground_truth`` (the answer ``eval_mlperf_accuracy.py`` compares with). The synthetic set adds ``question`` and
``text_input`` (the rendered prompt text). A pickle of the same DataFrame is read as well.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, read_bytes_bounded
from mlharness.tasks.generative import PromptSet, find_data_file, local_tokenizer

ACCURACY_FILE = "acc/acc_eval_inputs.parquet"
PERFORMANCE_FILE = "perf/perf_eval_ref.parquet"
COMPLIANCE_FILE = "acc/acc_eval_compliance_gpqa.parquet"
ACCURACY_COUNT = 4395
PERFORMANCE_COUNT = 6396
COMPLIANCE_COUNT = 990
TOKEN_COLUMNS = ("tok_input", "input_tokens")  # the reference accepts either (pre-v4.0 / v4.0+ naming)
REQUIRED_COLUMNS = ("dataset", "ground_truth")


def data_file(root: Path | str, name: str) -> Path:
    """The data file ``name`` under ``root`` (or ``root`` itself when it is a file)."""
    return find_data_file(root, name, "gpt-oss-120b: {path} not found (pass --dataset-path: the folder of the "
                                      "mlperf_gpt_oss download, holding {name}; `mlharness dataset synth gpt-oss "
                                      "--out DIR` writes a synthetic one)")


def read_frame(path: Path | str) -> Any:
    """The DataFrame of a parquet (or pickle) data file, as the reference loads it."""
    import pandas as pd

    path = Path(path)
    # the official data files (a few thousand prompts with their references) are tens of MiB: 4 GiB holds them
    data = read_bytes_bounded(path, "the gpt-oss-120b data file", 4 * DATA_FILE_LIMIT, error=DatasetError)
    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(io.BytesIO(data))
        elif path.suffix in (".pkl", ".pickle"):
            frame = pickle.loads(data)  # noqa: S301 - the official data files are pickled DataFrames
        else:
            try:
                frame = pd.read_parquet(io.BytesIO(data))
            except (OSError, ValueError):
                frame = pd.read_pickle(io.BytesIO(data))  # noqa: S301
    except (OSError, ValueError, pickle.UnpicklingError, ImportError, EOFError) as e:
        raise DatasetError(f"cannot read the gpt-oss-120b data file {path}: {e}") from e
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise DatasetError(f"{path}: expected a non-empty table of samples")
    return frame


def token_column(frame: Any, path: Path | str) -> str:
    for name in TOKEN_COLUMNS:
        if name in frame.columns:
            return name
    raise DatasetError(f"{path}: no 'tok_input' or 'input_tokens' column with the prompts' token ids "
                       f"(columns: {', '.join(map(str, frame.columns))})")


class GptOssData(PromptSet):
    """One data file in memory: the prompts as int32 arrays (what ``preprocess`` returns), each sample's
    family and ground truth."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        frame = read_frame(self.path)
        column = token_column(frame, self.path)
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            raise DatasetError(f"{self.path}: missing the column(s) {', '.join(missing)}")
        self.prompts = []
        for i, ids in enumerate(frame[column].tolist()):
            arr = np.asarray(ids if ids is not None else [])
            if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
                raise DatasetError(f"{self.path}: row {i}: '{column}' must be a non-empty list of integer token ids")
            self.prompts.append(arr.astype(np.int32))
        self.families = [str(d) for d in frame["dataset"].tolist()]
        self.ground_truth = frame["ground_truth"].tolist()


def load_tokenizer(path: Path | str) -> Any:
    """The tokenizer of a local folder, loaded as the reference loads it (``AutoTokenizer``), no download."""
    return local_tokenizer(path, "the model's checkpoint folder, or the 'tokenizer' folder `mlharness dataset synth "
                                 "gpt-oss` writes beside the data files")
