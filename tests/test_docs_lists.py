"""The docs cannot go stale: every benchmark a built-in manifest runs, every framework of the predictor registry
and every metric of the metric registry is named in README.md or docs/*.md as a `code` word; and every optional
package mlharness reports as missing names an extra of pyproject.toml that really carries it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlharness import extras
from mlharness.errors import PredictorError
from mlharness.manifest.loader import builtin_names, find_builtin
from mlharness.predictors import PREDICTORS
from mlharness.tasks import METRICS

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]


def doc_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def documented() -> set[str]:
    """Every `code` word of the docs (a backticked span without spaces)."""
    return {word for page in doc_pages() for word in re.findall(r"`([^`\s]+)`", page.read_text())}


def builtin_benchmarks() -> set[str]:
    """The MLPerf benchmark IDs the built-in manifests run (``mlperf.benchmark``, else ``mlperf.model``)."""
    found = set()
    for name in builtin_names("model"):
        data = yaml.safe_load(find_builtin(name).read_text()) or {}
        mlperf = data.get("mlperf") or {}
        benchmark = mlperf.get("benchmark") or mlperf.get("model")
        if benchmark:
            found.add(benchmark)
    return found


def registered() -> dict[str, set[str]]:
    return {"benchmark": builtin_benchmarks(), "framework": set(PREDICTORS.names()),
            "metric": set(METRICS.names())}


def undocumented(names: dict[str, set[str]], words: set[str]) -> dict[str, list[str]]:
    return {kind: sorted(n - words) for kind, n in names.items() if n - words}


def test_every_registered_name_is_in_the_docs():
    names = registered()
    assert {"resnet", "llama3.1-8b", "whisper", "stable-diffusion-xl"} <= names["benchmark"]
    assert {"onnxruntime", "openai", "transformers-speech"} <= names["framework"]
    assert {"imagenet_top1", "whisper_wer", "coco_t2i"} <= names["metric"]
    missing = undocumented(names, documented())
    assert not missing, f"name these in README.md or docs/*.md (as `name`): {missing}"


def test_a_name_missing_from_the_docs_is_reported(monkeypatch):
    # a framework registered without a word in the docs: the check above must name it
    before = undocumented(registered(), documented()).get("framework", [])
    monkeypatch.setattr(PREDICTORS, "_entries", {**PREDICTORS._entries, "fake-undocumented": "nowhere:Fake"})
    missing = undocumented(registered(), documented())
    assert missing["framework"] == sorted([*before, "fake-undocumented"])
    # a word mentioned only in prose, not as `code`, does not count
    assert undocumented({"metric": {"top1"}}, {"top1 is prose"}) == {"metric": ["top1"]}


def optional_dependencies() -> dict[str, list[str]]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def distribution(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def test_each_missing_module_names_an_extra_that_carries_it():
    extras_table = optional_dependencies()
    for module, (dist, names) in extras.MODULES.items():
        for extra in names:
            carried = {distribution(r) for r in extras_table[extra]}
            assert dist in carried, f"{module}: extra [{extra}] does not carry {dist}"
    for framework, names in extras.FRAMEWORKS.items():
        assert framework in PREDICTORS
        assert set(names) <= set(extras_table), framework
    for extra in {e for _, names in extras.MODULES.values() for e in names}:
        assert extra in extras.PURPOSE, extra


def test_hint_names_the_pip_command():
    assert extras.hint_for_module("torch.nn") == "'torch' comes with the extra [torch]: pip install 'mlharness[torch]'"
    assert "pip install 'mlharness[llm]' (LLMs)" in extras.hint_for_module("pandas")
    assert "pip install 'mlharness[t2i]' (image generation)" in extras.hint_for_module("pandas")
    assert extras.hint_for_module("mlharness_no_such_module") is None
    assert extras.hint_for_framework("transformers") == "pip install 'mlharness[torch,llm]'"
    assert extras.hint_for_framework("onnxruntime") is None
    import importlib.metadata

    assert "mlharness[speech]" in extras.hint_for_exception(importlib.metadata.PackageNotFoundError("soundfile"))


def test_a_predictor_whose_package_is_missing_names_its_extra(monkeypatch):
    # a module that does not exist, mapped to an extra: the registry's lookup turns the import into the error
    monkeypatch.setitem(extras.MODULES, "mlharness_no_such_module", ("no-such-dist", ("llm",)))
    monkeypatch.setattr(PREDICTORS, "_entries", {**PREDICTORS._entries, "fake": "mlharness_no_such_module:P"})
    with pytest.raises(PredictorError, match=r"framework 'fake' needs a package that is not installed .*"
                                             r"pip install 'mlharness\[llm\]'"):
        PREDICTORS.get("fake")
    # a module no extra brings is a bug in mlharness: it keeps its traceback
    monkeypatch.setattr(PREDICTORS, "_entries", {**PREDICTORS._entries, "fake2": "mlharness_other_missing:P"})
    with pytest.raises(ModuleNotFoundError):
        PREDICTORS.get("fake2")


BLOCKER = """import sys
class Missing:  # this interpreter has no {module}, as a core-only install has none
    def find_spec(self, name, path=None, target=None):
        if name == "{module}" or name.startswith("{module}."):
            raise ModuleNotFoundError(f"No module named '{{name}}'", name=name)
sys.meta_path.insert(0, Missing())
"""


def test_a_hook_importing_a_missing_package_exits_2_naming_the_extra(tmp_path):
    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER.format(module="soundfile"))
    (tmp_path / "none.bin").write_bytes(b"")
    manifest = tmp_path / "speechy.yaml"
    manifest.write_text(
        "name: speechy\nframework:\n  name: echo\ninputs:\n  - name: x\n    shape: [4]\noutputs:\n  - name: y\n"
        "model:\n  graph_path: none.bin\n"
        "dataset:\n  name: inline\n  init: |\n    import soundfile\n    def init(count):\n        return 8\n"
        "preprocess: |\n  import numpy as np\n  def preprocess(ctx, index):\n      return np.zeros((4,), np.float32)\n"
    )
    env = {**os.environ, "MLHARNESS_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(blocker), str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(manifest),
                           "--scenario", "Offline", "--mode", "accuracy", "--no-progress"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "No module named 'soundfile'" in proc.stderr
    assert "pip install 'mlharness[speech]'" in proc.stderr, proc.stderr



def test_a_run_failed_by_a_missing_package_is_the_installs_fault():
    from mlharness.errors import HookError, RunFailed

    def failed_run(missing: str) -> RunFailed:
        """RunFailed from HookError from the import, as the timed path chains them."""
        try:
            try:
                raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)
            except ModuleNotFoundError as e:
                raise HookError("preprocess", "m.yaml", str(e)) from e
        except HookError as e:
            try:
                raise RunFailed(f"the run failed: {e}") from e
            except RunFailed as failed:
                return failed

    assert extras.missing_package(failed_run("cv2"))
    assert not extras.missing_package(failed_run("mlharness_no_such_module"))
    assert not extras.missing_package(RunFailed("the model raised"))
