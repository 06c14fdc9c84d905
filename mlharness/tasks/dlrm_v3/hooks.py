"""What dlrm-v3's manifests call: the stream opened and checked once (the dataset's ``init``), each query as a
jagged sample (``preprocess``), the models as ``nn.Module`` factories over a jagged batch (keys, then values and
offsets per field: ``kinds/jagged/input.py``), and the responses in the reference's format (``postprocess``).

A batch's samples are the ones the time-ordered walk chose, not LoadGen's (``StreamOrder``), so every response
carries its own ``(ts_idx, query_idx)``: that is what the accuracy script and TEST08 read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlharness.errors import DatasetError
from mlharness.tasks.dlrm_v3 import models
from mlharness.tasks.dlrm_v3.jagged import Stream, open_stream

KEYS = ("ts_idx", "query_idx", "query_time")


def open_dataset(ctx: dict[str, Any]) -> Stream:
    if not ctx.get("dataset_path"):
        raise DatasetError("dlrm-v3 needs --dataset-path: a folder of the reference's streaming data (make one: "
                           "mlharness dataset synth dlrm-v3 --out DIR)")
    return open_stream(ctx["dataset_path"])


def sample(stream: Stream, index: int, fields: tuple[str, ...] = ("uih_item_ids", "uih_timestamps",
                                                                  "cand_item_ids")) -> dict[str, Any]:
    """One query: its keys and its jagged lists (the history and the candidates)."""
    a = stream.arrays
    out: dict[str, Any] = {k: int(a[k][index]) for k in KEYS}
    out.update({f: stream.jagged(f, index) for f in fields})
    return out


def responses(stream: Stream, predictions: np.ndarray, indices: np.ndarray, accuracy: bool) -> list[np.ndarray]:
    """The batch's flat predictions cut per query, as main.py answers: ``[ts_idx, query_idx, predictions]``, plus
    labels, weights and the candidate count in accuracy mode."""
    out, at = [], 0
    flat = np.asarray(predictions, np.float32).reshape(-1)
    for i in (int(x) for x in indices):
        n = len(stream.jagged("cand_item_ids", i))
        out.append(models.answer(stream, i, flat[at:at + n], accuracy))
        at += n
    if at != len(flat):
        raise DatasetError(f"the model gave {len(flat)} predictions for {at} candidates of samples "
                           f"{[int(x) for x in indices]}")
    return out


def hstu(num_items: int = models.HstuConfig.num_items, dim: int = models.HstuConfig.dim,
         layers: int = models.HstuConfig.layers, heads: int = models.HstuConfig.heads, seed: int = 0) -> Any:
    """The tiny HSTU (random weights from the config) over a jagged batch: each query's history attends to itself
    only, cut from the flat values by its offsets."""
    import torch

    net = models.build_hstu(models.HstuConfig(num_items, dim, layers, heads, seed))

    class JaggedHstu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, ts_idx, query_idx, query_time, ids, ids_off, times, times_off, cands, cands_off):
            out = [self.net(ids[ids_off[i]:ids_off[i + 1]], times[times_off[i]:times_off[i + 1]],
                            query_time[i], cands[cands_off[i]:cands_off[i + 1]]) for i in range(len(ts_idx))]
            return torch.cat(out)

    return JaggedHstu().eval()


def oracle() -> Any:
    """Answers each candidate with its label (a known-answer model: its accuracy run scores the maximum)."""
    import torch

    class Oracle(torch.nn.Module):
        def forward(self, ts_idx, query_idx, query_time, labels, labels_off):
            return labels.float()

    return Oracle().eval()


def reference_checkpoint(checkpoint: str, uri: str) -> Any:
    """dlrm-v3's trained model: refused with what is missing (see manifests/dlrm-v3/dlrm-v3.yaml)."""
    from mlharness.errors import PredictorError

    raise PredictorError(f"dlrm-v3's checkpoint ({checkpoint}, from {uri}) is the reference's DlrmHSTU as a "
                         "sharded torch distributed checkpoint; loading it needs the reference's model code "
                         "(generative_recommenders with torchrec and fbgemm), which mlharness does not port yet. "
                         "Run dlrm-v3-random (performance) or dlrm-v3-oracle (scoring) instead")
