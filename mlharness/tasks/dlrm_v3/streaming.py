"""dlrm-v3's streaming synthetic data in the reference's own file layout, written and read.

``recommendation/dlrm_v3/streaming_synthetic_data.py`` writes, in one folder: ``<f>.csv`` per file of users (one
row per user, four cells per time slot: candidate item ids, candidate ratings, history item ids, history ratings,
each a comma-joined list; the slots are the base history, the train timestamps, the eval slot, then the
inference timestamps: ``4 * (total_ts + 2)`` cells, the four of a slot empty where the user was not sampled),
``offset.csv`` (per file, the byte offset of each user's row), ``ts_<f>_<ts>.csv`` (the users of file f sampled at
timestamp ts), ``requests_per_ts.csv`` (per timestamp, the requested users), ``users_cumsum_per_ts.csv`` (per
timestamp, the running count of those users over the files) and ``requests_per_ts_offset.csv`` (the byte offset
of each line of requests_per_ts.csv). ``datasets/synthetic_streaming.py`` reads it given ``train_ts``,
``total_ts``, ``num_files``, ``num_users``, ``num_items`` and ``num_categories`` from configs.py; those are kept
here beside the files in ``dataset.json`` (no file of the reference holds them).

Reading follows the reference's inference branch (``_process_line``): the query of user u at inference timestamp
ts has as history the base and train slots and the inference slots before ts (the eval slot skipped), as
candidates the slot of ts, and as labels ``rating >= 3.5`` (``load_item``'s candidate action weights); its
``ts_idx`` counts from the first inference timestamp (main.py's StreamingQuerySampler) and ``query_idx`` is its
place among the timestamp's requests. The reference gives every history event the dummy timestamp 1; here an
event's timestamp is its slot's timestamp + 1 (0 for the base history) and a query's ``query_time`` is its
timestamp + 1, so the stream's time order can be checked (``jagged.check_stream``).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from mlharness.errors import DatasetError
from mlharness.fileguard import iter_lines, open_regular, read_json

REFERENCE_FILES = ("offset.csv", "requests_per_ts.csv", "users_cumsum_per_ts.csv", "requests_per_ts_offset.csv")
META_FILE = "dataset.json"  # the DLRMv3SyntheticStreamingDataset arguments configs.py gives the reference
LABEL_RATING = 3.5
# the counts of dataset.json, each an integer in [low, high]: the reference's largest configuration (streaming-200b)
# has train_ts 90, total_ts 100, 100 files, 10^7 users, 10^9 items and 128 categories; the bounds leave ten times
# room or more, and refuse a count that would size arrays past any machine (num_items 10^12)
META_COUNTS = {"train_ts": (0, 100_000), "total_ts": (1, 100_000), "num_files": (1, 100_000),
               "num_users": (1, 1_000_000_000), "num_items": (1, 10_000_000_000), "num_categories": (1, 1_000_000)}
META_OPTIONAL = ("num_items", "num_categories")  # not needed to read the queries; checked when given
META_LIMIT = 1 << 20  # dataset.json holds six numbers
# one line of the CSVs: requests_per_ts.csv lists a timestamp's requested users (10^7 users of 8 digits: 80 MiB), a
# user's row holds ~400 cells of item lists; the reference itself lifts csv's field limit to sys.maxsize
CSV_LINE_LIMIT = 1 << 30


def _line_offsets(path: Path) -> list[int]:
    offsets, at = [], 0
    with open_regular(path, "the CSV just written") as f:
        for line in f:
            offsets.append(at)
            at += len(line)
    return offsets


def _join(values) -> str:
    return ",".join(str(v) for v in values)


def write_reference(out: Path, num_users: int = 8, num_items: int = 1000, num_categories: int = 16,
                    categories_per_user: int = 4, train_ts: int = 2, inference_ts: int = 4, seq_len: int = 12,
                    num_eval_candidates: int = 4, num_inference_candidates: int = 8,
                    user_sampling_ratio: float = 1.0, seed: int = 0) -> Path:
    """One file of users (``0.csv``) and its metadata, as streaming_synthetic_data.py writes them, at a tiny size;
    the draws are simpler than the reference's (a user's favourite categories, ratings by category rank and
    timestamp, averaged with each item's own rating) but the meaning of every cell is the reference's."""
    rng = np.random.default_rng(seed)
    total_ts = train_ts + inference_ts
    per_cat = num_items // num_categories
    item_rating = rng.choice([5.0, 4.0, 3.0, 2.0, 1.0], size=num_items, p=[0.2, 0.25, 0.25, 0.2, 0.1])
    out.mkdir(parents=True, exist_ok=True)
    ts_users: dict[int, list[int]] = {t: [] for t in range(total_ts)}
    with open(out / "0.csv", "w", newline="") as f:
        writer = csv.writer(f)
        for user in range(num_users):
            cats = rng.choice(num_categories, categories_per_user, replace=False)
            row: list[str] = []
            for t in [-1, *range(train_ts), train_ts, *range(train_ts, total_ts)]:
                slot = len(row) // 4
                inference = slot >= train_ts + 2
                if t >= 0 and slot != train_ts + 1:
                    if rng.random() >= user_sampling_ratio:
                        row += ["", "", "", ""]
                        continue
                    ts_users[t].append(user)
                n = num_inference_candidates if inference else max(seq_len, num_eval_candidates + 1)
                rank = rng.integers(0, categories_per_user, n)
                items = cats[rank] * per_cat + rng.integers(0, per_cat, n)
                wave = 0.5 * math.cos(max(t, 0) * math.pi / 4)
                ratings = ((5.0 - 4.0 * rank / max(categories_per_user - 1, 1) + wave).clip(1, 5)
                           + item_rating[items]) / 2
                ratings = np.round(ratings, 2)
                pick = rng.choice(n, min(seq_len, n) if inference else num_eval_candidates, replace=False)
                cand, cand_r = (items, ratings) if inference else (items[pick], ratings[pick])
                uih, uih_r = (items[pick], ratings[pick]) if inference else (items, ratings)
                row += [_join(cand), _join(cand_r), _join(uih), _join(uih_r)]
            writer.writerow(row)
    with open(out / "offset.csv", "w", newline="") as f:
        csv.writer(f).writerow([_join(_line_offsets(out / "0.csv"))])
    for t, users in ts_users.items():
        with open(out / f"ts_0_{t}.csv", "w", newline="") as f:
            csv.writer(f).writerows([[u] for u in users])
    with open(out / "requests_per_ts.csv", "w", newline="") as req, \
            open(out / "users_cumsum_per_ts.csv", "w", newline="") as cum:
        for t in range(total_ts):
            csv.writer(req).writerow([_join(ts_users[t])])
            csv.writer(cum).writerow([_join(np.cumsum([len(ts_users[t])]).tolist())])
    with open(out / "requests_per_ts_offset.csv", "w", newline="") as f:
        csv.writer(f).writerow([_join(_line_offsets(out / "requests_per_ts.csv"))])
    meta = {"train_ts": train_ts, "total_ts": total_ts, "num_files": 1, "num_users": num_users,
            "num_items": num_items, "num_categories": num_categories}
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def _ints(cell: str) -> list[int]:
    return [int(x) for x in cell.split(",")] if cell else []


def _floats(cell: str) -> list[float]:
    return [float(x) for x in cell.split(",")] if cell else []


def read_meta(meta_path: Path) -> dict[str, int]:
    """The counts of ``dataset.json`` (DLRMv3SyntheticStreamingDataset's arguments), each checked to be an integer
    in its range (:data:`META_COUNTS`)."""
    meta = read_json(meta_path, "the dataset's arguments", META_LIMIT, error=DatasetError)
    if not isinstance(meta, dict):
        raise DatasetError(f"{meta_path}: a JSON object of train_ts, total_ts, num_files and num_users "
                           f"(DLRMv3SyntheticStreamingDataset's arguments) is expected, found {type(meta).__name__}")
    counts = {}
    for key, (low, high) in META_COUNTS.items():
        if key not in meta:
            if key in META_OPTIONAL:
                continue
            raise DatasetError(f"{meta_path}: {key} is missing; the file gives train_ts, total_ts, num_files and "
                               "num_users (DLRMv3SyntheticStreamingDataset's arguments)")
        value = meta[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise DatasetError(f"{meta_path}: {key} is {json.dumps(value)[:40]}; an integer from {low:,} to "
                               f"{high:,} is expected")
        counts[key] = value
    if counts["train_ts"] >= counts["total_ts"]:
        raise DatasetError(f"{meta_path}: train_ts {counts['train_ts']} leaves no inference timestamp; it must be "
                           f"less than total_ts {counts['total_ts']}")
    if counts["num_users"] < counts["num_files"]:
        raise DatasetError(f"{meta_path}: num_users {counts['num_users']} is less than num_files "
                           f"{counts['num_files']}; every file holds at least one user")
    return counts


def _csv_rows(path: Path, what: str):
    """(line number, cells) for each line of a CSV of the layout, streamed through the door."""
    for number, text in iter_lines(path, what, limit=CSV_LINE_LIMIT, error=DatasetError):
        yield number, next(csv.reader([text]), [])


def _parse(path: Path, line: int, parse, cell: str, what: str) -> list:
    try:
        return parse(cell)
    except ValueError:
        raise DatasetError(f"{path}, line {line}: {what} is not a comma-separated list of numbers: "
                           f"{cell[:60]!r}") from None


def read_reference(folder: Path) -> dict[str, np.ndarray]:
    """The inference queries of a reference-layout folder as the stream's flat arrays and offsets."""
    meta_path = folder / META_FILE
    meta = read_meta(meta_path)
    train_ts, total_ts, num_files, num_users = (meta[k] for k in ("train_ts", "total_ts", "num_files",
                                                                  "num_users"))
    csv.field_size_limit(CSV_LINE_LIMIT)
    offsets_path, requests_path = folder / "offset.csv", folder / "requests_per_ts.csv"
    file_offsets = [_parse(offsets_path, n, _ints, row[0], "the row offsets") if row else []
                    for n, row in _csv_rows(offsets_path, "the row offsets")]
    requests = [_parse(requests_path, n, _ints, row[0], "the requested users") if row else []
                for n, row in _csv_rows(requests_path, "the requests per timestamp")]
    if len(requests) != total_ts:
        raise DatasetError(f"{folder / 'requests_per_ts.csv'}: {len(requests)} timestamps; {meta_path} says "
                           f"total_ts {total_ts}")
    per_file = num_users // num_files
    cols: dict[str, list] = {k: [] for k in ("ts_idx", "query_idx", "user_id", "query_time", "uih_item_ids",
                                             "uih_timestamps", "cand_item_ids", "cand_labels")}
    for ts in range(train_ts, total_ts):
        for q, user in enumerate(requests[ts]):
            path = folder / f"{user // per_file}.csv"
            try:
                at = file_offsets[user // per_file][user % per_file]
            except IndexError:
                raise DatasetError(f"{offsets_path}: no row offset for user {user} (file {user // per_file}, "
                                   f"row {user % per_file}); requests_per_ts.csv requests that user") from None
            with open_regular(path, "the users' file", error=DatasetError) as f:
                f.seek(at)
                raw = f.readline(CSV_LINE_LIMIT + 1)
            if len(raw) > CSV_LINE_LIMIT:
                raise DatasetError(f"{path}, user {user}: the row at byte {at} is longer than 1 GiB, the most read "
                                   "for one row; check that it is the right file")
            try:
                row = next(csv.reader([raw.decode("utf-8")]), [])
            except UnicodeDecodeError:
                raise DatasetError(f"{path}, user {user}: the row at byte {at} is not UTF-8 text") from None
            if len(row) != 4 * (total_ts + 2):
                raise DatasetError(f"{path}, user {user}: {len(row)} cells; total_ts {total_ts} needs "
                                   f"{4 * (total_ts + 2)}")
            slots = [*range(train_ts + 1), *range(train_ts + 2, ts + 2)]
            ids, times = [], []
            try:
                for i in slots:
                    if row[4 * i]:  # a slot the user was sampled in (the reference's test of its candidate cell)
                        part = _ints(row[2 + 4 * i])
                        ids += part
                        times += [0 if i == 0 else (i if i <= train_ts else i - 1)] * len(part)
                cand = _ints(row[4 * (ts + 2)])
                ratings = _floats(row[1 + 4 * (ts + 2)])
            except ValueError as e:
                raise DatasetError(f"{path}, user {user}: a cell is not a comma-separated list of numbers "
                                   f"({e})") from None
            cols["ts_idx"].append(ts - train_ts), cols["query_idx"].append(q), cols["user_id"].append(user)
            cols["query_time"].append(ts + 1)
            cols["uih_item_ids"].append(ids), cols["uih_timestamps"].append(times)
            cols["cand_item_ids"].append(cand)
            cols["cand_labels"].append([float(r >= LABEL_RATING) for r in ratings])
    out = {k: np.asarray(cols[k], np.int64) for k in ("ts_idx", "query_idx", "user_id", "query_time")}
    for name, off, dtype in (("uih_item_ids", "uih_offsets", np.int64), ("uih_timestamps", None, np.int64),
                             ("cand_item_ids", "cand_offsets", np.int64), ("cand_labels", None, np.float32)):
        out[name] = np.asarray([v for part in cols[name] for v in part], dtype)
        if off:
            out[off] = np.concatenate([[0], np.cumsum([len(p) for p in cols[name]])]).astype(np.int64)
    out["cand_weights"] = np.ones(len(out["cand_labels"]), np.float32)
    return out
