"""Files a user names to the predictors, the session replay and the pipeline are read through the one door
(``mlharness/fileguard.py``): a FIFO, a device or a folder where a file belongs is an error naming the file (exit 2),
never a hang or ``MemoryError``; a malformed trace is named at the line of the bad value.

FIFOs block whoever opens them, so everything that could hang runs in a subprocess under a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlharness.kinds.sessions.trace_rows import TraceError, iter_records

ROW = '{"conversation_id": "c1", "turn": 1, "role": "user", "content": "hi"}'


def odd_files(folder: Path) -> dict[str, Path]:
    """A FIFO and a character device (a symbolic link to /dev/zero), the two inputs that hang or fill memory."""
    folder.mkdir(parents=True, exist_ok=True)
    fifo, device = folder / "fifo", folder / "zero"
    os.mkfifo(fifo)
    device.symlink_to("/dev/zero")
    return {"a FIFO": fifo, "a character device": device}


def python(code: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter; a hang fails the test at ``timeout`` instead of blocking it."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def mlharness(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlharness", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


# ---- session traces ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_replay_of_a_fifo_or_device_exits_2_naming_the_file(tmp_path, kind):
    trace = odd_files(tmp_path / "odd")[kind]
    done = mlharness("replay", "--endpoint", "http://127.0.0.1:9", "--results-root", str(tmp_path / "results"),
                     "--no-progress", str(trace), cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{trace}: trace file is {kind}, not a regular file" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr


def test_replay_of_a_trace_nested_100000_deep_exits_2_naming_its_line(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(ROW + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    done = mlharness("replay", "--endpoint", "http://127.0.0.1:9", "--results-root", str(tmp_path / "results"),
                     "--no-progress", str(trace), cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "trace.jsonl:2: arrays and objects nest more than 200 deep" in done.stderr, done.stderr
    assert "RecursionError" not in done.stderr


@pytest.mark.parametrize("text, line, message", [
    # a JSON Lines record left unclosed: the decoder only stops at the next record, a line late
    (f'{ROW}\n{{"conversation_id": "c1", "turn": 2\n{ROW}\n', 2, "Expecting ',' delimiter (column 36)"),
    (f'{ROW}\n{{"conversation_id": "c1",\n{ROW}\n', 2, "Expecting property name"),
    (f'{ROW}\n{ROW[:-1]}, "x": [1, 2}}\n{ROW}\n', 2, "invalid JSON"),
    # an array of records missing a comma: the value before it, not the next one
    (f'[\n  {ROW}\n  {ROW}\n]\n', 2, "expected ',' or ']' after this value"),
    (f'[\n  {ROW[:-1]},\n  {ROW}\n]\n', 2, "Expecting property name"),
    # pretty-printed records: the line where the decoder stops is the bad one
    ('{\n  "conversation_id": "c1"\n  "turn": 1\n}\n', 3, "Expecting ',' delimiter"),
])
def test_a_bad_json_value_is_named_at_its_own_line(tmp_path, text, line, message):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(text)
    with pytest.raises(TraceError) as err:
        list(iter_records(trace))
    assert err.value.line == line, str(err.value)
    assert f"trace.jsonl:{line}: " in str(err.value) and message in str(err.value), str(err.value)


def test_the_three_trace_forms_still_read_with_each_records_line(tmp_path):
    rows = [json.loads(ROW), {**json.loads(ROW), "turn": 2, "content": "a [ { \" \\\\ ] string"}]
    forms = {
        "jsonl": ("\n".join(json.dumps(r) for r in rows) + "\n", [1, 2]),
        "array": ("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n", [2, 3]),
        "pretty": ("".join(json.dumps(r, indent=2) + "\n" for r in rows), [1, 7]),
    }
    for name, (text, lines) in forms.items():
        trace = tmp_path / f"{name}.json"
        trace.write_text(text)
        assert list(iter_records(trace)) == list(zip(lines, rows, strict=True)), name
    deep = tmp_path / "deep.jsonl"  # nesting within the bound still reads
    deep.write_text(json.dumps({"a": [[[[[[[[1]]]]]]]]}) + "\n")
    assert list(iter_records(deep)) == [(1, {"a": [[[[[[[[1]]]]]]]]})]


# ---- chat images (VLM prompts) ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["a FIFO", "a character device"])
def test_a_chat_image_that_is_a_fifo_or_device_is_an_error_naming_it(tmp_path, kind):
    image = odd_files(tmp_path / "odd")[kind]
    done = python(f"""
        from mlharness.errors import MLHarnessError
        from mlharness.predictors.chat import parse_chat
        messages = [{{"role": "user", "content": [{{"type": "image", "image": {str(image)!r}}},
                                                  {{"type": "text", "text": "what is it?"}}]}}]
        try:
            parse_chat(messages, 3)
        except MLHarnessError as e:
            print("exit", e.exit_code, e)
    """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"exit 2 sample 3, message 0, part 0: the image {image} is {kind}, not a regular file" in done.stdout, \
        done.stdout + done.stderr


# ---- the pipeline's files in a user's folder (saved databases, corpora, database manifests) ----------------------

def test_pipeline_files_that_are_fifos_or_devices_are_errors_naming_them(tmp_path):
    pytest.importorskip("faiss")
    db, corpus = tmp_path / "db", tmp_path / "corpus"
    db.mkdir()
    corpus.mkdir()
    (corpus / "a.html").write_text("<p>a page</p>")
    for folder, name in [(db, "passages.jsonl"), (corpus, "url_mapping.json"), (tmp_path, "manifest.json.gz")]:
        os.mkfifo(folder / name)
    (tmp_path / "frames.tsv").symlink_to("/dev/zero")
    done = python(f"""
        import json
        from pathlib import Path
        import faiss
        from mlharness.errors import MLHarnessError
        from mlharness.kinds.pipeline import dbbuild, dbmanifest, index, retrieval

        db, corpus, root = Path({str(db)!r}), Path({str(corpus)!r}), Path({str(tmp_path)!r})
        (db / index.MARKER).write_text(json.dumps({{"kind": index.MARKER_KIND, "passages": 0}}))
        faiss.write_index(faiss.IndexFlatL2(4), str(db / "index.faiss"))
        calls = [lambda: index.VectorDB.load(db), lambda: dbbuild.database_md5(db),
                 lambda: retrieval.corpus_documents(corpus), lambda: dbmanifest.read_manifest(root / "manifest.json.gz"),
                 lambda: dbmanifest.probe_queries(root / "frames.tsv")]
        for call in calls:
            try:
                call()
                print("read")
            except MLHarnessError as e:
                print("exit", e.exit_code, e)
    """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 5, done.stdout + done.stderr
    for line, (name, kind) in zip(lines, [("db/passages.jsonl", "a FIFO"), ("db/index.faiss", None),
                                          ("corpus/url_mapping.json", "a FIFO"), ("manifest.json.gz", "a FIFO"),
                                          ("frames.tsv", "a character device")], strict=True):
        if kind is None:  # the MD5 reads index.faiss first: a regular file; then passages.jsonl
            assert line.startswith("exit 2 ") and "db/passages.jsonl is a FIFO" in line, line
            continue
        assert line.startswith("exit 2 ") and f"{tmp_path / name} is {kind}, not a regular file" in line, line


# ---- the files a predictor loads ----------------------------------------------------------------------------------

def test_predictor_tables_and_weights_that_are_fifos_or_devices_are_errors_naming_them(tmp_path):
    odd = odd_files(tmp_path / "odd")
    done = python(f"""
        from mlharness.errors import MLHarnessError
        from mlharness.predictors.base import PredictorConfig
        from mlharness.kinds.sessions.oracle import SessionOraclePredictor
        from mlharness.predictors.token_oracle import TokenOraclePredictor

        fifo, device = {str(odd["a FIFO"])!r}, {str(odd["a character device"])!r}
        for cls, path in [(SessionOraclePredictor, fifo), (SessionOraclePredictor, device),
                          (TokenOraclePredictor, fifo), (TokenOraclePredictor, device)]:
            try:
                cls(PredictorConfig(model_path=path, input_names=[], output_names=[])).load()
                print("read")
            except MLHarnessError as e:
                print("exit", e.exit_code, e)
    """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout + done.stderr
    for line, who, kind in zip(lines, ["session-oracle", "session-oracle", "token-oracle", "token-oracle"],
                               ["a FIFO", "a character device"] * 2, strict=True):
        assert line.startswith(f"exit 2 {who}: the table {odd[kind]} is {kind}, not a regular file"), line


def test_pytorch_weights_and_model_files_that_are_fifos_are_errors_naming_them(tmp_path):
    pytest.importorskip("torch")
    fifo = odd_files(tmp_path / "odd")["a FIFO"]
    done = python(f"""
        from mlharness.errors import MLHarnessError
        from mlharness.predictors.base import PredictorConfig
        from mlharness.predictors.pytorch import PyTorchPredictor

        for config in [dict(model_path=None, factory="torch.nn:Identity", weights_path={str(fifo)!r}),
                       dict(model_path={str(fifo)!r})]:
            try:
                PyTorchPredictor(PredictorConfig(input_names=["x"], output_names=["y"], **config)).load()
                print("read")
            except MLHarnessError as e:
                print("exit", e.exit_code, e)
    """, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout + done.stderr
    assert lines[0].startswith(f"exit 2 weights file {fifo} is a FIFO, not a regular file"), lines[0]
    assert lines[1].startswith(f"exit 2 model file {fifo} is a FIFO, not a regular file"), lines[1]


# ---- manifest assets and the agents' built-in hooks ---------------------------------------------------------------

def test_an_archive_or_agent_input_image_that_is_a_fifo_is_an_error_naming_it(tmp_path):
    fifo = odd_files(tmp_path / "odd")["a FIFO"]
    done = python(f"""
        from pathlib import Path
        from mlharness.errors import MLHarnessError
        from mlharness.manifest import agent_hooks
        from mlharness.manifest.archives import extract_into

        for call in [lambda: extract_into(Path({str(fifo)!r}), Path({str(tmp_path / "out")!r})),
                     lambda: agent_hooks._read("file://" + {str(fifo)!r})]:
            try:
                call()
                print("read")
            except MLHarnessError as e:
                print("exit", e.exit_code, e)
    """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout + done.stderr
    assert lines[0].startswith(f"exit 2 archive {fifo} is a FIFO, not a regular file"), lines[0]
    assert lines[1].startswith(f"exit 2 input image {fifo} is a FIFO, not a regular file"), lines[1]
