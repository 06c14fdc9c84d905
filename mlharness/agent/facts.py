"""What an agent says about itself: its host facts (what ``mlharness sysinfo`` measures, taken on the agent's
host), the framework it runs and its mlharness version, so that a run over agents records what computed it.

The Open Inference Protocol's ServerMetadata and ModelMetadata responses have no free-form field (only names,
versions, a platform and extension names), so the agent announces the extension :data:`EXTENSION_FACTS` and
answers a ModelInfer request carrying the parameter :data:`FACTS_PARAMETER` (no tensors) with the facts as JSON
text in the response parameter of that name, the way QSL load/unload requests are carried. Servers other than
mlharness agents do not announce it and are never asked.

The client treats the answer as untrusted input: it asks over a channel whose receive limit is
:data:`MAX_FACTS_BYTES`, parses JSON data only, keeps scalars, dicts and lists within fixed bounds and checks the
few fields it reads. A malformed, oversized or missing answer is a warning and a ``facts_error`` in the run's
metadata, never a failed run: the facts describe the run, they do not change its result.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from mlharness import __version__

log = logging.getLogger(__name__)

EXTENSION_FACTS = "mlharness_facts"
FACTS_PARAMETER = "mlharness_facts"  # ModelInfer request parameter (any value) and response parameter (JSON text)
MAX_FACTS_BYTES = 64 * 1024  # a whole answer; a real one is about 2 KB
FACTS_SCHEMA = 1
_MAX_DEPTH = 5
_MAX_ITEMS = 64
_MAX_TEXT = 512


def agent_facts(framework: str, framework_version: str, platform: str) -> dict[str, Any]:
    """The agent's answer, measured once at start-up on the agent's own host."""
    from mlharness.telemetry.sysinfo import detect_system, host_facts

    return {"schema": FACTS_SCHEMA, "mlharness_version": __version__, "pid": os.getpid(), "host": host_facts(),
            "system": detect_system(), "framework": {"name": framework, "version": framework_version},
            "platform": platform}


def facts_text(facts: dict[str, Any]) -> str:
    text = json.dumps(facts, default=str)
    if len(text.encode()) > MAX_FACTS_BYTES:  # an absurd host; say so rather than send what clients refuse
        text = json.dumps({"schema": FACTS_SCHEMA, "mlharness_version": __version__, "pid": os.getpid(),
                           "framework": facts.get("framework"), "host": {"hostname": facts["host"]["hostname"]},
                           "note": "the full facts exceeded the size limit"}, default=str)
    return text


def _bounded(value: Any, depth: int = 0) -> Any:
    """JSON data cut to fixed bounds: strings shortened, lists and dicts truncated, nesting limited."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    if depth >= _MAX_DEPTH:
        return None
    if isinstance(value, list):
        return [_bounded(v, depth + 1) for v in value[:_MAX_ITEMS]]
    if isinstance(value, dict):
        return {str(k)[:_MAX_TEXT]: _bounded(v, depth + 1) for k, v in list(value.items())[:_MAX_ITEMS]}
    return None


def parse_facts(text: str) -> dict[str, Any]:
    """The agent's facts, checked; raises ValueError naming what is wrong."""
    if len(text.encode()) > MAX_FACTS_BYTES:
        raise ValueError(f"the facts are {len(text.encode())} bytes, more than the {MAX_FACTS_BYTES} accepted")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"the facts are not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the facts are a JSON {type(data).__name__}, not an object")
    data = _bounded(data)
    checks = {"mlharness_version": str, "pid": int, "host": dict, "system": dict, "framework": dict,
              "platform": str}
    for key, kind in checks.items():
        if key in data and not isinstance(data[key], kind):
            raise ValueError(f"facts field '{key}' is a {type(data[key]).__name__}, expected {kind.__name__}")
    for key in ("host", "framework"):
        if key not in data:
            raise ValueError(f"the facts have no '{key}'")
    framework = data["framework"]
    if not all(isinstance(framework.get(k), str) for k in ("name", "version")):
        raise ValueError("facts field 'framework' needs text 'name' and 'version'")
    return data


def describe_agent(address: str, facts: dict[str, Any] | None, error: str | None) -> dict[str, Any]:
    """One entry of the run metadata's ``agents`` list."""
    entry: dict[str, Any] = {"address": address}
    if facts is not None:
        entry.update(host=facts.get("host"), framework=facts.get("framework"),
                     mlharness_version=facts.get("mlharness_version"), pid=facts.get("pid"),
                     platform=facts.get("platform"), system=facts.get("system"))
    else:
        entry["facts_error"] = error
    return entry
