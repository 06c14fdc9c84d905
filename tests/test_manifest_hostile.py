"""Hostile manifests: names that try to leave the results tree, YAML bombs, deep nesting, bytes that are not
UTF-8, duplicate keys, absurd dataset sizes, symlink loops, declarations that disagree with the model, hooks that
return the wrong thing, models whose outputs have no batch axis. Each case is generated from one valid base
manifest by one mutation, and must end with exit 2 (bad input) or 3 (failure during the run), one error
paragraph naming the file and field (or the hook and sample), no traceback, in bounded time and memory.

Most cases run through ``mlharness.cli.main`` inside ONE driver subprocess (the per-case cost is then
milliseconds); the driver's peak memory is read with ``os.wait4`` and every case's growth of it is bounded. The
cases that need a LoadGen test (one per process) and a few of the others go through the real CLI, each in its
own subprocess, with the same bounds."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.toy_manifest import toy_manifest

# The toy "echo" predictor (returns its inputs) on a placeholder file, an inline dataset and two hooks: a run
# needs no framework, network or real model. Every case breaks ONE thing.
BASE: dict[str, Any] = toy_manifest()
ONNX_BASE: dict[str, Any] = {**BASE, "framework": {"name": "onnxruntime", "version": "*"},
                             "model": {"graph_path": "affine.onnx"}}

CASE_SECONDS = 20.0  # wall time of one case run in the driver
CLI_SECONDS = 45.0  # wall time of one case through the real CLI (its imports and a LoadGen test included)
CASE_GROWTH_MB = 300  # growth of the driver's peak memory during one case
PROCESS_PEAK_MB = 1500  # peak memory of any process (ONNX Runtime and LoadGen included)
ADDRESS_SPACE = 16 << 30  # RLIMIT_AS: a last guard, so a YAML bomb can never take the machine down


class _BlockDumper(yaml.SafeDumper):
    pass


_BlockDumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                                  style="|" if "\n" in s and "\x00" not in s
                                                                  else None))


def dump(m: dict[str, Any]) -> str:
    return yaml.dump(m, Dumper=_BlockDumper, sort_keys=False, allow_unicode=False)


def mutate(base: dict[str, Any], *path_and_value: Any) -> str:
    """The base with the value at ``path`` replaced (a missing last key is added)."""
    *path, value = path_and_value
    m = copy.deepcopy(base)
    node: Any = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return dump(m)


def with_hook(key: str, body: Any, base: dict[str, Any] = BASE) -> str:
    return mutate(base, key, body)


def text_append(extra: str, base: dict[str, Any] = BASE) -> str:
    return dump(base) + extra


def laughs(levels: int = 8, width: int = 9, indent: int = 2) -> str:
    """A 'billion laughs' block: ``width ** levels`` strings once expanded, a few hundred bytes as written."""
    pad = " " * indent
    lines = [f"{pad}l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"{pad}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def laughs_in_parameters() -> str:
    text = dump(BASE)
    assert "  shape:\n  - 4\n" in text
    return text.replace("  shape:\n  - 4\n", "  shape:\n  - 4\n  parameters:\n" + laughs(indent=4), 1)


def deep(levels: int, flow: bool = True) -> str:
    if flow:
        return dump(BASE) + "attributes: " + "[" * levels + "]" * levels + "\n"
    lines = ["attributes:"] + [" " * (2 * (i + 1)) + f"k{i}:" for i in range(levels)]
    return dump(BASE) + "\n".join(lines) + " 1\n"


def duplicate(line: str, after: str) -> str:
    """The base with ``line`` inserted after the first line starting with ``after``."""
    out = []
    done = False
    for existing in dump(BASE).splitlines():
        out.append(existing)
        if not done and existing.startswith(after):
            out.append(line)
            done = True
    assert done, after
    return "\n".join(out) + "\n"


def ds_base(**change: Any) -> dict[str, Any]:
    """A dataset manifest of its own file (``ds_<case>.yaml``)."""
    return {"name": "toy_data", "init": "def init(count):\n    return count or 8\n", **change}


@dataclass
class Case:
    id: str
    content: str | bytes  # the manifest file
    expect: tuple[str, ...]  # substrings of the error paragraph ('{file}' is the manifest's file name)
    command: str = "validate"  # validate | run | argv (the arguments are the whole command line)
    rc: int = 2
    field: str | None = None  # the field path named in quotes
    extra: dict[str, str | bytes] = dc_field(default_factory=dict)  # further files ('{id}' in a name or content)
    args: tuple[str, ...] = ()  # further command-line arguments
    named_file: str | None = None  # the file the error must name (default: the manifest)
    cli: bool = False  # through the real CLI in its own process (always so for cases that reach LoadGen)
    count: bool = True  # run with --count 4


def _ds_file(case_id: str, content: str | bytes) -> dict[str, str | bytes]:
    return {f"ds_{case_id}.yaml": content}


def cases() -> list[Case]:
    c: list[Case] = []
    # ---- names that become folders
    for cid, value in [("name_dotdot", "../../../../x"), ("name_slash", "a/b"), ("name_nul", "a\x00b"),
                       ("name_5000", "x" * 5000), ("name_empty", ""), ("name_leading_dot", ".hidden"),
                       ("name_space", "my model"), ("name_backslash", "a\\b"), ("name_newline", "a\nb"),
                       ("name_emoji_code", ":smile:"), ("name_dot", "."), ("name_dotdot_only", "..")]:
        c.append(Case(cid, mutate(BASE, "name", value), ("folder",), field="name"))
    c.append(Case("name_not_a_string", mutate(BASE, "name", [1, 2]), ("string",), field="name"))
    for cid, value in [("benchmark_dotdot", "../../x"), ("benchmark_slash", "a/b"), ("benchmark_long", "b" * 300),
                       ("benchmark_absolute", "/etc")]:
        c.append(Case(cid, mutate(BASE, "mlperf", {"benchmark": value}), ("folder",), field="mlperf.benchmark"))
    c.append(Case("mlperf_model_dotdot", mutate(BASE, "mlperf", {"model": "../x"}), ("folder",),
                  field="mlperf.model"))
    c.append(Case("dataset_name_dotdot", mutate(BASE, "dataset", "name", "../d"), ("folder",), field="dataset.name"))
    c.append(Case("dataset_file_name_dotdot", mutate(BASE, "dataset", "ds_{id}.yaml"), ("folder",), field="name",
                  extra=_ds_file("{id}", dump(ds_base(name="../../d"))), named_file="ds_{id}.yaml"))
    # ---- YAML bombs, depth, encoding, duplicate keys
    c.append(Case("laughs_in_input_parameters", laughs_in_parameters(), ("aliases are expanded",),
                  field="inputs[0].parameters.l5"))
    c.append(Case("laughs_in_attributes", text_append("attributes:\n" + laughs()),
                  ("aliases are expanded",), field="attributes.l5"))
    c.append(Case("laughs_wide", text_append("attributes:\n" + laughs(levels=4, width=40)),
                  ("aliases are expanded",), field="attributes.l3"))
    c.append(Case("laughs_in_dataset_file", mutate(BASE, "dataset", "ds_{id}.yaml"), ("aliases are expanded",),
                  extra=_ds_file("{id}", dump(ds_base()) + "attributes:\n" + laughs()),
                  named_file="ds_{id}.yaml", field="attributes.l5"))
    c.append(Case("deep_flow_5000", deep(5000), ("nested deeper than 64",)))
    c.append(Case("deep_flow_65", deep(65), ("nested deeper than 64",)))
    c.append(Case("deep_block_200", deep(200, flow=False), ("nested deeper than 64",)))
    chain = "attributes:\n  a: &a " + "[" * 40 + "]" * 40 + "\n  b: " + "[" * 40 + "*a" + "]" * 40 + "\n"
    c.append(Case("deep_through_aliases", text_append(chain), ("deeper than 64 levels once its aliases",
                                                               "attributes.b[0][0]")))
    c.append(Case("deep_in_dataset_file", mutate(BASE, "dataset", "ds_{id}.yaml"), ("nested deeper than 64",),
                  extra=_ds_file("{id}", dump(ds_base()) + "attributes: " + "[" * 3000 + "]" * 3000 + "\n"),
                  named_file="ds_{id}.yaml"))
    c.append(Case("recursive_alias", text_append("attributes: &a\n  self: *a\n"), ("recursive alias",),
                  field="attributes.self"))
    raw = dump(BASE).encode()
    c.append(Case("not_utf8_byte", raw.replace(b"name: toy", b"name: t\xffoy", 1), ("not UTF-8", "line 1")))
    c.append(Case("latin1_description", raw + b"description: caf\xe9 cr\xe8me\n", ("not UTF-8", "0xe9")))
    c.append(Case("binary_garbage", bytes(range(256)) * 4, ("not UTF-8",)))
    c.append(Case("truncated_utf8", raw + b"description: \xe2\x82\n", ("not UTF-8",)))
    c.append(Case("nul_in_text", raw.replace(b"name: toy", b"name: t\x00oy", 1), ("invalid YAML",)))
    c.append(Case("dataset_file_not_utf8", mutate(BASE, "dataset", "ds_{id}.yaml"), ("not UTF-8",),
                  extra=_ds_file("{id}", dump(ds_base()).encode() + b"description: \xff\xfe\xfd\n"),
                  named_file="ds_{id}.yaml"))
    c.append(Case("duplicate_top_key", duplicate("name: other", "name:"), ("duplicate key 'name'",), field="name"))
    c.append(Case("duplicate_nested_key", duplicate("  name: onnxruntime", "  name: echo"),
                  ("duplicate key 'name'",), field="framework.name"))
    c.append(Case("duplicate_in_input", duplicate("  element_type: float16", "  element_type: float32"),
                  ("duplicate key 'element_type'",), field="inputs[0].element_type"))
    c.append(Case("duplicate_hook", text_append("preprocess: |\n  def preprocess(ctx, index):\n    return 0\n"),
                  ("duplicate key 'preprocess'",), field="preprocess"))
    c.append(Case("duplicate_dataset_hook", duplicate("  init: 'def init(count): return 5'", "  name: toy_data"),
                  ("duplicate key 'init'",), field="dataset.init"))
    c.append(Case("duplicate_in_dataset_file", mutate(BASE, "dataset", "ds_{id}.yaml"), ("duplicate key 'name'",),
                  extra=_ds_file("{id}", dump(ds_base()) + "name: other\n"), named_file="ds_{id}.yaml", field="name"))
    c.append(Case("oversized_file", dump(BASE) + ("#" * 1023 + "\n") * (9 * 1024), ("larger than 8 MiB",)))
    c.append(Case("python_tag", text_append("attributes: !!python/object/apply:os.system ['true']\n"),
                  ("invalid YAML", "constructor")))
    c.append(Case("unhashable_key", text_append("attributes:\n  ? [a, b]\n  : 1\n"), ("invalid YAML", "unhashable")))
    c.append(Case("two_documents", dump(BASE) + "---\nname: second\n", ("invalid YAML", "single document")))
    c.append(Case("undefined_alias", text_append("attributes: *nowhere\n"), ("invalid YAML", "nowhere")))
    # ---- hook sources
    c.append(Case("hook_nested_too_deeply", with_hook("postprocess", "def postprocess(ctx, outputs):\n    return "
                                                      + "-" * 100_000 + "1\n"), ("hook 'postprocess'", "nested")))
    c.append(Case("run_hook_nested_too_deeply", with_hook("postprocess", "def postprocess(ctx, outputs):\n    return "
                                                          + "-" * 100_000 + "1\n"), ("hook 'postprocess'", "nested"),
                  command="run"))
    c.append(Case("hook_with_nul", with_hook("postprocess", "def postprocess(ctx, outputs):\x00\n    return 1\n"),
                  ("hook 'postprocess'", "null bytes")))
    c.append(Case("hook_file_not_utf8", with_hook("preprocess", {"file": "hooks_{id}.py"}), ("not UTF-8",),
                  field="preprocess.file", extra={"hooks_{id}.py": b"def preprocess(ctx, index):\n    # \xff\n"}))
    c.append(Case("run_hook_file_not_utf8", with_hook("preprocess", {"file": "hooks_{id}.py"}), ("not UTF-8",),
                  command="run", field="preprocess.file",
                  extra={"hooks_{id}.py": b"def preprocess(ctx, index):\n    # \xff\n"}))
    # ---- accuracy dtype vs response dtype
    for cid, dtype, response in [("accuracy_dtype_float16", "float16", "float32"),
                                 ("accuracy_dtype_int64_vs_uint8", "int64", "uint8"),
                                 ("accuracy_dtype_unknown", "floaty", "float32")]:
        m = copy.deepcopy(BASE)
        m["response"] = {"element_type": response}
        m["accuracy"] = {"metric": "imagenet_top1", "options": {"dtype": dtype}}
        c.append(Case(cid, dump(m), (dtype, "'response.element_type'", response), field="accuracy.options.dtype"))
    # ---- model paths
    c.append(Case("model_symlink_loop", mutate(BASE, "model", {"graph_path": "loop_{id}.onnx"}),
                  ("symbolic link",), field="model.graph_path", extra={"loop_{id}.onnx": "@symlink-loop"}))
    c.append(Case("run_model_symlink_loop", mutate(ONNX_BASE, "model", {"graph_path": "loop_{id}.onnx"}),
                  ("loop_{id}.onnx", "loop of symbolic links"), command="run", named_file="loop_{id}.onnx",
                  extra={"loop_{id}.onnx": "@symlink-loop"}))
    # ---- the same refusals at run time (before any LoadGen test)
    for cid, value in [("run_name_dotdot", "../../../../x"), ("run_name_5000", "n" * 5000)]:
        c.append(Case(cid, mutate(BASE, "name", value), ("folder",), command="run", field="name"))
    c.append(Case("run_benchmark_dotdot", mutate(BASE, "mlperf", {"benchmark": "../../x"}), ("folder",),
                  command="run", field="mlperf.benchmark"))
    c.append(Case("run_laughs", laughs_in_parameters(), ("aliases are expanded",), command="run",
                  field="inputs[0].parameters.l5"))
    c.append(Case("run_duplicate_key", duplicate("name: other", "name:"), ("duplicate key",), command="run",
                  field="name"))
    for cid, value in [("run_system_dotdot", "../../x"), ("run_system_slash", "a/b"), ("run_system_long", "s" * 5000),
                       ("run_system_emoji", ":smile: :-1:")]:
        c.append(Case(cid, dump(BASE), ("--system", "folder"), command="run", args=("--system", value),
                      named_file=""))
    for cid, option in [("submission_submitter_dotdot", "--submitter"), ("submission_system_dotdot", "--system-name")]:
        argv = {"--submitter": "Acme", "--system-name": "box", option: "../../x"}
        c.append(Case(cid, dump(BASE), (option, "folder"), command="argv", named_file="", args=(
            "submission", "run", "--manifest", "{path}", "--scenarios", "Offline", "--division", "open",
            "--results", "{folder}/submission_{id}", *(x for kv in argv.items() for x in kv))))
    for cid, value in [("init_10e12", "10**12"), ("init_string", "'8'"), ("init_negative", "-1"),
                       ("init_float", "8.0"), ("init_huge_int", "10**400")]:
        c.append(Case(cid, mutate(BASE, "dataset", "init", f"def init(count):\n    return {value}\n"),
                      ("hook 'init'", "init(None)"), command="run", count=False))
    # ---- declared inputs vs the ONNX model (x: [batch, 4] float32)
    c.append(Case("onnx_declared_shape", mutate(ONNX_BASE, "inputs", 0, "shape", [5]), ("declares [5]", "'x'"),
                  command="run", field="inputs[0].shape"))
    c.append(Case("onnx_declared_rank", mutate(ONNX_BASE, "inputs", 0, "shape", [2, 2]), ("declares [2, 2]",),
                  command="run", field="inputs[0].shape"))
    c.append(Case("onnx_declared_dtype", mutate(ONNX_BASE, "inputs", 0, "element_type", "int64"),
                  ("declares int64", "float32"), command="run", field="inputs[0].element_type"))
    # ---- error text is printed literally (no emoji)
    c.append(Case("emoji_in_hook_error", with_hook("before_preprocess",
                                                   "def before_preprocess(ctx):\n    raise ValueError(':-1: :smile:')\n"),
                  ("hook 'before_preprocess'", ":-1: :smile:"), command="run"))
    # ---- through the real CLI, each in its own process
    c.append(Case("cli_laughs_validate", laughs_in_parameters(), ("aliases are expanded",),
                  field="inputs[0].parameters.l5", cli=True))
    c.append(Case("cli_deep_validate", deep(5000), ("nested deeper than 64",), cli=True))
    c.append(Case("cli_name_dotdot_run", mutate(BASE, "name", "../../../../x"), ("folder",), command="run",
                  field="name", cli=True))
    c.append(Case("cli_laughs_run", laughs_in_parameters(), ("aliases are expanded",), command="run",
                  field="inputs[0].parameters.l5", cli=True))
    c.append(Case("cli_emoji_system", dump(BASE), (":smile:",), command="run", args=("--system", ":smile:"),
                  named_file="", cli=True))
    # hook results checked at load time (inside the LoadGen test: exit 3), naming the hook and the sample
    for cid, body, expect in [
        ("preprocess_none", "return None", ("returned NoneType",)),
        ("preprocess_dict", "return {'x': index}", ("returned dict",)),
        ("preprocess_float64", "import numpy as np\n    return np.zeros(4)", ("float64", "'inputs[0].element_type'")),
        ("preprocess_shape", "import numpy as np\n    return np.zeros(5, np.float32)",
         ("(5,)", "'inputs[0].shape'")),
        ("preprocess_strings", "import numpy as np\n    return np.array(['a', 'b', 'c', 'd'])", ("<U1",)),
    ]:
        c.append(Case(cid, with_hook("preprocess", f"def preprocess(ctx, index):\n    {body}\n"),
                      ("hook 'preprocess'", "sample ", *expect), command="run", rc=3, cli=True))
    # a model whose output's first axis depends on the data (NonZero): the model's output is named
    # declared as the model has it (int64), so the run gets as far as the output's batch axis
    nonzero = {**ONNX_BASE, "model": {"graph_path": "nonzero.onnx"},
               "outputs": [{"name": "y", "element_type": "int64"}]}
    c.append(Case("onnx_output_axis_from_data", dump(nonzero),
                  ("output 0 ('y')", "batch axis"), command="run", rc=3, named_file="nonzero.onnx", cli=True))
    return c


ALL = cases()


# ---------------------------------------------------------------- fixtures: models and files


def _write_models(folder: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.helpers.framework_models import write_onnx

    write_onnx(folder / "affine.onnx")
    graph = helper.make_graph(  # y = the indices of x's non-zero entries: shape [2, nnz], whatever the batch
        [helper.make_node("NonZero", ["x"], ["y"])], "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [2, "nnz"])], [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "nonzero.onnx"))
    del numpy_helper


def _materialise(case: Case, folder: Path) -> Path:
    path = folder / f"{case.id}.yaml"
    content = case.content.replace("{id}", case.id) if isinstance(case.content, str) else case.content
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    for name, extra in case.extra.items():
        target = folder / name.replace("{id}", case.id)
        if extra == "@symlink-loop":
            partner = target.with_name(target.name + ".other")
            os.symlink(partner.name, target)
            os.symlink(target.name, partner)
        else:
            target.write_bytes(extra.encode() if isinstance(extra, str) else extra)
    return path


def _argv(case: Case, path: Path, folder: Path) -> list[str]:
    if case.command == "argv":
        return [a.format(path=path, folder=folder, id=case.id) for a in case.args]
    if case.command == "validate":
        return ["manifest", "validate", str(path), *case.args]
    return ["run", "--manifest", str(path), "--scenario", "Offline", "--mode", "accuracy",
            *(["--count", "4"] if case.count else []), "--results-root", str(folder / f"results_{case.id}"),
            "--no-progress", "--min-duration-ms", "1", "--min-query-count", "1", *case.args]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile") / "work"
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    _write_models(folder)
    for case in ALL:
        _materialise(case, folder)
    return folder


def _env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["MLHARNESS_CACHE"] = str(folder.parent / "cache")
    env.pop("MLHARNESS_MANIFEST_PATH", None)
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"  # fewer threads, less address space reserved
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    return env


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


# Runs the command in a child it forks itself and reports the child's exit status and peak RSS. Linux carries a
# process's peak RSS over an exec from the memory it had before it, so a child forked straight from the test process
# (grown to gigabytes by the tests before it) would report the test process's peak, not its own.
MEASURE = r"""
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execv(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def run_bounded(argv: list[str], cwd: Path, timeout: float) -> tuple[int, str, float, float]:
    """(exit code, stdout + stderr, seconds, peak memory in MB) of a subprocess run under RLIMIT_AS, killed (with
    its process group) after ``timeout``; the peak is the command's own, from os.wait4 in a small parent process
    (:data:`MEASURE`)."""
    stamp = time.monotonic_ns()
    out_path, report = cwd.parent / f"out-{stamp}.txt", cwd.parent / f"rusage-{stamp}.txt"
    with open(out_path, "wb") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", MEASURE, str(report), *argv], cwd=cwd,
                                env=_env(cwd), stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_limit_address_space, start_new_session=True)

        def kill() -> None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        seconds = time.monotonic() - t0
    try:
        rc_text, rss_kb = report.read_text().split()
        rc, peak_mb = int(rc_text), int(rss_kb) / 1024
    except (OSError, ValueError):  # the measuring parent was killed (the timeout) before it could report
        rc, peak_mb = proc.returncode, 0.0
    return rc, out_path.read_text(errors="replace"), seconds, peak_mb


DRIVER = r'''
"""Runs mlharness.cli.main on each case of a JSON list and prints one JSON result per case."""
import contextlib, io, json, logging, resource, sys, time, traceback

class _Current:  # log records go to whatever stderr is at the moment
    def write(self, s): return sys.stderr.write(s)
    def flush(self): pass

logging.basicConfig(stream=_Current())
from mlharness import cli

results = []
for case in json.load(open(sys.argv[1])):
    buf = io.StringIO()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = cli.main(case["argv"])
        except SystemExit as e:
            rc = e.code
        except BaseException:
            rc = "uncaught"
            buf.write(traceback.format_exc())
    results.append({"id": case["id"], "rc": rc, "output": buf.getvalue(), "seconds": time.monotonic() - t0,
                    "growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024})
json.dump(results, open(sys.argv[2], "w"))
'''


def check(case: Case, rc: Any, output: str, seconds: float, memory_mb: float, limit_mb: float,
          folder: Path, limit_s: float = CASE_SECONDS) -> None:
    what = f"{case.id}: rc={rc} in {seconds:.1f}s, {memory_mb:.0f} MB\n{output}"
    assert "Traceback" not in output, what
    assert rc == case.rc, what
    assert seconds < limit_s, what
    assert memory_mb < limit_mb, what
    assert "error:" in output, what
    paragraph = output[output.index("error:"):].strip()
    assert "\n\n" not in paragraph, f"more than one paragraph: {what}"
    named = (case.named_file if case.named_file is not None else "{id}.yaml").replace("{id}", case.id)
    if named:
        assert named in paragraph, what
    if case.field is not None:
        assert f"'{case.field}'" in paragraph, what
    for text in case.expect:
        assert text.replace("{id}", case.id) in paragraph, f"{text!r} missing: {what}"
    assert "😄" not in output and "👎" not in output, what
    # nothing of a refused run lands anywhere: not in the results root, not outside it
    if rc == 2:
        assert not (folder / f"results_{case.id}").exists(), what
        assert not (folder / f"submission_{case.id}").exists(), what
    assert not (folder.parent.parent / "x").exists() and not (folder.parent / "x").exists(), what


def test_there_are_at_least_60_cases() -> None:
    assert len(ALL) >= 60
    assert len({c.id for c in ALL}) == len(ALL)
    assert sum(c.cli for c in ALL) >= 10 and sum(c.command == "run" for c in ALL) >= 20


def test_base_manifests_are_valid_and_run(workdir: Path) -> None:
    """The mutations break one thing each: their bases validate and run."""
    for name, base in (("base_echo.yaml", BASE), ("base_onnx.yaml", ONNX_BASE)):
        path = workdir / name
        path.write_text(dump(base))
        rc, output, _, _ = run_bounded([sys.executable, "-m", "mlharness.cli", *_argv(
            Case("base", "", (), command="run"), path, workdir), "--output", str(workdir.parent / name)], workdir, 120)
        assert rc == 0, output
    rc, output, _, _ = run_bounded([sys.executable, "-m", "mlharness.cli", "manifest", "validate",
                                    str(workdir / "base_echo.yaml")], workdir, 60)
    assert rc == 0 and "valid" in output, output


def test_in_process_cases(workdir: Path) -> None:
    """Every case not marked ``cli`` through ``mlharness.cli.main``, all in one bounded subprocess."""
    chosen = [c for c in ALL if not c.cli]
    spec = [{"id": c.id, "argv": _argv(c, workdir / f"{c.id}.yaml", workdir)} for c in chosen]
    (workdir.parent / "cases.json").write_text(json.dumps(spec))
    (workdir.parent / "driver.py").write_text(DRIVER)
    rc, output, seconds, peak = run_bounded(
        [sys.executable, str(workdir.parent / "driver.py"), str(workdir.parent / "cases.json"),
         str(workdir.parent / "results.json")], workdir, CASE_SECONDS * len(chosen))
    assert rc == 0, output
    assert peak < PROCESS_PEAK_MB, f"driver peak {peak:.0f} MB"
    results = {r["id"]: r for r in json.loads((workdir.parent / "results.json").read_text())}
    failures = []
    for case in chosen:
        r = results[case.id]
        try:
            check(case, r["rc"], r["output"], r["seconds"], r["growth_mb"], CASE_GROWTH_MB, workdir)
        except AssertionError as e:
            failures.append(str(e).split("\nassert")[0])
    assert not failures, f"{len(failures)} of {len(chosen)} cases failed:\n" + "\n".join(failures)


@pytest.mark.parametrize("case", [c for c in ALL if c.cli], ids=[c.id for c in ALL if c.cli])
def test_cli_cases(workdir: Path, case: Case) -> None:
    argv = [sys.executable, "-m", "mlharness.cli", *_argv(case, workdir / f"{case.id}.yaml", workdir)]
    rc, output, seconds, peak = run_bounded(argv, workdir, CLI_SECONDS * 2)
    check(case, rc, output, seconds, peak, PROCESS_PEAK_MB, workdir, CLI_SECONDS)
    if case.rc == 3:  # the failed run's logs are kept beside where its result would have gone
        assert list((workdir / f"results_{case.id}").rglob("accuracy.failed-*")), output


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tensorflow_saved_model", "tensorflow_frozen_graph", "pytorch_export"])
def test_declared_inputs_checked_when_the_model_loads(tmp_path: Path, kind: str) -> None:
    """TensorFlow (signature, frozen graph) and torch.export programs report their input shapes (TensorFlow its
    dtypes too): a declaration the model does not have is refused naming the field."""
    from mlharness.errors import ManifestError
    from mlharness.predictors import PREDICTORS
    from mlharness.predictors.base import PredictorConfig
    from tests.helpers import framework_models as fm

    if kind == "pytorch_export":
        framework, path, name = "pytorch", fm.write_torch_export(tmp_path / "m.pt2"), None
    elif kind == "tensorflow_saved_model":
        framework, path, name = "tensorflow", fm.write_saved_model(tmp_path / "sm"), None
    else:
        framework, path, name = "tensorflow", fm.write_frozen_graph(tmp_path / "m.pb"), "x:0"
    wrong = [("shape", [5], "inputs[0].shape")]
    if framework == "tensorflow":
        wrong.append(("element_type", "int64", "inputs[0].element_type"))
    for key, value, field_path in [("shape", [4], None), *wrong]:
        spec = {"name": name, "element_type": "float32", "shape": [4], key: value}
        config = PredictorConfig(model_path=str(path), input_names=[name], output_names=["y:0" if name else None],
                                 input_specs=[spec], manifest_path=str(tmp_path / "m.yaml"))
        predictor = PREDICTORS.get(framework)(config)
        if field_path is None:
            predictor.load()
            predictor.close()
            continue
        with pytest.raises(ManifestError) as info:
            predictor.load()
        assert info.value.field == field_path and info.value.path == str(tmp_path / "m.yaml")
        assert str(value) in str(info.value)
