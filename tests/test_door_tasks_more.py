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


# ---- qwen3-vl: the catalogue's parquet shards and images stored by path --------------------------------------------

def test_qwen3_vl_fifo_shard_exits_2(tmp_path: Path) -> None:
    fifo = _fifo_in_place_of(tmp_path / "catalogue" / "data" / "test-00000-of-00001.parquet")
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]\n")
    r = _mlharness("accuracy", "qwen3-vl", "--log", log, "--dataset-path", tmp_path / "catalogue")
    _exits_2_naming(r, fifo)


def test_qwen3_vl_catalogue_reads_as_before_and_a_fifo_image_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlharness.tasks.qwen3_vl.dataset import IMAGE_COLUMN, TEXT_COLUMNS, CatalogueData

    (tmp_path / "data").mkdir()
    (tmp_path / "a.png").write_bytes(b"\x89PNG not decoded here")
    fifo = _fifo_in_place_of(tmp_path / "b.png")
    rows = {name: [f"{name} 0", f"{name} 1"] for name in TEXT_COLUMNS}
    rows[IMAGE_COLUMN] = [{"bytes": None, "path": "a.png"}, {"bytes": None, "path": str(fifo)}]
    pq.write_table(pa.table(rows), tmp_path / "data" / "test-00000-of-00001.parquet")
    data = CatalogueData(tmp_path)
    assert len(data) == 2 and data.row(1)["product_title"] == "product_title 1"
    assert data.image_bytes(0) == b"\x89PNG not decoded here"
    with pytest.raises(DatasetError, match=rf"sample 1: image {fifo} is a FIFO, not a regular file"):
        data.image_bytes(1)


# ---- openorca: the dataset pickle ----------------------------------------------------------------------------------

def test_openorca_pickle_reads_as_before_compressed_or_not_and_a_fifo_is_refused(tmp_path: Path) -> None:
    import pandas as pd

    from mlharness.tasks.openorca.dataset import read_frame

    frame = pd.DataFrame({"tok_input": [[1, 2, 3], [4]], "output": ["a", "b"]})
    frame.to_pickle(tmp_path / "orca.pkl")
    frame.to_pickle(tmp_path / "orca.pkl.gz")  # pandas compresses by the suffix, and reads by it
    for name in ("orca.pkl", "orca.pkl.gz"):
        pd.testing.assert_frame_equal(read_frame(tmp_path / name), frame)
    fifo = _fifo_in_place_of(tmp_path / "fifo.pkl")
    with pytest.raises(DatasetError, match=rf"OpenOrca pickle {fifo} is a FIFO, not a regular file"):
        read_frame(fifo)


# ---- cnndm: the synthetic set in the cache -------------------------------------------------------------------------

def test_cnndm_synthetic_set_is_reused_and_a_fifo_in_it_is_refused_never_replaced(tmp_path: Path) -> None:
    from mlharness.fileguard import UnusableFile
    from mlharness.tasks.cnndm.dataset import DATASET_FILE
    from mlharness.tasks.cnndm.synth import ensure_synthetic_cnndm

    out = ensure_synthetic_cnndm(tmp_path / "cnndm", count=2)
    written = (out / DATASET_FILE).stat().st_mtime_ns
    assert ensure_synthetic_cnndm(out, count=2) == out
    assert (out / DATASET_FILE).stat().st_mtime_ns == written  # complete: not written again
    fifo = _fifo_in_place_of(out / DATASET_FILE)
    with pytest.raises(UnusableFile, match=rf"synthetic CNN/DailyMail file {fifo} is a FIFO, not a regular file"):
        ensure_synthetic_cnndm(out, count=2)
    assert fifo.is_fifo()


# ---- imagenet: the pre-processing cache, the oracle model, torchvision's checkpoint --------------------------------

def test_imagenet_cache_entries_read_as_before_and_a_fifo_entry_is_refused(tmp_path: Path) -> None:
    import numpy as np

    from mlharness.tasks.imagenet.preprocess import PreprocessCache

    source = tmp_path / "img.jpg"
    source.write_bytes(b"not decoded: compute() stands in for the pre-processing")
    cache = PreprocessCache(tmp_path / "cache")
    value = np.arange(12, dtype=np.float16).reshape(3, 2, 2)
    first = cache.get(source, {"size": 2}, lambda: value)
    again = cache.get(source, {"size": 2}, lambda: pytest.fail("a hit computes nothing"))
    assert cache.hits == 1 and again.dtype == np.float16 and np.array_equal(again, first)
    key = cache.key(source, {"size": 3})
    fifo = _fifo_in_place_of(tmp_path / "cache" / key[:2] / f"{key}.npy")
    with pytest.raises(DatasetError, match=rf"pre-processing cache entry {fifo} is a FIFO, not a regular file"):
        cache.get(source, {"size": 3}, lambda: value)
    assert fifo.is_fifo()


def test_imagenet_oracle_model_is_reused_and_a_fifo_in_its_place_is_refused(tmp_path: Path) -> None:
    from mlharness.errors import AssetError
    from mlharness.tasks.imagenet.models import ensure_oracle_model

    model = ensure_oracle_model(tmp_path / "oracle.onnx")
    written = model.stat().st_mtime_ns
    assert ensure_oracle_model(model) == model and model.stat().st_mtime_ns == written
    fifo = _fifo_in_place_of(tmp_path / "fifo.onnx")
    with pytest.raises(AssetError, match=rf"oracle model {fifo} is a FIFO, not a regular file"):
        ensure_oracle_model(fifo)
    assert fifo.is_fifo()


def test_imagenet_torchvision_checkpoint_fifo_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from mlharness.errors import AssetError
    from mlharness.tasks.imagenet.resnet50_onnx import convert_torchvision_checkpoint

    fifo = _fifo_in_place_of(tmp_path / "resnet50.pth")
    with pytest.raises(AssetError, match=rf"PyTorch checkpoint {fifo} is a FIFO, not a regular file"):
        convert_torchvision_checkpoint(fifo, tmp_path / "resnet50.onnx")
    assert not (tmp_path / "resnet50.onnx").exists()
