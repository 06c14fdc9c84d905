"""IGBH as the reference reads it (``graph/R-GAT/igbh.py``): ``<root>/<size>/processed/`` holding a folder per node
type (``node_feat.npy``; the paper folder also ``node_label_19.npy`` and ``node_label_2K.npy``), a folder per edge
type (``<src>__<relation>__<dst>/edge_index.npy``) and the seed splits ``train_idx.pt`` and ``val_idx.pt``
(``tools/split_seeds.py``). Sample ``i`` of the benchmark is paper node ``val_idx[i]``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError

SIZES = ("tiny", "small", "medium", "large", "full")


def processed(root: str | Path, size: str = "tiny") -> Path:
    return Path(root) / size / "processed"


def validation_seeds(root: str | Path, size: str = "tiny", count: int | None = None) -> np.ndarray:
    """The validation paper nodes (``val_idx.pt``), the first ``count`` of them when given."""
    import torch

    path = processed(root, size) / "val_idx.pt"
    if not path.is_file():
        raise DatasetError(f"{path} not found: the IGBH layout needs val_idx.pt (tools/split_seeds.py; or make a "
                           "tiny graph: mlharness dataset synth rgat --out DIR)")
    seeds = torch.load(path, weights_only=True)
    if not isinstance(seeds, torch.Tensor) or seeds.ndim != 1 or seeds.dtype.is_floating_point:
        raise DatasetError(f"{path}: val_idx must be a 1-D integer tensor of paper node ids")
    seeds = seeds.numpy().astype(np.int64)
    return seeds[:count] if count else seeds


def paper_labels(root: str | Path, size: str = "tiny", use_label_2k: bool = True) -> np.ndarray:
    """Each paper's label as the accuracy script reads it (``node_label_2K.npy`` by default), as int64."""
    name = "node_label_2K.npy" if use_label_2k else "node_label_19.npy"
    path = processed(root, size) / "paper" / name
    if not path.is_file():
        raise DatasetError(f"{path} not found: the paper labels of the IGBH layout")
    return np.load(path).astype(np.int64)
