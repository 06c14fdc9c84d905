"""IGBH as the reference reads it (``graph/R-GAT/igbh.py``): ``<root>/<size>/processed/`` holding a folder per node
type (``node_feat.npy``; the paper folder also ``node_label_19.npy`` and ``node_label_2K.npy``), a folder per edge
type (``<src>__<relation>__<dst>/edge_index.npy``) and the seed splits ``train_idx.pt`` and ``val_idx.pt``
(``tools/split_seeds.py``). Sample ``i`` of the benchmark is paper node ``val_idx[i]``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, load_npy, torch_load

SIZES = ("tiny", "small", "medium", "large", "full")
# IGBH-full has 788,379 validation papers (6 MiB of int64 ids) and 269 million papers, whose labels take 1 GiB in
# float32: the bounds hold those with room and refuse a wrong file before it is read
SEEDS_LIMIT = DATA_FILE_LIMIT
LABELS_LIMIT = 16 * DATA_FILE_LIMIT


def processed(root: str | Path, size: str = "tiny") -> Path:
    return Path(root) / size / "processed"


def validation_seeds(root: str | Path, size: str = "tiny", count: int | None = None) -> np.ndarray:
    """The validation paper nodes (``val_idx.pt``), the first ``count`` of them when given."""
    import torch

    path = processed(root, size) / "val_idx.pt"
    seeds = torch_load(path, "the validation seeds", SEEDS_LIMIT, error=lambda m: DatasetError(
        f"{m} (the IGBH layout needs val_idx.pt: tools/split_seeds.py; or make a tiny graph: mlharness dataset "
        "synth rgat --out DIR)"))
    if not isinstance(seeds, torch.Tensor) or seeds.ndim != 1 or seeds.dtype.is_floating_point \
            or seeds.dtype == torch.bool:
        what = f"{seeds.dtype} {tuple(seeds.shape)}" if isinstance(seeds, torch.Tensor) else type(seeds).__name__
        raise DatasetError(f"{path}: val_idx must be a 1-D integer tensor of paper node ids; found {what}")
    seeds = seeds.numpy().astype(np.int64)
    return seeds[:count] if count else seeds


def paper_labels(root: str | Path, size: str = "tiny", use_label_2k: bool = True) -> np.ndarray:
    """Each paper's label as the accuracy script reads it (``node_label_2K.npy`` by default), as int64."""
    name = "node_label_2K.npy" if use_label_2k else "node_label_19.npy"
    path = processed(root, size) / "paper" / name
    labels = load_npy(path, "the paper labels", LABELS_LIMIT,
                      error=lambda m: DatasetError(f"{m} (the paper labels of the IGBH layout)"))
    if not isinstance(labels, np.ndarray) or labels.dtype.kind not in "iuf":
        what = f"{labels.dtype} {labels.shape}" if isinstance(labels, np.ndarray) else "an .npz archive"
        raise DatasetError(f"{path}: the paper labels are one number per paper; found {what}")
    return labels.astype(np.int64)
