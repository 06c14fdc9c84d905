"""A seeded synthetic stream: users whose histories grow over timestamps, each query's candidates labelled.

Each timestamp ``ts_idx`` holds a batch of queries (``query_idx`` counts within the timestamp, as the reference's
``StreamingQuerySampler`` does); a query's history holds only events before its ``query_time``. A candidate's
label is 1 when its item shares the category most frequent in the user's history, so a model that reads the
history can do better than chance, and the oracle (the labels as its predictions) scores the maximum.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlharness.tasks.dlrm_v3.jagged import STREAM_FILE, check_stream

NUM_ITEMS = 1000
NUM_CATEGORIES = 16


def category(items: np.ndarray) -> np.ndarray:
    return items % NUM_CATEGORIES


def synth_stream(num_ts: int = 4, queries_per_ts: int = 8, candidates: int = 8, max_history: int = 24,
                 seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {k: [] for k in ("ts_idx", "query_idx", "user_id", "query_time", "uih_item_ids",
                                             "uih_timestamps", "cand_item_ids", "cand_labels", "cand_weights")}
    uih_off, cand_off = [0], [0]
    for ts in range(num_ts):
        for q in range(queries_per_ts):
            user = int(rng.integers(0, 10_000))
            n = int(rng.integers(2, max_history + 1))
            fav = int(rng.integers(0, NUM_CATEGORIES))
            items = np.where(rng.random(n) < 0.7, fav + NUM_CATEGORIES * rng.integers(0, NUM_ITEMS // NUM_CATEGORIES, n),
                             rng.integers(0, NUM_ITEMS, n))
            qt = 1000 * (ts + 1)
            times = np.sort(rng.integers(0, qt, n))
            cand = rng.integers(0, NUM_ITEMS, candidates)
            cand[: candidates // 2] = fav + NUM_CATEGORIES * rng.integers(0, NUM_ITEMS // NUM_CATEGORIES, candidates // 2)
            rng.shuffle(cand)
            top = np.bincount(category(items), minlength=NUM_CATEGORIES).argmax()
            cols["ts_idx"].append(ts)
            cols["query_idx"].append(q)
            cols["user_id"].append(user)
            cols["query_time"].append(qt)
            cols["uih_item_ids"].append(items)
            cols["uih_timestamps"].append(times)
            cols["cand_item_ids"].append(cand)
            cols["cand_labels"].append((category(cand) == top).astype(np.float32))
            cols["cand_weights"].append(np.ones(candidates, np.float32))
            uih_off.append(uih_off[-1] + n)
            cand_off.append(cand_off[-1] + candidates)
    out = {k: np.asarray(cols[k], np.int64) for k in ("ts_idx", "query_idx", "user_id", "query_time")}
    for k in ("uih_item_ids", "uih_timestamps", "cand_item_ids"):
        out[k] = np.concatenate(cols[k]).astype(np.int64)
    out["cand_labels"] = np.concatenate(cols["cand_labels"])
    out["cand_weights"] = np.concatenate(cols["cand_weights"])
    out["uih_offsets"] = np.asarray(uih_off, np.int64)
    out["cand_offsets"] = np.asarray(cand_off, np.int64)
    return out


def write_stream(out: Path, num_ts: int = 4, queries_per_ts: int = 8, seed: int = 0) -> Path:
    """The reference's streaming layout (streaming.py): ``queries_per_ts`` users, each requested at each of
    ``num_ts`` inference timestamps; checked as a run opens it."""
    from mlharness.tasks.dlrm_v3.jagged import open_stream
    from mlharness.tasks.dlrm_v3.streaming import write_reference

    write_reference(out, num_users=queries_per_ts, inference_ts=num_ts, seed=seed)
    open_stream(out)
    return out


def write_npz(out: Path, **kw) -> Path:
    """mlharness's own one-file layout (stream.npz) of :func:`synth_stream`'s arrays."""
    arrays = synth_stream(**kw)
    out.mkdir(parents=True, exist_ok=True)
    path = out / STREAM_FILE
    check_stream(path, arrays)
    np.savez(path, **arrays)
    return path
