"""Task data read through the one door: a FIFO given as a task's file is refused naming it (never waited on), and
the values a task reads are checked where they are read (dlrm-v3's counts, rgat's node features and seeds,
e2e-rag's question lines), each error naming the file and what is wrong. Every test is bounded in time: on code
that opens a FIFO as a file, the read blocks for ever."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import DatasetError

pytestmark = pytest.mark.timeout(60)


def _fifo_in_place_of(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


# ---- wan-2.2: the prompt list and the fixed latent ------------------------------------------------------------------

@pytest.fixture
def vbench(tmp_path: Path) -> Path:
    from mlharness.tasks.wan22.synth import write_synthetic_prompts

    out = tmp_path / "vbench"
    write_synthetic_prompts(out, count=2)
    return out


def test_wan22_prompts_fifo_is_refused(vbench: Path) -> None:
    from mlharness.tasks.wan22.dataset import PROMPTS, read_prompts

    fifo = _fifo_in_place_of(vbench / PROMPTS)
    with pytest.raises(DatasetError, match=rf"prompt list {fifo} is a FIFO, not a regular file"):
        read_prompts(fifo)


def test_wan22_latent_fifo_is_refused(vbench: Path) -> None:
    from mlharness.tasks.wan22.dataset import LATENT, read_latent

    fifo = _fifo_in_place_of(vbench / LATENT)
    with pytest.raises(DatasetError, match=rf"fixed latent {fifo} is a FIFO, not a regular file"):
        read_latent(fifo)


def test_wan22_good_files_read_as_before(vbench: Path) -> None:
    from mlharness.tasks.wan22.dataset import LATENT, PROMPTS, read_latent, read_prompts, reference_video

    assert read_prompts(vbench / PROMPTS) == [line for line in (vbench / PROMPTS).read_text().splitlines() if line]
    latent = read_latent(vbench / LATENT)
    assert latent.dtype == np.float32 and latent.shape[:2] == (1, 16)
    video = reference_video(vbench, 0)
    assert np.array_equal(video, np.load(vbench / "reference_videos" / "0.npy"))


def test_wan22_run_with_a_fifo_prompt_list_exits_2(vbench: Path, tmp_path: Path) -> None:
    """The whole command, bounded by a timeout: before, it hung until killed."""
    from mlharness.manifest.loader import find_builtin

    fifo = _fifo_in_place_of(vbench / "vbench_prompts.txt")
    r = subprocess.run([sys.executable, "-m", "mlharness", "run", "--manifest",
                        str(find_builtin("wan-2.2-t2v-a14b-oracle")), "--dataset-path", str(vbench), "--scenario",
                        "Offline", "--mode", "accuracy", "--results", str(tmp_path / "res")],
                       capture_output=True, text=True, timeout=50)
    assert r.returncode == 2, r.stderr + r.stdout
    assert f"{fifo} is a FIFO" in r.stderr
    assert "Traceback" not in r.stderr


# ---- dlrm-v3: the streaming layout's CSVs and its dataset.json ------------------------------------------------------

@pytest.fixture
def stream(tmp_path: Path) -> Path:
    from mlharness.tasks.dlrm_v3.streaming import write_reference

    return write_reference(tmp_path / "stream", num_users=4, inference_ts=2)


@pytest.mark.parametrize("name", ["0.csv", "offset.csv", "requests_per_ts.csv"])
def test_dlrm_v3_csv_fifo_is_refused(stream: Path, name: str) -> None:
    from mlharness.tasks.dlrm_v3.jagged import open_stream

    fifo = _fifo_in_place_of(stream / name)
    with pytest.raises(DatasetError, match=rf"{fifo} is a FIFO, not a regular file"):
        open_stream(stream)


def test_dlrm_v3_good_layout_reads_as_before(stream: Path) -> None:
    from mlharness.tasks.dlrm_v3.streaming import read_reference

    arrays = read_reference(stream)
    assert arrays["ts_idx"].dtype == np.int64 and arrays["cand_labels"].dtype == np.float32
    assert len(arrays["user_id"]) > 0 and arrays["cand_offsets"][-1] == len(arrays["cand_item_ids"])


@pytest.mark.parametrize(("key", "value", "says"), [
    ("num_items", 10 ** 12, "num_items is 1000000000000; an integer from 1 to 10,000,000,000"),
    ("num_users", 2.5, "num_users is 2.5; an integer"),
    ("num_files", "1", 'num_files is "1"; an integer'),
    ("total_ts", True, "total_ts is true; an integer"),
    ("num_categories", -3, "num_categories is -3; an integer from 1"),
    ("train_ts", 40, "train_ts 40 leaves no inference timestamp"),
])
def test_dlrm_v3_counts_are_checked(stream: Path, key: str, value: object, says: str) -> None:
    from mlharness.tasks.dlrm_v3.streaming import META_FILE, read_reference

    meta = json.loads((stream / META_FILE).read_text())
    meta[key] = value
    (stream / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(DatasetError) as e:
        read_reference(stream)
    assert str(e.value).startswith(f"{stream / META_FILE}: ") and says in str(e.value), str(e.value)


def test_dlrm_v3_missing_count_is_named(stream: Path) -> None:
    from mlharness.tasks.dlrm_v3.streaming import META_FILE, read_reference

    meta = json.loads((stream / META_FILE).read_text())
    del meta["num_users"]
    (stream / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(DatasetError, match="num_users is missing"):
        read_reference(stream)


# ---- rgat: node features, their width, the validation seeds ---------------------------------------------------------

@pytest.fixture
def igbh(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    from mlharness.tasks.rgat.synth import write_synthetic_igbh

    return write_synthetic_igbh(tmp_path / "igbh", papers=40, dim=8)


@pytest.mark.parametrize(("ntype", "value"), [("paper", np.nan), ("author", np.inf)])
def test_rgat_non_finite_features_are_refused(igbh: Path, ntype: str, value: float) -> None:
    from mlharness.kinds.graph.input import GraphSettings, open_graph

    folder = igbh / "tiny" / "processed"
    path = folder / ntype / "node_feat.npy"
    feat = np.load(path)
    np.save(path, np.full_like(feat, value))
    graph = open_graph(folder, GraphSettings(fanouts=(2, 2)))
    with pytest.raises(DatasetError, match=rf"{path}: node_feat holds NaN or infinity"):
        graph.sample_arrays(np.array([0, 1]))


def test_rgat_finite_features_sample_as_before(igbh: Path) -> None:
    from mlharness.kinds.graph.input import GraphSettings, open_graph

    graph = open_graph(igbh / "tiny" / "processed", GraphSettings(fanouts=(2, 2)))
    arrays = graph.sample_arrays(np.array([3]))
    assert np.array_equal(arrays[graph.ntypes.index("paper")][0], graph.features["paper"][3])


def test_rgat_wrong_feature_width_names_the_widths(igbh: Path) -> None:
    import torch

    from mlharness.kinds.graph.input import GraphSettings, open_graph
    from mlharness.tasks.rgat.models import rgat

    graph = open_graph(igbh / "tiny" / "processed", GraphSettings(fanouts=(2, 2)))
    arrays = [torch.from_numpy(a) for a in graph.sample_arrays(np.array([0]))]
    model = rgat(in_dim=16, h_dim=8, num_classes=19, heads=2, seed=0).eval()
    with pytest.raises(DatasetError) as e, torch.no_grad():
        model(*arrays)
    message = str(e.value)
    assert "node_feat.npy" in message and "have 8 features per node" in message and "expects 16" in message


def test_rgat_garbage_validation_seeds_name_the_file(igbh: Path) -> None:
    from mlharness.tasks.rgat.dataset import validation_seeds

    path = igbh / "tiny" / "processed" / "val_idx.pt"
    path.write_bytes(b"this is no torch file\n" * 10)
    with pytest.raises(DatasetError, match=rf"validation seeds {path} is not a readable torch file"):
        validation_seeds(igbh, "tiny")


def test_rgat_validation_seeds_read_as_before(igbh: Path) -> None:
    import torch

    from mlharness.tasks.rgat.dataset import paper_labels, validation_seeds

    seeds = validation_seeds(igbh, "tiny", 3)
    expected = torch.load(igbh / "tiny" / "processed" / "val_idx.pt", weights_only=True).numpy()[:3]
    assert seeds.dtype == np.int64 and np.array_equal(seeds, expected)
    assert paper_labels(igbh, "tiny").dtype == np.int64


# ---- e2e-rag: the FRAMES questions, line by line --------------------------------------------------------------------

def test_e2e_rag_overlong_question_line_names_file_and_line(tmp_path: Path) -> None:
    from mlharness.tasks.e2e_rag.dataset import read_frames

    path = tmp_path / "frames_dataset.tsv"
    with path.open("w", encoding="utf-8") as f:
        f.write("Prompt\tAnswer\twikipedia_link_1\n")
        f.write("Who?\tMe\thttps://en.wikipedia.org/wiki/A\n")
        f.write("x" * (3 << 20) + "\tanswer\t\n")  # 3 MiB of one question
    with pytest.raises(DatasetError, match=rf"FRAMES questions {path}, line 3 is longer than 1 MiB"):
        read_frames(path)


def test_e2e_rag_questions_read_as_before(tmp_path: Path) -> None:
    from mlharness.tasks.e2e_rag.dataset import read_frames

    path = tmp_path / "frames_dataset.tsv"
    path.write_text("Prompt\tAnswer\twikipedia_link_1\twikipedia_link_2\n"
                    "Who?\tMe\thttps://en.wikipedia.org/wiki/A\t\n\n"
                    '"Two\nlines"\tYes\t\thttps://en.wikipedia.org/wiki/B\n', encoding="utf-8")
    questions = read_frames(path)
    assert [(q.query, q.ground_truth, q.expected_urls) for q in questions] == [
        ("Who?", "Me", ("https://en.wikipedia.org/wiki/A",)), ("Two\nlines", "Yes", ("https://en.wikipedia.org/wiki/B",))]


def test_e2e_rag_questions_fifo_is_refused(tmp_path: Path) -> None:
    from mlharness.tasks.e2e_rag.dataset import read_frames

    fifo = _fifo_in_place_of(tmp_path / "frames_dataset.tsv")
    with pytest.raises(DatasetError, match=rf"{fifo} is a FIFO, not a regular file"):
        read_frames(fifo)


@pytest.mark.timeout(60)
def test_a_bfcl_subset_that_is_a_fifo_is_named_not_skipped(tmp_path):
    """A subset file the folder holds but that is no regular file is the door's error, never silently left out of
    the entries (a missing subset is still skipped, as the reference skips it)."""
    from mlharness.errors import DatasetError
    from mlharness.tasks.bfcl_v4.dataset import load_entries

    row = {"id": "simple_python_0", "question": [[{"role": "user", "content": "hi"}]], "function": []}
    (tmp_path / "BFCL_v4_simple_python.json").write_text(json.dumps(row) + "\n")
    assert [e.id for e in load_entries(tmp_path)] == ["simple_python_0"]
    os.mkfifo(tmp_path / "BFCL_v4_multiple.json")
    with pytest.raises(DatasetError, match="BFCL_v4_multiple.json is a FIFO"):
        load_entries(tmp_path)
