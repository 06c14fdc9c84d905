"""A campaign file: which models run in which scenarios and modes, with which run options, on which systems.

Read as manifests are (:mod:`mlharness.manifest.safeyaml`'s budget, typed models with ``extra="forbid"``), so a
typo is an error naming the file, the line and the field path instead of a key silently ignored::

    models: [resnet50-oracle, ./my-model.yaml]   # built-in names or manifest files (relative to this file)
    datasets: [/data/imagenet]                    # optional: --dataset-path folders, present on every node
    scenarios: [Offline, SingleStream]
    modes: [accuracy, performance]
    options: {min_duration_ms: 1000, count: 64}   # the flags every run gets (`mlharness run`'s names)
    systems:
      - {name: cpu}                               # any node
      - {name: gpu32, accelerator: GPU, min_memory_gb: 32, frameworks: {onnxruntime: ">=1.20"}, on: each}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlharness import fileguard
from mlharness.errors import ManifestError
from mlharness.manifest import safeyaml
from mlharness.manifest.names import safe_name
from mlharness.manifest.problems import format_validation

SCENARIOS = ("SingleStream", "MultiStream", "Server", "Offline", "Interactive")
# run options a scenario's runs refuse (mlharness/loadgen/settings.py): the scenarios each applies to
SCENARIO_OPTIONS = {"target_qps": ("Offline", "Server", "Interactive"),
                    "target_latency_ms": ("SingleStream", "MultiStream", "Server", "Interactive"),
                    "samples_per_query": ("MultiStream",)}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunOptionsSpec(_Strict):
    """The options every run of the campaign gets, named as ``mlharness run``'s flags (``min_duration_ms`` is
    ``--min-duration-ms``). Development values make the runs not submittable, as they do on ``run``."""

    min_duration_ms: int | None = Field(None, gt=0)
    min_query_count: int | None = Field(None, gt=0)
    max_query_count: int | None = Field(None, gt=0)
    count: int | None = Field(None, gt=0)
    """How many dataset samples the runs load."""
    target_qps: float | None = Field(None, gt=0)
    target_latency_ms: float | None = Field(None, gt=0)
    samples_per_query: int | None = Field(None, gt=0)
    performance_sample_count: int | None = Field(None, gt=0)
    framework: str | None = None
    round: str | None = None
    device: str | None = None
    threads: int | None = Field(None, gt=0)
    workers: int | None = Field(None, gt=0)
    max_batchsize: int | None = Field(None, gt=0)
    no_calibrate: bool = False

    def flags(self) -> list[str]:
        out: list[str] = []
        for name, value in self.model_dump(exclude_none=True).items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                out.append(flag)
            elif value is not False:
                out += [flag, str(value)]
        return out


class SystemSpec(_Strict):
    """A named set of node constraints; each job of the campaign runs once per system."""

    name: str
    """The system's name: the first folder of its results (``<system>/<model>/<scenario>/<mode>``)."""
    accelerator: str | None = None
    """A resource the node must offer (a Ray custom resource such as ``GPU`` or ``acc_a``)."""
    accelerators: float = Field(1.0, gt=0)
    """How many of ``accelerator`` a run holds while it runs."""
    min_memory_gb: float | None = Field(None, gt=0)
    """The node's total memory, as its host facts measure it."""
    frameworks: dict[str, str] = {}
    """Distribution name → PEP 440 version specifier the node's installed version must meet."""
    labels: dict[str, str] = {}
    """Node labels that must match exactly."""
    cpus: float = Field(1.0, gt=0)
    """CPUs a run holds while it runs."""
    on: Literal["any", "each"] = "any"
    """``any``: one result per job, on any node that matches; ``each``: one result per matching node."""

    @field_validator("name")
    @classmethod
    def _safe(cls, v: str) -> str:
        return safe_name(v)

    @field_validator("frameworks")
    @classmethod
    def _specifiers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, spec in v.items():
            try:
                SpecifierSet(str(spec))
            except InvalidSpecifier:
                raise ValueError(f"{name}: {spec!r} is not a version specifier (e.g. '>=1.20,<2')") from None
        return v


class CampaignSpec(_Strict):
    """The whole campaign file."""

    name: str | None = None
    models: list[str] = Field(min_length=1)
    """Built-in manifest names (``resnet50-oracle``, ``NAME@FRAMEWORK``) or manifest files."""
    datasets: list[str] = []
    """``--dataset-path`` folders; each model runs on each. Not shipped: every node must have them."""
    scenarios: list[str] = Field(min_length=1)
    modes: list[Literal["accuracy", "performance"]] = Field(["performance"], min_length=1)
    options: RunOptionsSpec = RunOptionsSpec()
    systems: list[SystemSpec] = Field([SystemSpec(name="default")], min_length=1)
    timeout_s: float | None = Field(None, gt=0)
    """Wall-clock bound of each run's process."""

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, v: list[str]) -> list[str]:
        for s in v:
            if s not in SCENARIOS:
                raise ValueError(f"unknown scenario {s!r}; expected one of: {', '.join(SCENARIOS)}")
        return v

    @field_validator("systems")
    @classmethod
    def _unique(cls, v: list[SystemSpec]) -> list[SystemSpec]:
        names = [s.name for s in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"system name(s) given twice: {', '.join(twice)}")
        return v


def _line_of(node: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``loc`` (the deepest one that exists)."""
    line = None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            node = None
    return node.start_mark.line + 1 if node is not None else line


def load_campaign(path: Path) -> CampaignSpec:
    """The campaign file, validated; a ManifestError naming the file, line and field otherwise (exit status 2)."""
    try:
        text = safeyaml.decode(fileguard.read_bytes_bounded(path, "the campaign file", safeyaml.MAX_BYTES,
                                                            error=ValueError, name_path=False))
    except OSError as e:
        raise ManifestError(path, None, f"cannot read the campaign file: {e.strerror or e}") from e
    except (ValueError, UnicodeDecodeError) as e:
        raise ManifestError(path, None, str(e)) from None
    try:
        data, node = safeyaml.load(text)
    except yaml.YAMLError as e:
        field, problem = safeyaml.describe_error(e)
        raise ManifestError(path, field, problem if field else f"invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ManifestError(path, None, f"expected a mapping at the top level, found {type(data).__name__}")
    for system in data.get("systems") or []:
        if isinstance(system, dict) and True in system and "on" not in system:
            system["on"] = system.pop(True)  # YAML 1.1 reads a bare `on:` key as the boolean true
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as e:
        err = format_validation(path, CampaignSpec, e)
        line = _line_of(node, tuple(e.errors()[0]["loc"]))
        if line is None:
            raise err from None
        prefix = f"{err.path}" + (f": field '{err.field}'" if err.field else "") + ": "
        raise ManifestError(f"{path}, line {line}", err.field, str(err).removeprefix(prefix)) from None
    _options_fit_every_scenario(spec, path, node)
    return spec


def _options_fit_every_scenario(spec: CampaignSpec, path: Path, node: Any) -> None:
    """``options`` go to every run: one a scenario refuses would fail each of its runs at run time, after the
    others started, so it is refused here (``campaign plan`` and ``run``), naming its line."""
    for name, scenarios in SCENARIO_OPTIONS.items():
        misfits = [s for s in spec.scenarios if s not in scenarios] if getattr(spec.options, name) else []
        if misfits:
            line = _line_of(node, ("options", name))
            raise ManifestError(f"{path}, line {line}" if line else path, f"options.{name}",
                                f"applies to {', '.join(scenarios)} only, and every run of the campaign gets it: "
                                f"its {', '.join(misfits)} runs would fail; run those scenarios in a campaign of "
                                f"their own without {name}")
