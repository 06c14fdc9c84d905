"""System descriptions (``systems/<system>.json``): the checker's fields, filled from what
:func:`mlharness.telemetry.sysinfo.detect_system` finds, a YAML overrides file, and the submission's own facts
(division, submitter, system name, framework). A field nobody could fill is reported as missing, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlharness.errors import SettingsError
from mlharness.submission.rules import (
    STATUSES,
    SYSTEM_DESC_MEANINGFUL_FIELDS,
    SYSTEM_DESC_REQUIRED_FIELDS,
    SYSTEM_TYPES,
)
from mlharness.telemetry.sysinfo import detect_system, format_bytes

NA = "N/A"
# the example system file (`mlharness submission system-template`): the fields no host can tell
SYSTEM_TEMPLATE = Path(__file__).with_name("system-template.yaml")


def template_text() -> str:
    return SYSTEM_TEMPLATE.read_text()


@dataclass
class SystemDescription:
    fields: dict[str, str]  # every required field; "" where unknown
    sources: dict[str, str]  # field -> detected | override | submission | convention | missing
    missing: list[str] = field(default_factory=list)  # meaningful fields still empty
    problems: list[str] = field(default_factory=list)  # values the checker would refuse

    def to_json(self) -> dict[str, str]:
        return dict(self.fields)


def load_overrides(path: Path | str | None) -> dict[str, str]:
    """The overrides YAML: a mapping of system-description field to value (numbers are kept as text)."""
    if path is None:
        return {}
    from mlharness.manifest.safeyaml import safe_load_file

    try:
        data = safe_load_file(Path(path)) or {}
    except (OSError, ValueError) as e:
        raise SettingsError(f"cannot read system overrides {path}: {e}") from e
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of system-description fields to values")
    unknown = sorted(set(data) - set(SYSTEM_DESC_REQUIRED_FIELDS))
    if unknown:
        from mlharness.errors import suggest

        raise SettingsError(f"{path}: unknown system-description field '{unknown[0]}'."
                            f"{suggest(unknown[0], SYSTEM_DESC_REQUIRED_FIELDS)}")
    return {k: "" if v is None else str(v) for k, v in data.items()}


def detected_fields(facts: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(fields, sources) derived from detect_system()'s facts; conventions ('N/A' for what a host lacks) are
    marked as such."""
    out: dict[str, str] = {}
    src: dict[str, str] = {}

    def put(key: str, value: Any, source: str = "detected") -> None:
        if value not in (None, ""):
            out[key] = str(value)
            src[key] = source

    cpu = facts.get("cpu", {})
    put("number_of_nodes", 1)  # mlharness runs the SUT on one host
    put("host_processor_model_name", cpu.get("model") if cpu.get("model") != "unknown" else None)
    put("host_processors_per_node", cpu.get("sockets"))
    put("host_processor_core_count", cpu.get("cores_per_socket"))
    put("host_processor_frequency", f"{cpu['frequency_mhz']} MHz" if cpu.get("frequency_mhz") else None)
    put("host_processor_caches", cpu.get("caches"))
    if cpu.get("sockets") == 1:
        put("host_processor_interconnect", NA, "convention")
    mem = facts.get("memory", {})
    put("host_memory_capacity", mem.get("capacity"))
    put("host_memory_configuration", mem.get("configuration"))
    disk = facts.get("storage", {})
    put("host_storage_capacity", disk.get("capacity"))
    put("host_storage_type", disk.get("type"))
    nics = facts.get("network", {}).get("nics", [])
    put("host_network_card_count", len(nics))
    put("host_networking_topology", NA, "convention")  # one node: no network between nodes to describe
    if nics:
        speeds = [f"{n['speed_mbit'] / 1000:g} Gbit/s" for n in nics if n.get("speed_mbit")]
        put("host_networking", f"{len(nics)}x Ethernet" + (f" ({', '.join(speeds)})" if speeds else ""))
    else:
        put("host_networking", NA, "convention")
    acc = facts.get("accelerators", {})
    devices = acc.get("devices", [])
    put("accelerators_per_node", acc.get("count", 0))
    if devices:
        first = devices[0]
        put("accelerator_model_name", first["name"])
        put("accelerator_memory_capacity", format_bytes(first["memory_bytes"]))
        if first.get("max_sm_clock_mhz"):
            put("accelerator_frequency", f"{first['max_sm_clock_mhz']} MHz")
        if first.get("pcie_gen"):
            put("accelerator_host_interconnect", f"PCIe Gen{first['pcie_gen']} x{first.get('pcie_width', '?')}")
        links = first.get("nvlinks")
        if links is not None:
            put("accelerator_interconnect", f"NVLink ({links} links)" if links else NA)
        if len(devices) == 1:
            put("accelerator_interconnect_topology", NA, "convention")
    else:
        for key in ("accelerator_model_name", "accelerator_memory_capacity", "accelerator_frequency",
                    "accelerator_host_interconnect", "accelerator_interconnect", "accelerator_interconnect_topology",
                    "accelerator_memory_configuration", "accelerator_on-chip_memories"):
            put(key, NA, "convention")  # a host without accelerators: what CPU-only submissions write
    put("operating_system", facts.get("os"))
    frameworks = facts.get("frameworks", {})
    put("framework", ", ".join(f"{k} {v}" for k, v in frameworks.items()))
    software = dict(facts.get("software", {}))
    stack = [f"Python {facts.get('python')}"] + [f"{k} {v}" for k, v in software.items()]
    if acc.get("driver"):
        stack.append(f"NVIDIA driver {acc['driver']}" + (f" (CUDA {acc['cuda']})" if acc.get("cuda") else ""))
    put("other_software_stack", ", ".join(stack))
    put("system_name", facts.get("hostname"))
    for key in ("hw_notes", "sw_notes", "system_type_detail"):  # free text the checker allows to be empty
        out[key] = ""
        src[key] = "convention"
    return out, src


def describe_system(overrides: dict[str, str] | None = None, facts: dict[str, Any] | None = None,
                    submission: dict[str, str] | None = None) -> SystemDescription:
    """Detected fields, then the submission's facts (division, submitter, system name, framework), then the
    overrides file, which wins over everything."""
    fields, sources = detected_fields(facts if facts is not None else detect_system())
    for layer, name in ((submission or {}, "submission"), (overrides or {}, "override")):
        for key, value in layer.items():
            if value is not None:
                fields[key] = str(value)
                sources[key] = name
    return _rebuild(fields, sources)


def finalize(fields: dict[str, str], sources: dict[str, str], layer: dict[str, str], layer_name: str) -> \
        SystemDescription:
    """A recorded description with one more layer of values on top (the package's framework, overrides)."""
    fields, sources = dict(fields), dict(sources)
    for key, value in layer.items():
        fields[key] = str(value)
        sources[key] = layer_name
    return _rebuild(fields, sources)


def _rebuild(fields: dict[str, str], sources: dict[str, str]) -> SystemDescription:
    ordered = {k: str(fields.get(k, "")) for k in SYSTEM_DESC_REQUIRED_FIELDS}
    srcs = {k: sources.get(k, "missing") if ordered[k] or k not in SYSTEM_DESC_MEANINGFUL_FIELDS else "missing"
            for k in ordered}
    missing = [k for k in SYSTEM_DESC_MEANINGFUL_FIELDS if not ordered[k].strip()]
    return SystemDescription(ordered, srcs, missing, value_problems(ordered))


def value_problems(fields: dict[str, Any]) -> list[str]:
    """Values the checker refuses even when present."""
    problems = []
    if fields.get("status") and fields["status"] not in STATUSES:
        problems.append(f"status '{fields['status']}' is not one of {', '.join(STATUSES)}")
    if fields.get("system_type") and fields["system_type"] not in SYSTEM_TYPES:
        problems.append(f"system_type '{fields['system_type']}' is not one of {', '.join(SYSTEM_TYPES)}")
    return problems


def sysinfo_command(args: Any, console: Any) -> int:
    """``mlharness sysinfo``: the system description of this host, with the fields still missing listed
    (exit status 0: a description is information, ``submission check`` is the check)."""
    import json

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from mlharness.userfiles import check_free, replace_text

    if args.out is not None:
        check_free(args.out, getattr(args, "force", False))
    desc = describe_system(load_overrides(args.overrides))
    if args.out is not None:
        replace_text(args.out, json.dumps(desc.to_json(), indent=2) + "\n")
    if args.json:
        console.print_json(json.dumps(desc.to_json()))
    else:
        table = Table(title="system description")
        for column in ("field", "value", "source"):
            table.add_column(column)
        colours = {"missing": "red", "override": "cyan", "convention": "yellow"}
        for key, value in desc.fields.items():
            source = desc.sources[key]
            table.add_row(key, escape(value), f"[{colours.get(source, 'green')}]{source}[/]")
        console.print(table)
    notes = Console(stderr=True, emoji=False) if args.json else console  # keep --json's stdout pure JSON
    if desc.missing:
        notes.print(f"missing (set them with --overrides FILE.yaml): {', '.join(desc.missing)} (`mlharness "
                    f"submission system-template` prints an example file)", highlight=False, soft_wrap=True)
    for problem in desc.problems:
        notes.print(f"invalid: {problem}", highlight=False, soft_wrap=True)
    if args.out is not None:
        notes.print(f"wrote {args.out}", highlight=False, soft_wrap=True)
    return 0
