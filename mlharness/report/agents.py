"""The agents a remote run computed on, as the report shows them beside the harness's host: a run over agents
(``run --agent``, ``--network lon``) measures the model on their hardware, so the host line alone would name the
wrong machine."""

from __future__ import annotations

from typing import Any

from mlharness.report import units


def agent_lines(meta: dict[str, Any] | None) -> list[str]:
    """One line per agent in the run's metadata (``agents``): its address, host and framework, or why the run
    does not know them."""
    lines = []
    for a in (meta or {}).get("agents") or []:
        where = f"agent {a.get('address', '?')}"
        if a.get("facts_error"):
            lines.append(f"{where}: system unknown ({a['facts_error']})")
            continue
        h, f, system = (_dict(a.get(k)) for k in ("host", "framework", "system"))
        accelerators = _dict(system.get("accelerators"))
        devices = accelerators.get("devices") if isinstance(accelerators.get("devices"), list) else []
        model = _dict(devices[0]).get("name") if devices else None
        gpus = f", {accelerators['count']}x {model or 'accelerator'}" if accelerators.get("count") else ""
        lines.append(f"{where}: host {h.get('hostname', '?')}: {h.get('cpu_model', '?')}, {h.get('cpu_count', '?')} "
                     f"CPUs, {units.gib_from_bytes(h.get('memory_bytes'))} memory{gpus}, {h.get('os', '?')}, "
                     f"Python {h.get('python', '?')}; {f.get('name', '?')} {f.get('version', '?')}, mlharness "
                     f"{a.get('mlharness_version', '?')}")
    return lines


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
