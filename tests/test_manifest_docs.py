"""docs/manifest.md cannot drift from the schema: its field tables list exactly the schema's fields, and its
complete example is a valid, runnable manifest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from mlharness.manifest import published, schema
from mlharness.manifest.hooks import check_hooks
from mlharness.manifest.loader import load_manifest

DOC = Path(__file__).resolve().parents[1] / "docs" / "manifest.md"

# Every model of the spec, by the heading of its section under "## Field reference".
DOCUMENTED_MODELS: dict[str, type[BaseModel]] = {
    "ModelManifest": schema.ModelManifest,
    "TensorSpec": schema.TensorSpec,
    "FrameworkSpec": schema.FrameworkSpec,
    "FrameworkVariant": schema.FrameworkVariant,
    "ModelAsset": schema.ModelAsset,
    "MLPerfSpec": schema.MLPerfSpec,
    "ResponseSpec": schema.ResponseSpec,
    "GenerationSpec": schema.GenerationSpec,
    "AccuracySpec": schema.AccuracySpec,
    "BatchingSpec": schema.BatchingSpec,
    "HooksSpec": schema.HooksSpec,
    "DatasetManifest": schema.DatasetManifest,
    "HookRef": schema.HookRef,
    "Published": published.Published,
    "Person": published.Person,
    "Citation": published.Citation,
}

_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def _section(text: str, heading: str) -> str:
    """The body of the level-2 section ``heading`` (up to the next level-2 heading)."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/manifest.md has no '## {heading}' section"
    return match.group(1)


def documented_fields() -> dict[str, list[str]]:
    """{section heading: [field names in its table]} from the field reference."""
    body = _section(DOC.read_text(), "Field reference")
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in body.splitlines():
        if line.startswith("### "):
            current = line[4:].strip().strip("`")
            assert current not in sections, f"section '{current}' appears twice"
            sections[current] = []
        elif current is not None and (m := _ROW.match(line)):
            sections[current].append(m.group(1))
    return sections


def _schema_models() -> set[str]:
    """Every pydantic model defined in the schema's modules (a new one must be documented too)."""
    return {
        name for module in (schema, published) for name, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == module.__name__
        and not name.startswith("_")
    }


def test_every_schema_model_has_a_section() -> None:
    sections = documented_fields()
    assert set(DOCUMENTED_MODELS) == _schema_models(), "update DOCUMENTED_MODELS and docs/manifest.md"
    assert set(sections) == set(DOCUMENTED_MODELS), (
        f"missing sections: {sorted(set(DOCUMENTED_MODELS) - set(sections))}; "
        f"unknown sections: {sorted(set(sections) - set(DOCUMENTED_MODELS))}"
    )


@pytest.mark.parametrize("name", list(DOCUMENTED_MODELS))
def test_field_table_matches_schema(name: str) -> None:
    documented = documented_fields().get(name, [])
    fields = list(DOCUMENTED_MODELS[name].model_fields)
    duplicates = sorted({f for f in documented if documented.count(f) > 1})
    assert not duplicates, f"{name}: documented twice: {duplicates}"
    missing = [f for f in fields if f not in documented]
    unknown = [f for f in documented if f not in fields]
    assert not missing, f"docs/manifest.md, section {name}: schema fields not documented: {missing}"
    assert not unknown, f"docs/manifest.md, section {name}: documented fields not in the schema: {unknown}"


# ---------------------------------------------------------------- the complete example

_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.M | re.S)
_FILE = re.compile(r"^# file: (\S+)\s*$")


def example_files() -> dict[str, str]:
    """The ```yaml blocks of the "Complete example" section that start with a '# file: <name>' line, in order;
    the first is the model manifest."""
    body = _section(DOC.read_text(), "Complete example")
    files: dict[str, str] = {}
    for block in _BLOCK.findall(body):
        first = block.splitlines()[0] if block else ""
        if m := _FILE.match(first):
            files[m.group(1)] = block
    assert files, "the Complete example has no ```yaml block starting with '# file: <name>'"
    return files


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLHARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLHARNESS_DEMO_DIR", raising=False)
    monkeypatch.delenv("MLHARNESS_MANIFEST_PATH", raising=False)
    files = example_files()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path / next(iter(files))


def test_complete_example_validates(example: Path) -> None:
    loaded = load_manifest(example)
    m = loaded.model
    assert loaded.dataset is not None and loaded.dataset_source is not None, "the example names a dataset file"
    # it shows every hook, in both manifests
    assert check_hooks(loaded) == [*schema.DATASET_HOOK_KEYS, *schema.HOOK_KEYS]  # the example has no predict hook
    # and the extensions the docs describe
    assert m.response.element_type and m.accuracy is not None and m.batching.server_max_wait_ms > 0
    assert m.framework.options and m.model is not None and m.model.generator


def test_complete_example_passes_the_cli_validate(example: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mlharness.cli", "manifest", "validate", str(example)],
                            cwd=example.parent, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


@pytest.mark.slow
def test_complete_example_runs_at_100_percent(example: Path) -> None:
    out = example.parent / "out"
    result = subprocess.run(
        [sys.executable, "-m", "mlharness.cli", "run", "--manifest", str(example), "--scenario", "Offline",
         "--mode", "accuracy", "--count", "64", "--output", str(out), "--no-progress"],
        cwd=example.parent, env=dict(os.environ), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "accuracy=100.000%" in (out / "accuracy.txt").read_text()
