"""Dataset files of kits19, librispeech, squad and qwen3-vl read through the one door: a FIFO given as a set's main
file ends the command with exit 2 naming the file (never waited on), and good files read as before. Every test is
bounded in time: on code that opens a FIFO as a file, the read blocks for ever."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlharness.errors import DatasetError

pytestmark = pytest.mark.timeout(60)


def _fifo_in_place_of(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def _mlharness(*args: str | Path, timeout: float = 50) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def _exits_2_naming(r: subprocess.CompletedProcess, fifo: Path) -> None:
    assert r.returncode == 2, r.stderr + r.stdout
    assert f"{fifo} is a FIFO" in r.stderr.replace("\n", ""), r.stderr
    assert "Traceback" not in r.stderr


# ---- kits19: the preparation's metadata, its volumes and the reference's pickles -------------------------------------

def test_kits19_fifo_metadata_exits_2(tmp_path: Path) -> None:
    from mlharness.tasks.kits19.dataset import META_FILE

    fifo = _fifo_in_place_of(tmp_path / "prepared" / META_FILE)
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]\n")
    r = _mlharness("accuracy", "kits19", "--log", log, "--preprocessed-dir", fifo.parent)
    _exits_2_naming(r, fifo)


def test_kits19_fifo_reference_pickle_is_refused(tmp_path: Path) -> None:
    from mlharness.tasks.kits19.dataset import REFERENCE_META_FILE
    from mlharness.tasks.kits19.prepared import PreparedKits19

    fifo = _fifo_in_place_of(tmp_path / REFERENCE_META_FILE)
    (tmp_path / "x").write_text("")  # the folder is not empty: the reference layout is looked for by its pickle
    with pytest.raises(DatasetError, match=rf"KiTS19 pickle {fifo} is a FIFO, not a regular file"):
        PreparedKits19.load(tmp_path)


def test_kits19_fifo_nifti_is_refused(tmp_path: Path) -> None:
    import numpy as np

    from mlharness.tasks.kits19.dataset import read_nifti

    fifo = _fifo_in_place_of(tmp_path / "imaging.nii.gz")
    with pytest.raises(DatasetError, match=rf"NIfTI file {fifo} is a FIFO, not a regular file"):
        read_nifti(fifo, np.float32)


# ---- librispeech: the manifest, the synthetic set's files in the cache, the BPE ranks -------------------------------

def test_librispeech_fifo_manifest_exits_2(tmp_path: Path) -> None:
    from mlharness.tasks.librispeech.dataset import MANIFEST_FILE

    fifo = _fifo_in_place_of(tmp_path / "librispeech" / MANIFEST_FILE)
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]\n")
    r = _mlharness("accuracy", "librispeech", "--log", log, "--manifest", fifo, "--dtype", "int64")
    _exits_2_naming(r, fifo)


@pytest.mark.parametrize("name", ["synth.json", "dev-all-repack.json"])
def test_librispeech_fifo_in_the_synthetic_set_is_refused_never_replaced(tmp_path: Path, name: str) -> None:
    from mlharness.tasks.librispeech.synth import ensure_synthetic_librispeech

    fifo = _fifo_in_place_of(tmp_path / "synth" / name)
    with pytest.raises(DatasetError, match=rf"synthetic LibriSpeech file {fifo} is a FIFO, not a regular file"):
        ensure_synthetic_librispeech(fifo.parent, count=2)
    assert fifo.is_fifo()


def test_librispeech_synthetic_set_is_reused_as_before(tmp_path: Path) -> None:
    from mlharness.tasks.librispeech.synth import ensure_synthetic_librispeech, write_synthetic_librispeech

    out = write_synthetic_librispeech(tmp_path / "synth", count=2, use_espeak=False)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert ensure_synthetic_librispeech(out, count=2) == out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # complete: nothing written again


def test_librispeech_fifo_ranks_file_is_refused(tmp_path: Path) -> None:
    from mlharness.tasks.librispeech.checkpoint import ranks_size

    good = tmp_path / "ranks.tiktoken"
    good.write_text("IQ== 0\nIg== 1\n\n")
    assert ranks_size(good) == 2
    fifo = _fifo_in_place_of(tmp_path / "fifo.tiktoken")
    with pytest.raises(DatasetError, match=rf"BPE ranks file {fifo} is a FIFO, not a regular file"):
        ranks_size(fifo)


# ---- squad: the dev set, the feature cache and the synthetic set ---------------------------------------------------

@pytest.fixture
def squad(tmp_path: Path) -> Path:
    from mlharness.tasks.squad.synth import write_synthetic_squad

    return write_synthetic_squad(tmp_path / "squad", count=4)


def test_squad_fifo_dev_set_exits_2(squad: Path, tmp_path: Path) -> None:
    fifo = _fifo_in_place_of(squad / "dev-v1.1.json")
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]\n")
    r = _mlharness("accuracy", "squad", "--log", log, "--val-data", fifo, "--vocab", squad / "vocab.txt",
                   "--out-file", tmp_path / "predictions.json")
    _exits_2_naming(r, fifo)


def test_squad_fifo_feature_cache_is_refused_never_replaced(squad: Path, tmp_path: Path) -> None:
    from mlharness.tasks.squad.dataset import features_cache_key, load_features

    val, vocab = squad / "dev-v1.1.json", squad / "vocab.txt"
    fifo = _fifo_in_place_of(tmp_path / "cache" / "squad_features" / f"{features_cache_key(val, vocab, 'slow')}.npz")
    with pytest.raises(DatasetError, match=rf"SQuAD feature cache {fifo} is a FIFO, not a regular file"):
        load_features(val, vocab, cache=tmp_path / "cache")
    assert fifo.is_fifo()


def test_squad_feature_cache_reads_as_before(squad: Path, tmp_path: Path) -> None:
    import numpy as np

    from mlharness.tasks.squad.dataset import load_features

    val, vocab = squad / "dev-v1.1.json", squad / "vocab.txt"
    built = load_features(val, vocab, cache=tmp_path / "cache")
    (cached,) = (tmp_path / "cache" / "squad_features").iterdir()
    again = load_features(val, vocab, cache=tmp_path / "cache")
    for name in ("input_ids", "input_mask", "segment_ids", "unique_id", "max_context"):
        assert getattr(again, name).dtype == getattr(built, name).dtype
        assert np.array_equal(getattr(again, name), getattr(built, name))
    with np.load(cached) as z:
        assert np.array_equal(z["orig_index"], again.orig_index)


def test_squad_fifo_in_the_synthetic_set_is_refused_never_replaced(tmp_path: Path) -> None:
    from mlharness.tasks.squad.synth import write_synthetic_squad

    fifo = _fifo_in_place_of(tmp_path / "squad" / "vocab.txt")
    with pytest.raises(DatasetError, match=rf"synthetic SQuAD file {fifo} is a FIFO, not a regular file"):
        write_synthetic_squad(fifo.parent, count=4)
    assert fifo.is_fifo()
