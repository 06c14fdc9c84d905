"""e2e-rag-qna's synthetic FRAMES set: the layout the reference reads (its own QSL.py reads the TSV here), seeded
bytes, the corpus named as download_docs.py names pages, and malformed rows refused naming file, line and column."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from mlharness.errors import DatasetError
from mlharness.tasks.e2e_rag.dataset import read_frames
from mlharness.tasks.e2e_rag.synth import write_synthetic_frames

OFFICIAL = Path(os.environ.get("MLHARNESS_INFERENCE_GIT", "/work/.mirror/mlcommons+inference/repo"))
needs_official = pytest.mark.skipif(not OFFICIAL.exists(), reason="MLHARNESS_INFERENCE_GIT names no repository")


def official_source(path: str) -> str:
    return subprocess.run(["git", "-C", str(OFFICIAL), "show", f"HEAD:{path}"], capture_output=True, text=True,
                          check=True, timeout=30).stdout


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> Path:
    return write_synthetic_frames(tmp_path_factory.mktemp("frames"), count=5, seed=3)


def test_same_seed_same_bytes_other_seed_other_questions(frames, tmp_path):
    again = write_synthetic_frames(tmp_path / "again", count=5, seed=3)
    for rel in ("frames_dataset.tsv", "doc_html/docs.tar.gz", "doc_html/url_mapping.json"):
        assert (again / rel).read_bytes() == (frames / rel).read_bytes(), rel
    other = write_synthetic_frames(tmp_path / "other", count=5, seed=4)
    assert (other / "frames_dataset.tsv").read_bytes() != (frames / "frames_dataset.tsv").read_bytes()


@needs_official
def test_the_reference_qsl_reads_what_mlharness_reads(frames):
    pytest.importorskip("pandas")
    ns: dict = {}
    exec(compile(official_source("e2e-rag/QSL.py"), "QSL.py", "exec"), ns)  # noqa: S102 - the official reader
    qsl = ns["E2EQSL"](str(frames / "frames_dataset.tsv"), skip_qsl=True)
    ours = read_frames(frames)
    assert len(qsl) == len(ours) == 5
    for i, q in enumerate(ours):
        ref = qsl[i]
        assert (ref["query"], str(ref["ground_truth"]), ref["expected_urls"]) == (
            q.query, q.ground_truth, list(q.expected_urls))
        assert q.first_item() == {"index": i, "query": ref["query"], "ground_truth": q.ground_truth,
                                  "expected_urls": ref["expected_urls"]}


@needs_official
def test_every_expected_page_is_in_the_frozen_corpus_under_the_reference_name(frames):
    # download_docs.py's create_filename and utils.get_base_filename, taken from the official sources
    tree = ast.parse(official_source("e2e-rag/download_docs.py"))
    create = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "create_filename")
    utils = ast.parse(official_source("e2e-rag/utils.py"))
    base = next(n for n in utils.body if isinstance(n, ast.FunctionDef) and n.name == "get_base_filename")
    ns: dict = {}
    exec(compile(ast.Module(body=[create, base], type_ignores=[]), "official", "exec"), ns)  # noqa: S102

    class Html:
        def get_file_extension(self):
            return ".html"

    with tarfile.open(frames / "doc_html" / "docs.tar.gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    mapping = json.loads((frames / "doc_html" / "url_mapping.json").read_text())
    for q in read_frames(frames):
        for url in q.expected_urls:
            name = ns["create_filename"](Html(), url)
            assert name in members and (frames / "doc_html" / name).read_bytes() == members[name]
            assert mapping[ns["get_base_filename"](name)] == url
        answer_page = members[ns["create_filename"](Html(), q.expected_urls[1])].decode()
        assert f"founded in the year {q.ground_truth}" in answer_page  # the answer is in the corpus


@pytest.mark.parametrize(("row", "where"), [
    ("7\tWhat?\t1900\textra\n", "line 3: 4 tab-separated cells, the header has 3: column 4 has no header"),
    ("7\tWhat?\n", "line 3: 2 tab-separated cells, the header has 3: column 3 ('Answer') is missing"),
    ("7\t\t1900\n", "line 3, column 2 ('Prompt'): empty"),
    ("7\tWhat?\t \n", "line 3, column 3 ('Answer'): empty"),
])
def test_a_malformed_row_exits_2_naming_file_line_and_column(tmp_path, row, where, run_cli):
    tsv = tmp_path / "frames_dataset.tsv"
    tsv.write_text("Unnamed: 0\tPrompt\tAnswer\n0\tWho?\tSomeone\n" + row)
    with pytest.raises(DatasetError, match=re.escape(f"frames_dataset.tsv, {where}")):
        read_frames(tsv)
    log = tmp_path / "mlperf_log_accuracy.json"
    log.write_text("[]")
    r = run_cli("accuracy", "e2e-rag-qna", "--log", str(log), "--dataset-path", str(tsv), timeout=60)
    assert r.returncode == 2 and where in r.stderr + r.stdout, r.stderr
