"""wan-2.2's real VBench path without VBench's networks: the networks' download through mlharness's asset cache
(served here by a local HTTP server: a published sha256 verified, a wrong one refused with nothing left in the
cache, an unknown one fetched and its digest printed as unverified), and the subprocess protocol, run with the
child told to use the stand-ins over the written mp4 files. vbench itself and its networks are not run here."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mlharness.errors import AccuracyError, AssetError
from mlharness.tasks.wan22 import vbench_env
from mlharness.tasks.wan22.vbench_env import Weight, fetch_weight

pytestmark = pytest.mark.timeout(120)
SHAPE = [5, 32, 32, 3]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A folder served on 127.0.0.1 (for this test only), and a fresh mlharness cache."""
    root = tmp_path / "www"
    root.mkdir()
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.timeout = 10
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "cache"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _cached_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []


def test_a_published_digest_is_verified_and_linked_where_vbench_looks(served, tmp_path):
    root, base, cache = served
    payload = np.random.default_rng(0).bytes(300_000)
    (root / "amt-s.pth").write_bytes(payload)
    said: list[str] = []
    weight = Weight(("motion_smoothness",), f"{base}/amt-s.pth", hashlib.sha256(payload).hexdigest(),
                    "amt_model/amt-s.pth")
    target = fetch_weight(weight, tmp_path / "vbench-cache", said.append)
    assert target == tmp_path / "vbench-cache" / "amt_model" / "amt-s.pth" and target.read_bytes() == payload
    assert target.resolve().is_relative_to(cache.resolve())  # the cached copy, linked, not a second one
    assert said == [f"{base}/amt-s.pth: sha256 {weight.sha256} (verified)"]
    assert fetch_weight(weight, tmp_path / "vbench-cache", said.append) == target  # again: from the cache


def test_a_wrong_digest_is_refused_and_leaves_nothing_in_the_cache(served, tmp_path):
    root, base, cache = served
    (root / "tag2text.pth").write_bytes(b"not the network" * 1000)
    weight = Weight(("scene",), f"{base}/tag2text.pth", "0" * 64, "caption_model/tag2text.pth")
    with pytest.raises(AssetError, match="sha256 checksum mismatch: expected 0{64}, got "):
        fetch_weight(weight, tmp_path / "vbench-cache", print)
    assert _cached_files(cache) == []  # no partial file, no file under the final name
    assert not (tmp_path / "vbench-cache" / "caption_model" / "tag2text.pth").exists()


def test_an_unknown_digest_is_fetched_and_said_unverified(served, tmp_path):
    root, base, _ = served
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:  # RAFT's models.zip: a folder inside an archive
        z.writestr("models/raft-things.pth", b"raft" * 100)
    (root / "models.zip").write_bytes(buf.getvalue())
    said: list[str] = []
    weight = Weight(("dynamic_degree",), f"{base}/models.zip", None, "raft_model/models", archive=True,
                    member="models")
    target = fetch_weight(weight, tmp_path / "vbench-cache", said.append)
    assert (target / "raft-things.pth").read_bytes() == b"raft" * 100
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    assert said == [f"{base}/models.zip: sha256 {digest} (UNVERIFIED: no digest is published for it)"]


def test_the_six_dimensions_networks_are_named_with_only_published_digests():
    assert set(vbench_env.DIMENSIONS_ALL) == {"subject_consistency", "dynamic_degree", "motion_smoothness",
                                              "appearance_style", "scene", "background_consistency"}
    published = {w.url: w.sha256 for w in vbench_env.WEIGHTS if w.sha256}
    # CLIP's digest is the folder of its URL (clip._download checks it); no other file publishes one
    assert all(url.split("/")[-2] == digest for url, digest in published.items()) and len(published) == 1
    venv = Path("/x/venv")
    assert vbench_env.setup_commands(venv, "py")[-1][-3:] == ["vbench==0.1.5", "torch==2.5.1", "torchvision==0.20.1"]


@pytest.fixture(scope="module")
def oracle_log(tmp_path_factory) -> tuple[Path, Path]:
    """A synthetic prompt set and an accuracy log whose videos are its reference videos."""
    from mlharness.cli import main
    from mlharness.tasks.wan22.dataset import reference_video

    work = tmp_path_factory.mktemp("vbench-run")
    data = work / "ds"
    assert main(["dataset", "synth", "vbench-prompts", "--out", str(data), "--count", "3"]) == 0
    entries = [{"seq_id": i, "qsl_idx": i, "data": reference_video(data, i).astype(np.uint8).tobytes().hex()}
               for i in range(3)]
    (work / "run").mkdir()
    (work / "run" / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    return data, work / "run" / "mlperf_log_accuracy.json"


def _score(data: Path, log: Path, **options):
    from mlharness.tasks.base import AccuracyContext
    from mlharness.tasks.wan22.metric import VBenchMetric

    return VBenchMetric().score(log, AccuracyContext(dataset_path=data, count=0,
                                                     options={"video_shape": SHAPE, **options}))


def test_the_subprocess_scores_the_written_files_and_the_parent_aggregates(oracle_log):
    pytest.importorskip("cv2")
    from mlharness.tasks.wan22.dataset import read_prompts, reference_video
    from mlharness.tasks.wan22.metric import STAND_IN_NOTE, summary
    from mlharness.tasks.wan22.scorers import DIMENSIONS, stand_in_scorers
    from mlharness.tasks.wan22.vbench_child import read_mp4

    data, log = oracle_log
    result = _score(data, log, scorers="stand-in-files", vbench_python=sys.executable)
    assert result.text.startswith(STAND_IN_NOTE) and not result.official and result.details["scorer"] == "stand-in"
    folder = log.parent / "vbench" / "videos"
    prompts = read_prompts(data / "vbench_prompts.txt")
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{p}-0.mp4" for p in prompts)
    # the child's figures are the stand-ins over the decoded files (mp4 is lossy: not the in-memory 100)
    expected = {}
    for scorer in stand_in_scorers(DIMENSIONS):
        scores = [scorer.score(read_mp4(folder / f"{prompts[i]}-0.mp4"), prompts[i], reference_video(data, i))
                  for i in range(3)]
        expected[scorer.dimension] = [float(np.mean(scores)), []]
    lines, overall = summary(expected)
    assert result.value == round(100 * overall, 4) < 100.0
    assert "\n".join(lines) in result.text
    assert result.text.rstrip().endswith(f"Accuracy Results: {{'vbench_score': {result.value}}}")
    assert _score(data, log).value == 100.0  # in process, on the log's own bytes


def test_a_python_without_vbench_is_refused_before_scoring(oracle_log, monkeypatch):
    data, log = oracle_log
    monkeypatch.setenv(vbench_env.PYTHON_ENV, sys.executable)  # this environment has no vbench
    vbench_env.check_python.cache_clear()
    with pytest.raises(AccuracyError, match=f"{vbench_env.PYTHON_ENV}|cannot import vbench"):
        _score(data, log, scorers="vbench")
    with pytest.raises(AccuracyError, match="cannot be run"):
        _score(data, log, scorers="vbench", vbench_python=str(log.parent / "no-python"))
