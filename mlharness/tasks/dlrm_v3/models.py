"""A tiny HSTU in plain PyTorch (random weights from a config) and the oracle, answering in the reference's format.

HSTU (the reference's ``generative_recommenders/modules/stu.py``) projects each history event to u, v, q, k
with one SiLU linear layer, attends with ``silu(q k^T) / n`` under a causal mask (pointwise, not softmax),
gates the attended values by u, normalises and adds the residual. Histories are jagged: each sample's events are
cut from the flat ids by its offsets, and attention runs over that sample's events only. The user's last state
scores each candidate by a dot product with the candidate's embedding, through a sigmoid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlharness.tasks.dlrm_v3.jagged import Stream


@dataclass(frozen=True)
class HstuConfig:
    num_items: int = 1000
    dim: int = 32
    layers: int = 2
    heads: int = 2
    seed: int = 0


def build_hstu(cfg: HstuConfig):
    import torch
    from torch import nn

    class HstuLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.uvqk = nn.Linear(cfg.dim, 4 * cfg.dim)
            self.out = nn.Linear(cfg.dim, cfg.dim)
            self.norm = nn.LayerNorm(cfg.dim)

        def forward(self, x):  # x: [n, dim], one user's history
            n = x.shape[0]
            u, v, q, k = torch.split(nn.functional.silu(self.uvqk(x)), cfg.dim, dim=-1)
            h = cfg.heads
            q, k, v = (t.view(n, h, -1).transpose(0, 1) for t in (q, k, v))
            a = nn.functional.silu(q @ k.transpose(1, 2)) / n
            a = a * torch.tril(torch.ones(n, n, dtype=torch.bool))
            att = (a @ v).transpose(0, 1).reshape(n, cfg.dim)
            return x + self.out(self.norm(att) * u)

    class Hstu(nn.Module):
        def __init__(self):
            super().__init__()
            self.item = nn.Embedding(cfg.num_items, cfg.dim)
            self.time = nn.Linear(1, cfg.dim)
            self.layers = nn.ModuleList(HstuLayer() for _ in range(cfg.layers))

        def forward(self, ids, times, query_time, cands):
            age = (query_time - times).float().unsqueeze(-1) / 1000.0
            x = self.item(ids) + self.time(age)
            for layer in self.layers:
                x = layer(x)
            return torch.sigmoid(self.item(cands) @ x[-1])

    torch.manual_seed(cfg.seed)
    return Hstu().eval()


def response(ts_idx: int, query_idx: int, preds: np.ndarray, labels: np.ndarray | None = None,
             weights: np.ndarray | None = None) -> np.ndarray:
    """The reference's response: [ts_idx, query_idx, predictions] in performance mode, with labels, weights and
    the candidate count appended in accuracy mode (main.py), all float32."""
    parts = [np.array([ts_idx, query_idx], np.float32), preds.astype(np.float32)]
    if labels is not None:
        parts += [labels.astype(np.float32), weights.astype(np.float32), np.array([len(preds)], np.float32)]
    return np.concatenate(parts)


def predict_random(stream: Stream, i: int, model) -> np.ndarray:
    import torch

    a = stream.arrays
    with torch.no_grad():
        p = model(torch.from_numpy(stream.jagged("uih_item_ids", i)), torch.from_numpy(stream.jagged("uih_timestamps", i)),
                  int(a["query_time"][i]), torch.from_numpy(stream.jagged("cand_item_ids", i)))
    return p.numpy().astype(np.float32)


def predict_oracle(stream: Stream, i: int) -> np.ndarray:
    return stream.jagged("cand_labels", i).astype(np.float32)


def answer(stream: Stream, i: int, preds: np.ndarray, accuracy: bool) -> np.ndarray:
    a = stream.arrays
    if not accuracy:
        return response(int(a["ts_idx"][i]), int(a["query_idx"][i]), preds)
    return response(int(a["ts_idx"][i]), int(a["query_idx"][i]), preds, stream.jagged("cand_labels", i),
                    stream.jagged("cand_weights", i))
