"""TEST08: accuracy in performance mode for dlrm-v3, verified as ``compliance/TEST08/run_verification.py`` does.

A streaming benchmark runs queries in its own time order, so LoadGen's ``qsl_idx`` does not name the data a
response answered; each response carries ``(ts_idx, query_idx)`` instead, and the performance run's sampled
responses are matched to the accuracy run's on that pair. For each match, NE of the performance predictions
against the accuracy run's labels and weights must be within ``tolerance`` (relative) of the accuracy run's NE.
The verdict and the printed counts are the official script's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.tasks.base import accuracy_log_entries

TOLERANCE = 0.001


def compute_ne(predictions, labels, weights):
    eps = 1e-7
    predictions = np.clip(predictions, eps, 1 - eps)
    labels = np.clip(labels, eps, 1 - eps)
    total_weight = np.sum(weights)
    if total_weight == 0:
        return 0.0
    ce = -np.sum(weights * (labels * np.log(predictions) + (1 - labels) * np.log(1 - predictions)))
    p = np.clip(np.sum(weights * labels) / total_weight, eps, 1 - eps)
    base = -p * np.log(p) - (1 - p) * np.log(1 - p)
    if base == 0:
        return 0.0
    return ce / (base * total_weight)


def _rows(path: Path) -> list[np.ndarray]:
    return [np.frombuffer(entry.data(path), np.float32) for entry in accuracy_log_entries(path)]


def verify(acc_log: Path, perf_log: Path, tolerance: float = TOLERANCE) -> tuple[bool, str]:
    """(passed, the official script's output from 'Reading accuracy mode results...' to its verdict)."""
    acc, perf = _rows(acc_log), _rows(perf_log)
    out = ["Reading accuracy mode results..."]
    ref = {}
    for d in acc:
        n = int(d[-1])
        p, lab, w = d[2:2 + n], d[2 + n:2 + 2 * n], d[2 + 2 * n:2 + 3 * n]
        ref[(int(d[0]), int(d[1]))] = (compute_ne(p, lab, w), lab, w)
    out.append("Reading performance mode results...")
    matched = unmatched = mismatch = 0
    for d in perf:
        key = (int(d[0]), int(d[1]))
        if key not in ref:
            unmatched += 1
            continue
        acc_ne, lab, w = ref[key]
        matched += 1
        perf_ne = compute_ne(d[2:], lab, w)
        if acc_ne == 0 and perf_ne == 0:
            continue
        if acc_ne == 0 or perf_ne == 0:
            mismatch += 1
            out.append(f"  NE mismatch at {key}: acc_ne={acc_ne}, perf_ne={perf_ne}")
            continue
        diff = abs(perf_ne - acc_ne) / abs(acc_ne)
        if diff > tolerance:
            mismatch += 1
            out.append(f"  NE mismatch at {key}: acc_ne={acc_ne:.6f}, perf_ne={perf_ne:.6f}, diff={diff * 100:.4f}%")
    ok = mismatch == 0 and matched > 0 and unmatched == 0
    out += [f"\nnum_acc_log_entries = {len(acc)}", f"num_perf_log_entries = {len(perf)}",
            f"num_matched = {matched}", f"num_unmatched = {unmatched}", f"num_ne_mismatch = {mismatch}",
            f"tolerance = {tolerance * 100:.2f}%", "\nTEST PASS" if ok else "\nTEST FAIL"]
    return ok, "\n".join(out) + "\n"
