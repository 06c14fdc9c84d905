"""dlrm-v3 through LoadGen: the jagged input kind (checked at load, batched as values and offsets), the time-ordered
sampler (the reference's StreamingQuerySampler walk), the oracle's accuracy run at its maximum, the random model
VALID in Offline and Server with only --min-duration-ms, a bad stream refused with exit 2, and TEST08 on a run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import HookError, ManifestError
from mlharness.kinds.jagged.input import (
    StreamOrder,
    jagged_batch,
    jagged_input,
    jagged_sample,
    jagged_settings,
    stream_order,
)

MANIFESTS = Path(__file__).parents[1] / "mlharness" / "manifests" / "dlrm-v3"
SETTINGS = {"keys": ["ts_idx", "query_idx"], "fields": ["ids", "times"], "ordered": ["times"], "time_key": "ts_idx"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness", *args], capture_output=True, text=True, timeout=180,
                          cwd=cwd)


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dlrm") / "stream"
    r = _cli("dataset", "synth", "dlrm-v3", "--out", str(out), cwd=out.parent)
    assert r.returncode == 0, r.stderr
    return out


def _cell(i: int, ts: int, n: int = 3) -> np.ndarray:
    s = jagged_settings(SETTINGS, "m.yaml")
    return jagged_sample({"ts_idx": ts, "query_idx": i, "ids": np.arange(n) + i, "times": np.arange(n)}, i, s, "m.yaml")


def test_the_jagged_settings_are_parsed_once_per_run():
    """The QSL (each sample's check), the sampler and the pipeline (the batch) read one parse, kept in ctx."""
    ctx = {"inputs": [{"type": "jagged", "parameters": SETTINGS}], "mode": "performance"}
    s = jagged_input(ctx, "m.yaml")
    assert s.time_key == "ts_idx" and jagged_input(ctx, "m.yaml") is s and stream_order(ctx, "m.yaml").settings is s
    assert jagged_input({"inputs": [{"type": "tensor"}]}, "m.yaml") is None


def test_a_jagged_batch_is_keys_then_values_and_offsets():
    s = jagged_settings(SETTINGS, "m.yaml")
    cells = np.stack([_cell(0, 0, 2), _cell(1, 0, 0), _cell(2, 1, 3)])
    ts, q, ids, ids_off, times, times_off = jagged_batch(cells, s)
    assert ts.tolist() == [0, 0, 1] and q.tolist() == [0, 1, 2]
    assert ids.tolist() == [0, 1, 2, 3, 4] and ids_off.tolist() == [0, 2, 2, 5] and times_off.tolist() == [0, 2, 2, 5]


@pytest.mark.parametrize("out, field", [
    ({"ts_idx": 0, "query_idx": 0, "ids": [1, 2], "times": [5, 3]}, "times"),      # a history going back in time
    ({"ts_idx": 0, "query_idx": 0, "ids": [[1, 2]], "times": [1, 2]}, "ids"),     # not one list
    ({"ts_idx": 0, "query_idx": "a", "ids": [1], "times": [1]}, "query_idx"),      # a key that is not a number
    ({"ts_idx": 0, "query_idx": 0, "times": [1]}, "ids"),                          # a field missing
])
def test_a_bad_jagged_sample_is_refused_naming_the_sample_and_field(out, field):
    with pytest.raises(HookError) as e:
        jagged_sample(out, 7, jagged_settings(SETTINGS, "m.yaml"), "m.yaml")
    assert e.value.exit_code == 2 and "m.yaml" in str(e.value) and "sample 7" in str(e.value)
    assert f"field '{field}'" in str(e.value)


def test_jagged_parameters_are_checked():
    for bad, where in (({"keys": ["t"]}, "fields"), ({**SETTINGS, "time_key": "x"}, "time_key"),
                       ({**SETTINGS, "ordered": ["nope"]}, "ordered"), ({**SETTINGS, "repeat": 2}, "parameters")):
        with pytest.raises(ManifestError, match=where):
            jagged_settings(bad, "m.yaml")


def test_the_sampler_walks_the_stream_in_time_order_whatever_loadgen_names():
    s = jagged_settings({**SETTINGS, "repeats": 2}, "m.yaml")
    loaded = {i: (_cell(i, i // 4),) for i in range(12)}  # 3 timestamps of 4 queries
    perf, acc = StreamOrder(s, "performance"), StreamOrder(s, "accuracy")
    perf.loaded(loaded)
    acc.loaded(loaded)
    walk = np.concatenate([perf.take(5) for _ in range(6)])  # 30 issued: 24 in the walk, 6 past its end
    ts = walk // 4
    assert (np.diff(ts) >= 0).all(), "a query of an earlier timestamp followed a later one"
    assert np.bincount(ts[:24]).tolist() == [8, 8, 8]  # each timestamp's queries twice (num_repeats) in turn
    assert sorted(walk[:4]) == [0, 1, 2, 3] and walk[:4].tolist() == walk[4:8].tolist()  # shuffled once, repeated
    assert set(walk[24:]) <= {8, 9, 10, 11}  # past the end: the last timestamp again, never an earlier one
    once = np.concatenate([acc.take(3) for _ in range(4)])
    assert sorted(once.tolist()) == list(range(12)) and (np.diff(once // 4) >= 0).all()  # accuracy: each once


def _log(path: Path) -> list[np.ndarray]:
    return [np.frombuffer(bytes.fromhex(e["data"]), np.float32) for e in json.loads(path.read_text())]


def test_the_oracle_scores_its_maximum_through_loadgen(stream, tmp_path):
    r = _cli("run", "--manifest", str(MANIFESTS / "dlrm-v3-oracle.yaml"), "--dataset-path", str(stream),
             "--scenario", "Offline", "--mode", "accuracy", "--output", str(tmp_path / "acc"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "metric/lifetime_accuracy/rating: 1.0\n" in r.stdout
    ne = float(re.search(r"metric/lifetime_ne/rating: (\S+)\n", r.stdout).group(1))
    assert 0 < ne < 1e-11  # the clamp's floor (its figure depends on the stream's share of positive labels)
    rows = _log(tmp_path / "acc" / "mlperf_log_accuracy.json")
    keys = sorted((int(d[0]), int(d[1])) for d in rows)
    assert keys == [(t, q) for t in range(4) for q in range(8)]  # every query answered once, by its own key
    for d in rows:
        n = int(d[-1])
        assert d[2:2 + n].tolist() == d[2 + n:2 + 2 * n].tolist()  # predictions are the labels


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_the_random_model_is_valid_with_only_min_duration(stream, tmp_path, scenario):
    r = _cli("run", "--manifest", str(MANIFESTS / "dlrm-v3-random.yaml"), "--dataset-path", str(stream),
             "--scenario", scenario, "--mode", "performance", "--min-duration-ms", "300",
             "--output", str(tmp_path / "perf"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = (tmp_path / "perf" / "mlperf_log_summary.txt").read_text()
    assert "Result is : VALID" in summary, summary


def test_a_bad_stream_is_refused_by_a_run_with_exit_2(stream, tmp_path):
    from mlharness.tasks.dlrm_v3.jagged import open_stream

    a = {k: v.copy() for k, v in open_stream(stream).arrays.items()}  # in stream.npz, which states the offsets
    a["uih_offsets"][3] = a["uih_offsets"][2] - 1
    (tmp_path / "bad").mkdir()
    np.savez(tmp_path / "bad" / "stream.npz", **a)
    r = _cli("run", "--manifest", str(MANIFESTS / "dlrm-v3-random.yaml"), "--dataset-path", str(tmp_path / "bad"),
             "--scenario", "Offline", "--mode", "accuracy", "--output", str(tmp_path / "o"), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "stream.npz, sample 2, field 'uih_offsets': is not monotone" in r.stdout + r.stderr


def test_the_real_manifest_names_its_checkpoint_and_downloads_nothing(stream, tmp_path):
    text = (MANIFESTS / "dlrm-v3.yaml").read_text()
    assert "https://inference.mlcommons-storage.org/metadata/dlrm-v3-checkpoint.uri" in text
    r = _cli("run", "--manifest", str(MANIFESTS / "dlrm-v3.yaml"), "--dataset-path", str(stream), "--scenario",
             "Offline", "--mode", "accuracy", "--output", str(tmp_path / "o"), cwd=tmp_path)
    assert r.returncode == 2 and "not port" in r.stdout + r.stderr
