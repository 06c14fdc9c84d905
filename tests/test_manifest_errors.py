"""Malformed manifests, checked through the real CLI: every error is exit code 2, names the manifest file and
the field path (or the hook and its line), is one paragraph, and never shows a Python traceback."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlharness.errors import ManifestError
from mlharness.manifest.hooks import check_hooks
from mlharness.manifest.loader import load_manifest
from mlharness.manifest.schema import TensorSpec

# A minimal VALID manifest: the toy "echo" predictor (returns its inputs) on a local placeholder file, an inline
# dataset and two hooks, so a run needs no framework, network or real model. Every case breaks ONE thing.
BASE: dict[str, Any] = {
    "name": "toy",
    "framework": {"name": "echo", "version": "*"},
    "inputs": [{"name": "x", "element_type": "float32", "shape": [4]}],
    "outputs": [{"name": "y", "element_type": "float32"}],
    "model": {"graph_path": "model.bin"},
    "dataset": {
        "name": "toy_data",
        "init": "def init(count):\n    return count or 8\n",
    },
    "preprocess": "import numpy as np\n\n\ndef preprocess(ctx, index):\n    return np.full(4, index, np.float32)\n",
    "postprocess": "def postprocess(ctx, outputs):\n    return outputs[0]\n",
}


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the hooks) as ``|`` blocks, the way people write manifests."""


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_BlockDumper.add_representer(str, _str)


def dump(m: dict[str, Any]) -> str:
    return yaml.dump(m, Dumper=_BlockDumper, sort_keys=False)


def broken(change: Callable[[dict[str, Any]], Any]) -> Callable[[], str]:
    def make() -> str:
        m = copy.deepcopy(BASE)
        change(m)
        return dump(m)

    return make


def raw(text: str) -> Callable[[], str]:
    return lambda: text


def set_at(*path_and_value: Any) -> Callable[[dict[str, Any]], None]:
    *path, value = path_and_value

    def change(m: dict[str, Any]) -> None:
        node: Any = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def drop(*path: Any) -> Callable[[dict[str, Any]], None]:
    def change(m: dict[str, Any]) -> None:
        node: Any = m
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return change


def rename(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    return lambda m: m.__setitem__(new, m.pop(old))


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLHARNESS_MANIFEST_PATH", raising=False)
    (tmp_path / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    return tmp_path


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlharness.cli", *args],
        cwd=cwd, env=dict(os.environ), capture_output=True, text=True, timeout=120,
    )


def validate(workdir: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return cli(workdir, "manifest", "validate", str(path))


def run(workdir: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return cli(workdir, "run", "--manifest", str(path), "--scenario", "Offline", "--mode", "accuracy",
               "--count", "4", "--output", str(workdir / "out"), "--no-progress")


def error_paragraph(result: subprocess.CompletedProcess[str]) -> str:
    """The 'error:' paragraph of stderr, checked to be a single paragraph without a traceback."""
    err = result.stderr
    assert "Traceback" not in err, err
    assert "error:" in err, err
    paragraph = err[err.index("error:"):].strip()
    assert "\n\n" not in paragraph, f"the error spans several paragraphs:\n{err}"
    return paragraph


def assert_reported(result: subprocess.CompletedProcess[str], path: Path, field: str | None, *expected: str) -> str:
    assert result.returncode == 2, f"rc={result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    message = error_paragraph(result)
    assert path.name in message, message
    if field is not None:
        assert f"'{field}'" in message, message
    for text in expected:
        assert text in message, f"{text!r} not in: {message}"
    return message


# ---------------------------------------------------------------- the base is valid

def test_base_manifest_is_valid_and_runs(workdir: Path) -> None:
    path = workdir / "toy.yaml"
    path.write_text(dump(BASE))
    result = validate(workdir, path)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    result = run(workdir, path)
    assert result.returncode == 0, result.stderr
    assert (workdir / "out" / "mlperf_log_accuracy.json").is_file()


# ---------------------------------------------------------------- schema / YAML errors (manifest validate)

# (id, manifest text, expected field path or None, further substrings the message must contain)
VALIDATE_CASES: list[tuple[str, Callable[[], str], str | None, tuple[str, ...]]] = [
    ("missing_framework", broken(drop("framework")), "framework", ("required field is missing",)),
    ("missing_graph_path", broken(drop("model", "graph_path")), "model.graph_path", ("required field is missing",)),
    ("inputs_is_a_string", broken(set_at("inputs", "x")), "inputs", ("valid list",)),
    ("outputs_empty", broken(set_at("outputs", [])), "outputs", ("at least 1",)),
    ("max_batchsize_not_int", broken(set_at("batching", {"max_batchsize": "big"})), "batching.max_batchsize",
     ("integer", "'big'")),
    ("scenario_batch_zero", broken(set_at("batching", {"Offline": 0})), "batching.Offline",
     ("greater than or equal to 1",)),
    ("yaml_unbalanced_bracket", raw("name: toy\ninputs: [1, 2\nframework: {name: echo}\n"), None,
     ("invalid YAML", "line 3", "line 2")),  # where parsing failed, and where the bracket was opened
    ("yaml_tab_indentation", raw("name: toy\nframework:\n\tname: echo\n"), None,
     ("invalid YAML", "line 3", "'\\t'")),
    ("top_level_list", raw("- name: toy\n- framework: echo\n"), None, ("mapping at the top level", "list")),
    ("empty_file", raw(""), None, ("mapping at the top level",)),
    ("unknown_framework", broken(set_at("framework", "name", "onnxruntim")), "framework.name",
     ("unknown framework 'onnxruntim'", "Did you mean 'onnxruntime'?")),
    ("framework_not_a_mapping", broken(set_at("framework", "echo")), "framework", ("dictionary",)),
    ("framework_version_not_pep440", broken(set_at("framework", "version", "newest!")), "framework.version",
     ("'newest!' is not a version constraint",)),
    ("top_level_key_typo", broken(rename("postprocess", "postprocesss")), "postprocesss",
     ("unknown key", "did you mean 'postprocess'?")),
    ("nested_key_typo", broken(set_at("model", "graph_checksun", "md5:" + "0" * 32)), "model.graph_checksun",
     ("did you mean 'graph_checksum'?",)),
    ("inline_dataset_key_typo", broken(set_at("dataset", "lod", "def load(s):\n    pass\n")), "dataset.lod",
     ("did you mean 'load'?",)),
    ("inline_dataset_missing_name", broken(drop("dataset", "name")), "dataset.name", ("required field is missing",)),
    ("unknown_element_type", broken(set_at("inputs", 0, "element_type", "float")), "inputs[0].element_type",
     ("unknown element_type 'float'", "float32")),
    ("unknown_response_element_type", broken(set_at("response", {"element_type": "f32"})), "response.element_type",
     ("unknown element_type 'f32'",)),
    # numpy cannot encode bfloat16 responses: refused up front, not with a traceback mid-run
    ("response_bfloat16", broken(set_at("response", {"element_type": "bfloat16"})), "response.element_type",
     ("bfloat16", "float32")),
    # an unknown metric is refused at load time, not after the whole LoadGen test has run
    ("unknown_accuracy_metric", broken(set_at("accuracy", {"metric": "imagenet_top"})), "accuracy.metric",
     ("unknown accuracy metric 'imagenet_top'", "Did you mean 'imagenet_top1'?")),
    ("accuracy_without_metric", broken(set_at("accuracy", {"options": {"val_map": "val_map.txt"}})),
     "accuracy.metric", ("required field is missing",)),
    ("shape_dimension_zero", broken(set_at("inputs", 0, "shape", [3, 0, 224])), "inputs[0].shape",
     ("dimension 1 is 0",)),
    ("shape_dimension_negative", broken(set_at("inputs", 0, "shape", [-2, 224])), "inputs[0].shape",
     ("dimension 0 is -2", "-1")),
    ("shape_not_a_list", broken(set_at("inputs", 0, "shape", "3x224x224")), "inputs[0].shape", ("valid list",)),
    ("shape_fractional", broken(set_at("inputs", 0, "shape", [3.5])), "inputs[0].shape[0]", ("3.5",)),
    ("mlmodelscope_dimensions_zero",
     broken(set_at("inputs", 0, {"type": "image", "parameters": {"element_type": {"value": "float32"},
                                                                "dimensions": [3, 0, 4], "input_layer": "x"}})),
     "inputs[0].shape", ("dimension 1 is 0",)),
    ("manifest_version_2", broken(set_at("manifest_version", 2)), "manifest_version", ("1",)),
    ("hook_not_source_or_ref", broken(set_at("preprocess", 5)), "preprocess", ("(got 5)",)),
    ("hook_without_its_function",
     broken(set_at("postprocess", "def post_process(ctx, outputs):\n    return outputs[0]\n")), "postprocess",
     ("must define a function named 'postprocess'",)),
    ("hook_file_missing", broken(set_at("preprocess", {"file": "hooks_missing.py"})), "preprocess.file",
     ("hooks_missing.py", "does not exist")),
    ("dataset_manifest_unknown_name", broken(set_at("dataset", "demo_imags")), "dataset",
     ("'demo_imags'", "Did you mean 'demo_images'?")),
    ("dataset_manifest_file_missing", broken(set_at("dataset", "data/toy_dataset.yaml")), "dataset",
     ("toy_dataset.yaml", "does not exist")),
]


@pytest.mark.parametrize(("text", "field", "expected"), [c[1:] for c in VALIDATE_CASES],
                         ids=[c[0] for c in VALIDATE_CASES])
def test_validate_reports(workdir: Path, text: Callable[[], str], field: str | None,
                          expected: tuple[str, ...]) -> None:
    path = workdir / "broken_manifest.yaml"
    path.write_text(text())
    assert_reported(validate(workdir, path), path, field, *expected)


# ---------------------------------------------------------------- hook compilation (validate runs no hook)

def _file_line(text: str, key: str, hook_line: int) -> int:
    """1-based line of the file holding line ``hook_line`` of the ``key: |`` block."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
    return start + 1 + hook_line


@pytest.mark.parametrize(("key", "source", "hook_line", "where"), [
    ("postprocess", "import numpy as np\n\ndef postprocess(ctx, outputs):\n    return outputs[0\n", 4, ()),
    ("init", "def init(count)\n    return 8\n", 1, ("dataset",)),
], ids=["model_hook", "dataset_hook"])
def test_hook_syntax_error_names_hook_and_line(workdir: Path, key: str, source: str, hook_line: int,
                                               where: tuple[str, ...]) -> None:
    m = copy.deepcopy(BASE)
    node = m
    for k in where:
        node = node[k]
    node[key] = source
    path = workdir / "syntax.yaml"
    text = dump(m)
    path.write_text(text)
    message = assert_reported(validate(workdir, path), path, key, f"line {hook_line}",
                              f"file line {_file_line(text, key, hook_line)}")
    assert f"hook '{key}'" in message
    # the run compiles the hooks the same way and reports the same thing
    assert_reported(run(workdir, path), path, key, f"hook line {hook_line}")


def test_hook_file_without_the_function(workdir: Path) -> None:
    (workdir / "my_hooks.py").write_text("def pre(ctx, index):\n    return 0\n")
    path = workdir / "hookref.yaml"
    path.write_text(broken(set_at("preprocess", {"file": "my_hooks.py", "function": "preprocess_image"}))())
    assert_reported(validate(workdir, path), path, "preprocess", "preprocess_image")
    assert_reported(run(workdir, path), path, "preprocess.function", "my_hooks.py", "preprocess_image")


# ---------------------------------------------------------------- errors that only show at run time

RUN_CASES = [
    # module-level code of a hook runs once, when the run compiles the hooks
    ("postprocess_raises_at_definition", ("postprocess",),
     "import numpy as np\nSCALE = 1 / 0\n\ndef postprocess(ctx, outputs):\n    return outputs[0] * SCALE\n",
     "postprocess", ("line 2", "while defining the hook", "ZeroDivisionError")),
    ("dataset_init_import_fails", ("dataset", "init"),
     "import no_such_module_for_mlharness_tests\n\ndef init(count):\n    return 8\n",
     "init", ("line 1", "while defining the hook", "no_such_module_for_mlharness_tests")),
    ("before_preprocess_raises", ("before_preprocess",),
     "def before_preprocess(ctx):\n    raise RuntimeError('no labels file')\n",
     "before_preprocess", ("line 2", "RuntimeError: no labels file")),
    ("init_returns_no_size", ("dataset", "init"), "def init(count):\n    return None\n",
     None, ("init(4)", "None")),
]


@pytest.mark.parametrize(("where", "source", "hook", "expected"), [c[1:] for c in RUN_CASES],
                         ids=[c[0] for c in RUN_CASES])
def test_run_reports_hook_errors(workdir: Path, where: tuple[str, ...], source: str, hook: str | None,
                                 expected: tuple[str, ...]) -> None:
    path = workdir / "runtime.yaml"
    path.write_text(broken(set_at(*where, source))())
    checked = validate(workdir, path)  # validate compiles but never runs hook code
    if "import no_such_module" in source:  # it locates the modules a hook imports, without importing them
        assert checked.returncode == 2 and "imports module 'no_such_module_for_mlharness_tests'" in checked.stderr
    else:
        assert checked.returncode == 0
    result = run(workdir, path)
    if hook is None:  # a dataset error, not a manifest one: names no manifest file
        assert result.returncode == 2, result.stderr
        message = error_paragraph(result)
        assert all(text in message for text in expected), message
        return
    message = assert_reported(result, path, hook, *expected)
    assert f"hook '{hook}'" in message


@pytest.mark.parametrize(("key", "source"), [
    ("preprocess", "def preprocess(ctx, index):\n    raise ValueError('unreadable sample %d' % index)\n"),
    ("postprocess", "def postprocess(ctx, outputs):\n    return {}['missing']\n"),
])
def test_failure_in_a_sample_hook_fails_the_run(workdir: Path, key: str, source: str) -> None:
    """A hook failing on samples fails the run (exit 3, RunFailed), still naming the hook and its line."""
    path = workdir / "sample_hook.yaml"
    path.write_text(broken(set_at(key, source))())
    result = run(workdir, path)
    assert result.returncode == 3, result.stderr
    message = error_paragraph(result)
    assert f"hook '{key}' of {path}, line 2" in message, message


# ---------------------------------------------------------------- the library raises the same errors

def test_load_manifest_error_carries_path_and_field(workdir: Path) -> None:
    path = workdir / "lib.yaml"
    path.write_text(broken(set_at("inputs", 0, "shape", [3, 0]))())
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert info.value.path == str(path) and info.value.field == "inputs[0].shape"


# ---------------------------------------------------------------- MLModelScope-style tensor specs

def test_mlmodelscope_tensor_spec_is_understood() -> None:
    spec = TensorSpec.model_validate({
        "type": "image",
        "description": "the input image",
        "parameters": {"element_type": {"value": "float32"}, "dimensions": [3, 224, 224], "input_layer": "data",
                       "mean": {"value": [123.68, 116.78, 103.94]}, "layout": {"default": "CHW"}},
    })
    assert spec.name == "data"
    assert spec.shape == [3, 224, 224]
    assert spec.element_type == "float32"
    assert spec.layout == "CHW"
    assert spec.parameters["mean"] == [123.68, 116.78, 103.94]  # {value: x} unwrapped, kept for the hooks
    out = TensorSpec.model_validate({"type": "probability", "parameters": {"element_type": {"value": "int64"},
                                                                          "output_layer": "prob"}})
    assert (out.name, out.element_type, out.shape) == ("prob", "int64", None)
    # explicit flat keys win over the parameters bag
    both = TensorSpec.model_validate({"name": "x", "parameters": {"input_layer": "data"}})
    assert both.name == "x"


def test_mlmodelscope_style_manifest_loads(workdir: Path) -> None:
    m = copy.deepcopy(BASE)
    m["inputs"] = [{"type": "image", "parameters": {"element_type": {"value": "float32"}, "dimensions": [4],
                                                    "input_layer": "x"}}]
    m["framework"]["version"] = "1.7.1"  # MLModelScope's bare version: informational, not a constraint
    path = workdir / "mlms.yaml"
    path.write_text(dump(m))
    loaded = load_manifest(path)
    (spec,) = loaded.model.inputs
    assert (spec.name, spec.shape, spec.element_type) == ("x", [4], "float32")
    assert check_hooks(loaded) == ["init", "preprocess", "postprocess"]
