"""dlrm-v3's synthetic data in the reference's file layout: ``dataset synth dlrm-v3`` writes the files
``recommendation/dlrm_v3/streaming_synthetic_data.py`` writes (names read from its code), with the cells
``datasets/synthetic_streaming.py`` reads (4 per slot, total_ts + 2 slots, byte offsets that land on each row),
and the stream mlharness reads from them is the reference's inference branch: ts_idx from the first inference
timestamp, history before the query's timestamp, labels ``rating >= 3.5``."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mlharness.tasks.dlrm_v3.jagged import open_stream
from mlharness.tasks.dlrm_v3.synth import write_stream

# a git repository of mlcommons/inference (bare or not): MLHARNESS_INFERENCE_GIT, else where this machine mirrors it
OFFICIAL = Path(os.environ.get("MLHARNESS_INFERENCE_GIT", "/work/.mirror/mlcommons+inference/repo"))
GENERATOR = "recommendation/dlrm_v3/streaming_synthetic_data.py"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_stream(tmp_path_factory.mktemp("dlrm-stream") / "ds", num_ts=3, queries_per_ts=5, seed=1)


def _cells(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


@pytest.mark.skipif(not OFFICIAL.exists(), reason="MLHARNESS_INFERENCE_GIT names no mlcommons/inference repository")
def test_the_files_are_the_ones_the_reference_generator_writes(data):
    source = subprocess.run(["git", "-C", str(OFFICIAL), "show", f"HEAD:{GENERATOR}"], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    fixed = set(re.findall(r'output_folder \+ "([a-z_]+\.csv)"', source))
    assert fixed == {"offset.csv", "requests_per_ts.csv", "users_cumsum_per_ts.csv", "requests_per_ts_offset.csv"}
    assert 'output_folder + f"{file_idx}.csv"' in source and 'f"ts_{file_idx}_{ts}.csv"' in source
    meta = json.loads((data / "dataset.json").read_text())
    expected = fixed | {f"{f}.csv" for f in range(meta["num_files"])} | {
        f"ts_{f}_{t}.csv" for f in range(meta["num_files"]) for t in range(meta["total_ts"])}
    assert {p.name for p in data.iterdir()} == expected | {"dataset.json"}
    # each user's row: four cells per slot (the generator's out_list), base + train + eval + inference slots
    assert "out_list += [\"\", \"\", \"\", \"\"]" in source


def test_the_cells_and_offsets_are_what_the_reference_reader_takes(data):
    meta = json.loads((data / "dataset.json").read_text())
    rows = _cells(data / "0.csv")
    assert len(rows) == meta["num_users"] and all(len(r) == 4 * (meta["total_ts"] + 2) for r in rows)
    offsets = [int(x) for x in _cells(data / "offset.csv")[0][0].split(",")]
    raw = (data / "0.csv").read_bytes()
    for user, at in enumerate(offsets):  # synthetic_streaming.py's iloc: seek, readline, one user's row
        line = raw[at:].split(b"\n", 1)[0].decode()
        assert next(csv.reader([line])) == rows[user]
    requests = [[int(x) for x in r[0].split(",")] for r in _cells(data / "requests_per_ts.csv")]
    assert len(requests) == meta["total_ts"]
    cumsum = [[int(x) for x in r[0].split(",")] for r in _cells(data / "users_cumsum_per_ts.csv")]
    assert [c[-1] for c in cumsum] == [len(r) for r in requests]
    req_raw = (data / "requests_per_ts.csv").read_bytes()
    line_at = [int(x) for x in _cells(data / "requests_per_ts_offset.csv")[0][0].split(",")]
    assert [next(csv.reader([req_raw[a:].split(b"\n", 1)[0].decode()])) for a in line_at] == \
        _cells(data / "requests_per_ts.csv")
    for t, users in enumerate(requests):
        assert [int(r[0]) for r in _cells(data / f"ts_0_{t}.csv")] == users
    for row in rows:  # a sampled slot has candidates with their ratings, a history with its ratings
        for s in range(0, len(row), 4):
            ids, ratings = row[s].split(","), row[s + 1].split(",")
            assert row[s] and len(ids) == len(ratings) and len(row[s + 2].split(",")) == len(row[s + 3].split(","))


def test_the_stream_is_the_reference_inference_branch(data):
    meta = json.loads((data / "dataset.json").read_text())
    rows = _cells(data / "0.csv")
    s = open_stream(data)
    a = s.arrays
    train, total = meta["train_ts"], meta["total_ts"]
    assert len(s) == 5 * (total - train) and a["ts_idx"].tolist() == [t for t in range(total - train) for _ in range(5)]
    i = len(s) - 1  # the last query: user 4 at the last timestamp
    ts = int(a["ts_idx"][i]) + train
    row = rows[int(a["user_id"][i])]
    slots = [*range(train + 1), *range(train + 2, ts + 2)]  # _process_line's inference branch (eval slot skipped)
    history = [int(x) for k in slots for x in row[2 + 4 * k].split(",")]
    assert s.jagged("uih_item_ids", i).tolist() == history
    assert s.jagged("cand_item_ids", i).tolist() == [int(x) for x in row[4 * (ts + 2)].split(",")]
    labels = [float(float(r) >= 3.5) for r in row[1 + 4 * (ts + 2)].split(",")]
    assert s.jagged("cand_labels", i).tolist() == labels
    times = s.jagged("uih_timestamps", i)
    assert np.all(np.diff(times) >= 0) and times[-1] < a["query_time"][i] == ts + 1
