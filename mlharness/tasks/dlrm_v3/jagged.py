"""Jagged sparse inputs of a time-ordered stream, checked when the file is opened.

One file (``stream.npz``) holds every sample's user history and candidates as flat value arrays plus offsets,
the layout torchrec's KeyedJaggedTensor and the reference's HSTU take: sample ``i``'s history is
``uih_item_ids[uih_offsets[i]:uih_offsets[i+1]]``. Offsets that go backwards or past their values would make a
gather read another user's history silently, and a stream whose timestamps go backwards would let a query see
the future the rules forbid (queries at ``ts_idx`` t may use only history before t), so both are refused before
any model loads, naming the file, the sample and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, load_npy

STREAM_FILE = "stream.npz"
STREAM_LIMIT = 16 * DATA_FILE_LIMIT
# field -> the offsets array that cuts it into samples
JAGGED = {"uih_item_ids": "uih_offsets", "uih_timestamps": "uih_offsets", "cand_item_ids": "cand_offsets",
          "cand_labels": "cand_offsets", "cand_weights": "cand_offsets"}
PER_SAMPLE = ("ts_idx", "query_idx", "user_id", "query_time")


@dataclass
class Stream:
    path: Path
    arrays: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.arrays["ts_idx"])

    def jagged(self, field: str, i: int) -> np.ndarray:
        off = self.arrays[JAGGED[field]]
        return self.arrays[field][off[i]:off[i + 1]]


def _refuse(path: Path, sample: int | None, field: str, msg: str) -> DatasetError:
    where = f"{path}" + (f", sample {sample}" if sample is not None else "") + f", field '{field}'"
    return DatasetError(f"{where}: {msg}")


def check_offsets(path: Path, name: str, off: np.ndarray, n_samples: int, n_values: int) -> None:
    if off.ndim != 1 or len(off) != n_samples + 1:
        raise _refuse(path, None, name, f"has {len(off)} entries; a stream of {n_samples} samples needs "
                                        f"{n_samples + 1} (a leading 0, then each sample's end)")
    if off[0] != 0:
        raise _refuse(path, 0, name, f"starts at {off[0]}; offsets start at 0")
    back = np.flatnonzero(np.diff(off) < 0)
    if back.size:
        i = int(back[0])
        raise _refuse(path, i, name, f"is not monotone: sample {i} ends at {off[i + 1]} before it starts at "
                                     f"{off[i]}")
    if off[-1] != n_values:
        i = int(np.argmax(off > n_values)) - 1 if off[-1] > n_values else n_samples - 1
        raise _refuse(path, max(i, 0), name, f"ends at {off[-1]} but its values hold {n_values}")


def check_stream(path: Path, a: dict[str, np.ndarray]) -> None:
    """Offsets monotone and in range; histories and the stream itself in time order."""
    for f in (*PER_SAMPLE, *JAGGED, "uih_offsets", "cand_offsets"):
        if f not in a:
            raise _refuse(path, None, f, "is missing")
    n = len(a["ts_idx"])
    for f in PER_SAMPLE:
        if len(a[f]) != n:
            raise _refuse(path, None, f, f"has {len(a[f])} entries for {n} samples")
    for f, o in JAGGED.items():
        check_offsets(path, o, a[o], n, len(a[f]))
    ts = a["ts_idx"]
    back = np.flatnonzero(np.diff(ts) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise _refuse(path, i, "ts_idx", f"goes back from {ts[i - 1]} to {ts[i]}: the stream must be "
                                         "time-ordered (a query may only see history before its timestamp)")
    off, t = a["uih_offsets"], a["uih_timestamps"]
    for i in range(n):
        h = t[off[i]:off[i + 1]]
        if h.size and (np.any(np.diff(h) < 0) or h[-1] > a["query_time"][i]):
            raise _refuse(path, i, "uih_timestamps", "are out of order (a history is ascending in time and "
                                                     "ends before its query_time)")
    cl = a["cand_labels"]
    if np.any((cl != 0) & (cl != 1)):
        i = int(np.searchsorted(a["cand_offsets"], int(np.flatnonzero((cl != 0) & (cl != 1))[0]), "right")) - 1
        raise _refuse(path, i, "cand_labels", "holds a value other than 0 or 1")


def open_stream(folder: Path) -> Stream:
    """The reference's streaming layout (a folder with requests_per_ts.csv: streaming.py), or one stream.npz of
    the flat arrays and offsets (a layout of mlharness's own, which states a stream's offsets outright)."""
    from mlharness.tasks.dlrm_v3.streaming import read_reference

    path = Path(folder)
    # exists(), not is_file(): a FIFO or device there is the reference's layout gone wrong, refused by name
    if path.is_dir() and (path / "requests_per_ts.csv").exists():
        arrays = read_reference(path)
        check_stream(path, arrays)
        return Stream(path, arrays)
    path = path / STREAM_FILE if path.is_dir() else path
    # the stream's flat arrays: a few hundred MiB for the reference's inference queries; 16 GiB leaves room
    arrays = load_npy(path, "the stream", STREAM_LIMIT, error=lambda m: DatasetError(
        f"{m} (write one with `mlharness dataset synth dlrm-v3 --out DIR`)"))
    if not isinstance(arrays, dict):
        raise DatasetError(f"{path}: the stream is an .npz of named arrays (np.savez), not one array")
    check_stream(path, arrays)
    return Stream(path, arrays)
