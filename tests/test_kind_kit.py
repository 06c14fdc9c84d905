"""The hostile kit over the data kinds: for every built-in kind of the registry (``mlharness/kinds/``: the response
kinds, and the input kinds with readers of their own: images in chat, graphs, jagged streams), and for a toy kind
that only this file defines, the same hostile files go through the kind's real reader in a short ``mlharness run``
of its oracle: a FIFO, a character device, a symbolic link to a device, a folder, an empty
file, a truncated one, one line of 70 MB, JSON nested 100,000 deep, bad UTF-8, NaN where a number belongs.

Each case must end within its bound with exit status 2 or 3 and an error paragraph that names the file, never a
traceback and never a hang. One driver process per kind runs its cases one after another (the frameworks are
imported once); it writes each result as it ends, so a hang names the case it hung on.

A kind added to the table without fixtures here fails :func:`test_every_kind_has_the_kits_fixtures`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlharness.kinds.registry import BUILTIN, names
from tests.helpers.cli import cli

CASE_SECONDS = 30.0  # one case, on a busy 2-core host; a reader that waits on a FIFO never ends


@dataclass(frozen=True)
class Target:
    """One file a kind reads from its dataset folder, and the run that reads it."""

    kind: str  # a built-in kind (mlharness/kinds/registry.py)
    manifest: str
    synth: tuple[str, ...]  # `mlharness dataset synth` arguments (after --out)
    file: str  # relative to the dataset folder
    form: str  # text | json | jsonl | csv | torch | npy | image | parquet
    mode: str = "accuracy"


TARGETS = [
    # the files the oracles read (wan-2.2's fixed_latent.pt is read only by the real pipeline: test_wan22.py)
    Target("tensor", "demo", ("demo",), "val_map.txt", "text"),
    Target("tensor", "demo", ("demo",), "ILSVRC2012_val_00000001.JPEG", "image"),
    Target("tokens", "llama3.1-8b-oracle", ("cnndm", "--count", "4"), "cnn_eval.json", "json"),
    Target("video", "wan-2.2-t2v-a14b-oracle", ("vbench-prompts", "--count", "2"), "vbench_prompts.txt", "text"),
    Target("session", "qwen3.6-27b-oracle", ("qwen3.6-27b", "--count", "4"), "agentic_coding_2.5h.jsonl", "jsonl",
           mode="performance"),
    Target("pipeline", "e2e-rag-qna-oracle", ("e2e-rag", "--count", "4"), "frames_dataset.tsv", "text",
           mode="performance"),
    Target("chat", "qwen3-vl-235b-a22b-oracle", ("qwen3-vl", "--count", "4"), "data/test-00000-of-00001.parquet",
           "parquet"),
    Target("graph", "rgat-oracle", ("rgat",), "tiny/processed/paper/node_feat.npy", "npy"),
    Target("graph", "rgat-oracle", ("rgat",), "tiny/processed/val_idx.pt", "torch"),
    Target("jagged", "dlrm-v3-oracle", ("dlrm-v3",), "dataset.json", "json"),
    Target("jagged", "dlrm-v3-oracle", ("dlrm-v3",), "0.csv", "csv"),
]

# ---- the hostile files ----------------------------------------------------------------------------------------------

def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _char_device(path: Path) -> None:
    os.mknod(path, 0o600 | 0o020000, os.makedev(1, 5))  # a /dev/zero of our own, made in tmp_path


def _link_to_device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _folder(path: Path) -> None:
    path.mkdir()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _truncated(good: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(good[: len(good) // 2])


def _huge_line(path: Path) -> None:
    with open(path, "wb") as f:  # 70 MB of one line, sparse on disk
        f.truncate(70 << 20)


def _deep(path: Path) -> None:
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")


def _bad_utf8(good: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(good[:20] + b"\xff\xfe\xc3" + good[20:])


def _nan(good: bytes) -> Callable[[Path], None]:
    def first_number_to_nan(value: object) -> tuple[object, bool]:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float("nan"), True
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            new, done = first_number_to_nan(item)
            if done:
                value[key] = new  # type: ignore[index]
                return value, True
        return value, False

    def make(path: Path) -> None:  # the file's first number (JSON, or the first line of JSON Lines) becomes NaN
        text = good.decode()
        try:
            doc, done = first_number_to_nan(json.loads(text))
            out = json.dumps(doc)
        except json.JSONDecodeError:
            lines = text.splitlines()
            for i, line in enumerate(lines):
                doc, done = first_number_to_nan(json.loads(line))
                if done:
                    lines[i] = json.dumps(doc)
                    break
            out = "\n".join(lines) + "\n"
        assert done, f"no number in {path.name} to make NaN"
        path.write_text(out)

    return make


def cases_for(target: Target, good: bytes) -> dict[str, Callable[[Path], None]]:
    cases: dict[str, Callable[[Path], None]] = {
        "fifo": _fifo, "symlink-to-device": _link_to_device, "folder": _folder, "empty": _empty,
    }
    if os.geteuid() == 0:
        cases["char-device"] = _char_device
    if target.form in {"json", "torch", "npy", "image", "parquet"}:
        cases["truncated"] = _truncated(good)
    if target.form in {"text", "json", "jsonl", "csv"}:
        cases["bad-utf8"] = _bad_utf8(good)
        cases["huge-line"] = _huge_line
    if target.form in {"json", "jsonl"}:
        cases["deep-nesting"] = _deep
        cases["nan"] = _nan(good)
    return cases


# ---- the driver -----------------------------------------------------------------------------------------------------

DRIVER = r'''
"""Runs mlharness.cli.main on each case of a JSON list; one JSON line per case as it ends."""
import contextlib, io, json, logging, sys, time, traceback

class _Current:
    def write(self, s): return sys.stderr.write(s)
    def flush(self): pass

logging.basicConfig(stream=_Current())
from mlharness import cli

with open(sys.argv[2], "a") as out:
    for case in json.load(open(sys.argv[1])):
        buf = io.StringIO()
        t0 = time.monotonic()
        print(json.dumps({"id": case["id"], "started": True}), file=out, flush=True)
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                rc = cli.main(case["argv"])
            except SystemExit as e:
                rc = e.code
            except BaseException:
                rc = "uncaught"
                buf.write(traceback.format_exc())
        print(json.dumps({"id": case["id"], "rc": rc, "output": buf.getvalue(),
                          "seconds": time.monotonic() - t0}), file=out, flush=True)
'''


def _run_driver(work: Path, cases: list[dict], env: dict[str, str]) -> dict[str, dict]:
    (work / "driver.py").write_text(DRIVER)
    (work / "cases.json").write_text(json.dumps(cases))
    results = work / "results.jsonl"
    limit = 60 + CASE_SECONDS * len(cases)
    proc = subprocess.Popen([sys.executable, str(work / "driver.py"), str(work / "cases.json"), str(results)],
                            cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    ended = {r["id"]: r for r in lines if "rc" in r}
    started = [r["id"] for r in lines if r.get("started")]
    hung = [i for i in started if i not in ended]
    assert not hung, f"the driver did not end case {hung[0]} within {limit:.0f} s (a hang)\n{err.decode()[-2000:]}"
    assert proc.returncode == 0, err.decode()[-4000:]
    return ended


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Callable[[Target], Path]:
    made: dict[tuple[str, ...], Path] = {}

    def get(target: Target) -> Path:
        if target.synth not in made:
            out = tmp_path_factory.mktemp("kitdata") / "good"
            proc = cli(env, "dataset", "synth", target.synth[0], "--out", str(out), *target.synth[1:])
            assert proc.returncode == 0, proc.stdout + proc.stderr
            made[target.synth] = out
        return made[target.synth]

    return get


def test_every_kind_has_the_kits_fixtures() -> None:
    """A new kind registers with fixtures here, or this fails."""
    assert set(BUILTIN) == {t.kind for t in TARGETS}


def hostile_cases(targets: list[Target], good_of: Callable[[Target], Path],
                  work: Path) -> tuple[list[dict], dict[str, str]]:
    """The driver's cases for ``targets`` (each hostile file in a copy of its good dataset), and the file name
    each case's error must name."""
    cases, expect = [], {}
    for t_index, target in enumerate(targets):
        good = good_of(target)
        content = (good / target.file).read_bytes()
        for name, make in cases_for(target, content).items():
            case_id = f"{Path(target.file).name}:{name}"
            folder = work / f"t{t_index}-{name}"
            shutil.copytree(good, folder, symlinks=True)
            hostile = folder / target.file
            hostile.unlink()
            make(hostile)
            argv = ["run", "--manifest", target.manifest, "--dataset-path", str(folder), "--scenario", "Offline",
                    "--mode", target.mode, "--count", "2", "--no-progress", "--results-root",
                    str(work / "results" / f"t{t_index}-{name}")]
            if target.mode == "performance":
                argv += ["--min-duration-ms", "50"]
            cases.append({"id": case_id, "argv": argv})
            expect[case_id] = Path(target.file).name
    return cases, expect


def judge(cases: list[dict], results: dict[str, dict], expect: dict[str, str]) -> None:
    failures = []
    for case in cases:
        r = results[case["id"]]
        output, name = r["output"], expect[case["id"]]
        what = f"{case['id']}: exit {r['rc']} in {r['seconds']:.1f} s\n{output[-1500:]}"
        if "Traceback" in output or r["rc"] not in (2, 3) or r["seconds"] > CASE_SECONDS:
            failures.append(what)
        elif "error:" not in output or name not in output[output.index("error:"):]:
            failures.append(f"the error does not name {name}: " + what)
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n\n" + "\n\n".join(failures)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", sorted(BUILTIN))
def test_hostile_files_of_a_kind(kind: str, tmp_path: Path, datasets: Callable[[Target], Path],
                                 env: dict[str, str]) -> None:
    cases, expect = hostile_cases([t for t in TARGETS if t.kind == kind], datasets, tmp_path)
    judge(cases, _run_driver(tmp_path, cases, env), expect)


# ---- a kind that only this file defines --------------------------------------------------------------------------
# A package of its own, installed by nothing but an entry point on PYTHONPATH: its reader (through mlharness's one
# door for files), its input (one count per sample, checked at load time) and its response row (the tensor kind's
# SUT, calibration and bound, as a kind that adds nothing to LoadGen's base SUT takes them).
TOY_PACKAGE = {
    "toykind/__init__.py": '"""A data kind of one count per sample."""\n',
    "toykind/reader.py": '''\
from pathlib import Path

from mlharness.errors import DatasetError
from mlharness.fileguard import iter_lines


def read_counts(path):
    """The non-negative integers of the file at ``path``, one a line."""
    counts = []
    for number, text in iter_lines(Path(path), "toy counts file", error=DatasetError):
        if not text.strip().isdigit():
            raise DatasetError(f"{path}, line {number}: expected a count (digits), got {text[:40]!r}")
        counts.append(int(text))
    if not counts:
        raise DatasetError(f"{path}: no counts (the file is empty)")
    return counts
''',
    "toykind/kind.py": '''\
import numpy as np

from mlharness.errors import HookError
from mlharness.kinds.base import Kind
from mlharness.kinds.tensor import kind as tensor
from mlharness.loadgen.qsl import InputKind


def count_sample(out, index, manifest):
    value = np.asarray(out)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise HookError("preprocess", manifest, f"sample {index}: a toy-count sample is one int, got {value.dtype}")
    return np.asarray(int(value.reshape(())), dtype=np.int64)


def make_input(ctx, manifest):
    return InputKind(sample=lambda out, index: count_sample(out, index, manifest),
                     to_model=lambda cells: [np.asarray(cells, dtype=np.int64).reshape(-1, 1)])


KIND = Kind("toy-count", make_input=make_input, make_sut=tensor.make_sut, server_bound=tensor.bound,
            calibrate=tensor.calibration, check_outputs=True)
''',
    "toykind-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: toykind\nVersion: 0.1\n",
    "toykind-0.1.dist-info/entry_points.txt": "[mlharness.kinds]\ntoy-count = toykind.kind:KIND\n",
}

TOY_MANIFEST = """\
name: toy-count-echo
framework: {name: echo}
inputs: [{name: x, type: toy-count, element_type: int64, shape: [1]}]
outputs: [{name: y, element_type: int64, shape: [1]}]
response: {kind: toy-count, element_type: int64}
attributes: {measurements: {starting_weights_filename: "none: an echo"}}
dataset:
  name: toy-counts
  init: |
    from pathlib import Path

    from toykind.reader import read_counts

    def init(count):
        global COUNTS
        COUNTS = read_counts(Path(ctx["dataset_path"]) / "counts.txt")
        return min(count, len(COUNTS)) if count else len(COUNTS)
preprocess: |
  def preprocess(ctx, index):
      return COUNTS[index]
postprocess: |
  def postprocess(ctx, outputs):
      return list(outputs[0])
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> dict[str, object]:
    root = tmp_path_factory.mktemp("toykind")
    site = root / "site"
    for rel, text in TOY_PACKAGE.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (root / "toy.yaml").write_text(TOY_MANIFEST)
    data = root / "data"
    data.mkdir()
    (data / "counts.txt").write_text("".join(f"{7 * i + 3}\n" for i in range(16)))
    toy_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))}
    return {"root": root, "manifest": str(root / "toy.yaml"), "data": data, "env": toy_env}


@pytest.mark.slow
def test_a_kind_defined_outside_mlharness_runs_through_the_cli(toy, tmp_path):
    """The toy kind, found by its entry point alone: its default performance run is VALID, and its accuracy run's
    log holds each sample's count as the echo answered it (its reader and its input fed the model)."""
    assert "toy-count" not in names()  # this process has no such kind: only the children's PYTHONPATH has it
    base = ["run", "--manifest", toy["manifest"], "--dataset-path", str(toy["data"]), "--scenario", "Offline",
            "--no-progress"]
    perf = cli(toy["env"], *base, "--mode", "performance", "--min-duration-ms", "300", "--output",
               str(tmp_path / "perf"))
    assert perf.returncode == 0, perf.stdout[-3000:] + perf.stderr[-3000:]
    summary = (tmp_path / "perf" / "mlperf_log_summary.txt").read_text()
    assert "Result is : VALID" in summary, summary
    acc = cli(toy["env"], *base, "--mode", "accuracy", "--output", str(tmp_path / "acc"))
    assert acc.returncode == 0, acc.stdout[-3000:] + acc.stderr[-3000:]
    entries = json.loads((tmp_path / "acc" / "mlperf_log_accuracy.json").read_text())
    got = {e["qsl_idx"]: int.from_bytes(bytes.fromhex(e["data"]), "little", signed=True) for e in entries}
    assert got == {i: 7 * i + 3 for i in range(16)}


@pytest.mark.timeout(600)
def test_hostile_files_of_a_kind_defined_outside_mlharness(toy, tmp_path):
    target = Target("toy-count", toy["manifest"], (), "counts.txt", "text", mode="performance")
    cases, expect = hostile_cases([target], lambda t: toy["data"], tmp_path)
    assert {c["id"].split(":")[1] for c in cases} >= {"fifo", "folder", "empty", "bad-utf8", "huge-line"}
    judge(cases, _run_driver(tmp_path, cases, toy["env"]), expect)
