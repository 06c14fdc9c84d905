"""A tiny IGBH in the reference's processed layout (``graph/R-GAT/igbh.py``), seeded: the six node types with
``node_feat.npy`` (float32 [nodes, dim]; 1024 as IGBH), the six edge types with ``edge_index.npy`` (int64
[edges, 2]), the paper labels (``node_label_19.npy`` and ``node_label_2K.npy``, float32 as IGBH stores them) and
the seed splits written as ``tools/split_seeds.py`` writes them (``torch.manual_seed(42)``, ``randperm`` of the
papers, the first 60% ``train_idx.pt``, the next ``validation_frac`` ``val_idx.pt``). IGBH-tiny has 100,000 papers
and a validation fraction of 0.005; the default here is 400 papers and 0.25, so a run has 100 samples.

Each paper's first feature is its label (what rgat-oracle reads); labels are below 256, so the reference's uint8
responses hold them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.tasks.rgat.dataset import processed
from mlharness.tasks.rgat.models import FILE_ETYPES


def write_synthetic_igbh(out: Path, papers: int = 400, dim: int = 1024, classes: int = 19, seed: int = 0,
                         validation_frac: float = 0.25, size: str = "tiny") -> Path:
    import torch

    rng = np.random.default_rng(seed)
    counts = {"paper": papers, "author": papers * 3 // 2, "institute": max(4, papers // 20),
              "fos": max(4, papers // 10), "journal": max(2, papers // 40), "conference": max(2, papers // 40)}
    root = processed(out, size)
    labels = rng.integers(0, classes, papers)
    for ntype, n in counts.items():
        (root / ntype).mkdir(parents=True, exist_ok=True)
        feat = rng.standard_normal((n, dim), dtype=np.float32)
        if ntype == "paper":
            feat[:, 0] = labels
            np.save(root / ntype / "node_label_19.npy", labels.astype(np.float32))
            np.save(root / ntype / "node_label_2K.npy", labels.astype(np.float32))
        np.save(root / ntype / "node_feat.npy", feat)
    per_paper = {"cites": 5, "written_by": 2, "topic": 2, "published": 1, "venue": 1}
    for src, rel, dst in FILE_ETYPES:
        if rel == "affiliated_to":  # one institute per author
            pairs = np.stack([np.arange(counts[src]), rng.integers(0, counts[dst], counts[src])], 1)
        else:
            k = per_paper[rel]
            pairs = np.stack([np.repeat(np.arange(papers), k), rng.integers(0, counts[dst], papers * k)], 1)
        (root / f"{src}__{rel}__{dst}").mkdir(exist_ok=True)
        np.save(root / f"{src}__{rel}__{dst}" / "edge_index.npy", pairs.astype(np.int64))
    torch.manual_seed(42)  # tools/split_seeds.py, random_seed 42
    shuffled = torch.randperm(papers)
    n_train, n_val = int(papers * 0.6), int(papers * validation_frac)
    torch.save(shuffled[:n_train], root / "train_idx.pt")
    torch.save(shuffled[n_train:n_train + n_val], root / "val_idx.pt")
    return Path(out)
