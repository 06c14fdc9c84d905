"""NE, ACC and gAUC of an accuracy log, as ``recommendation/dlrm_v3/accuracy.py`` computes and prints them.

The official script feeds each log entry (``[ts_idx, query_idx, predictions, labels, weights, n]`` as float32)
as one update to torchrec's ``NEMetricComputation``, ``AccuracyMetricComputation`` and
``GAUCMetricComputation`` (batch_size 1, window_size 3000) and logs every lifetime and window figure. The same
torch operations run here in the same order and dtypes (float64 states, float32 inputs), so the printed lines
are the script's, byte for byte. The window holds the last 3000 candidates; a log longer than that is scored by
lifetime figures only, since torchrec's buffer eviction is not ported (refused rather than approximated).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.errors import AccuracyError
from mlharness.tasks.base import AccuracyContext, AccuracyMetric, AccuracyResult, accuracy_log_entries

ETA = 1e-12
WINDOW_SIZE = 3000
TASK = "rating"


def parse_entry(data: np.ndarray, where: str) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    if data.size < 3:
        raise AccuracyError(f"{where}: {data.size} float32 values; an accuracy entry is [ts_idx, query_idx, "
                            "predictions, labels, weights, n]")
    n = int(data[-1])
    if data.size != 3 + 3 * n:
        raise AccuracyError(f"{where}: {data.size} float32 values but n = {n} candidates needs {3 + 3 * n}")
    return int(data[0]), int(data[1]), data[2:2 + n], data[2 + n:2 + 2 * n], data[2 + 2 * n:2 + 3 * n]


def _states(preds, labels, weights):
    import torch

    p, lab, w = (torch.from_numpy(np.array(x)).view(1, -1) for x in (preds, labels, weights))
    pd = p.double().clamp(min=ETA, max=1 - ETA)
    ce = -w * lab * torch.log2(pd) - w * (1.0 - lab) * torch.log2(1.0 - pd)
    ne = {"cross_entropy_sum": torch.sum(ce, dim=-1), "weighted_num_samples": torch.sum(w, dim=-1),
          "pos_labels": torch.sum(w * lab, dim=-1), "neg_labels": torch.sum(w * (1.0 - lab), dim=-1)}
    acc = {"accuracy_sum": torch.sum(w * ((p >= 0.5) == lab), dim=-1), "weighted_num_samples": torch.sum(w, dim=-1)}
    # GAUC over one query: [n_task=1, n_group=1, n_sample]
    p3, l3, w3 = p.view(1, 1, -1), lab.view(1, 1, -1), w.view(1, 1, -1)
    order = torch.argsort(p3, dim=-1)
    sl, sw = torch.gather(l3, -1, order), torch.gather(w3, -1, order)
    cum_neg = torch.cumsum(sw * (1 - sl), dim=-1)
    num = (sl * sw * cum_neg).sum(-1)
    w_pos, w_neg = (sl * sw).sum(-1), ((1 - sl) * sw).sum(-1)
    auc = num / (w_pos * w_neg + 1e-10)
    same = ~(torch.all(torch.logical_or(p3 == p3[:, :, 0:1], p3 == 0), dim=-1))
    mask = ((w_pos > 0) & (w_neg > 0)) * same
    auc = auc * mask
    gauc = {"auc_sum": auc.sum(-1), "num_samples": mask.sum(-1)}
    return ne, acc, gauc


def compute(entries: list[np.ndarray], where: list[str]) -> dict[str, float]:
    import torch

    z = lambda: torch.zeros(1, dtype=torch.double)  # noqa: E731 - torchrec's zero states
    ne = {k: z() for k in ("cross_entropy_sum", "weighted_num_samples", "pos_labels", "neg_labels")}
    acc = {k: z() for k in ("accuracy_sum", "weighted_num_samples")}
    gauc = {k: z() for k in ("auc_sum", "num_samples")}
    total = 0
    for data, w in zip(entries, where, strict=True):
        _, _, p, lab, wt = parse_entry(data, w)
        s_ne, s_acc, s_gauc = _states(p, lab, wt)
        for state, upd in ((ne, s_ne), (acc, s_acc), (gauc, s_gauc)):
            for k, v in upd.items():
                state[k] += v
        total += len(p)
    if total > WINDOW_SIZE:
        raise AccuracyError(f"{total} candidates: the window figures of accuracy.py (the last {WINDOW_SIZE} "
                            "candidates, torchrec's window buffer) are not ported past one window")
    cw = ne["weighted_num_samples"].double().clamp(min=ETA)
    mean = (ne["pos_labels"] / cw).double().clamp(min=ETA, max=1 - ETA)
    norm = -ne["pos_labels"] * torch.log2(mean) - ne["neg_labels"] * torch.log2(1.0 - mean)
    v_ne = (ne["cross_entropy_sum"] / norm)[0]
    v_acc = torch.where(acc["weighted_num_samples"] == 0.0, 0.0, acc["accuracy_sum"] / acc["weighted_num_samples"])[0]
    v_gauc = ((gauc["auc_sum"] + 1e-9) / (gauc["num_samples"] + 2e-9))[0]
    out = {}
    for name, v in (("ne", v_ne), ("accuracy", v_acc), ("gauc", v_gauc), ("gauc_num_samples", gauc["num_samples"][0])):
        for prefix in ("lifetime_", "window_"):  # within one window the two are the same sums
            out[f"metric/{prefix}{name}/{TASK}"] = float(v)
    return out


def accuracy_text(log: Path) -> tuple[str, dict[str, float]]:
    entries = accuracy_log_entries(log)
    data = [np.frombuffer(e.data(log), np.float32) for e in entries]
    figures = compute(data, [e.where for e in entries])
    lines = ["WARNING:main:Parsing loadgen accuracy log...", f"WARNING:main:results have {len(entries)} entries"]
    lines += [f"WARNING:main:{k}: {v}" for k, v in figures.items()]  # f"{tensor}" of a 0-d float64 is its float
    return "\n".join(lines) + "\n", figures


class DlrmV3Metric(AccuracyMetric):
    def score(self, accuracy_log: Path, ctx: AccuracyContext) -> AccuracyResult:
        text, figures = accuracy_text(accuracy_log)
        return AccuracyResult(text=text, value=figures[f"metric/lifetime_ne/{TASK}"], name="ne",
                              details={k.split("/")[1]: v for k, v in figures.items()})
