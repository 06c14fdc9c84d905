"""The ground truth of a BFCL v4 entry as a model's answer: what the oracle engine answers and the oracle log holds.

The possible answers list, for each expected call, every value the AST checker accepts per parameter (``""``
among them: the parameter may be left out). The oracle calls each expected function by the name the tools give it
(dots as underscores), with each required parameter at its first possible value and each optional one left out
where it may be. Java and JavaScript entries take their arguments as source text (bfcl-eval converts them back by
the declared type): ``true``, ``5L``, ``1.5f``, ``new ArrayList<>(Arrays.asList(...))``, ``new int[]{...}``, a ``HashMap`` with ``put``
calls, ``[...]``, ``{k: v}``.
Standard library only, so the dataset module can build sessions with it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mlharness.kinds.sessions.model import Answer, ToolCall

ABSTENTION = "None of the available functions can do that."
LANGUAGES = {"simple_java": "java", "simple_javascript": "javascript"}


def openai_name(name: str) -> str:
    """A BFCL function name as OpenAI accepts it (``^[a-zA-Z0-9_-]{1,64}$``): dots become underscores."""
    return re.sub(r"\.", "_", name)


def _pick(value: Any) -> Any:
    """A value of a possible answer as the model would write it: nested dicts take each key's first possible
    value (a key that may be left out is), lists are picked item by item."""
    if isinstance(value, dict):
        return {k: _pick(v[0]) for k, v in value.items() if isinstance(v, list) and v and "" not in v}
    if isinstance(value, list):
        return [_pick(v) for v in value]
    return value


def _scalar(value: Any, typ: str, lang: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if lang == "java" and typ == "long":
        return f"{value}L"
    if lang == "java" and typ == "float":
        return f"{value}f"
    if lang == "javascript" and typ == "Bigint":
        return f"{value}n"
    return str(value)


def _element(value: Any, typ: str, lang: str) -> str:
    if typ in ("String", "string") and isinstance(value, str):
        return json.dumps(value)
    return _source(value, {"type": typ}, lang)


def _source(value: Any, doc: dict[str, Any], lang: str) -> str:
    """A value as Java or JavaScript source of the parameter's declared type."""
    typ = str(doc.get("type", ""))
    nested = str((doc.get("items") or {}).get("type", ""))
    if isinstance(value, list):
        if lang == "java" and typ == "Array":  # bfcl-eval reads its elements' text as is, quotes included
            return f"new {nested or 'Object'}[]{{{', '.join(_scalar(v, nested, lang) for v in value)}}}"
        items = ", ".join(_element(v, nested, lang) for v in value)
        return f"new ArrayList<>(Arrays.asList({items}))" if lang == "java" else f"[{items}]"
    if isinstance(value, dict):
        if lang == "java":
            puts = " ".join(f"put({json.dumps(k)}, {_element(v, 'String', lang)});" for k, v in value.items())
            return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
        return "{" + ", ".join(f"{k}: {_element(v, '', lang)}" for k, v in value.items()) + "}"
    return _scalar(value, typ, lang)


def _arguments(params: dict[str, list[Any]], doc: dict[str, Any] | None, lang: str | None) -> dict[str, Any]:
    schema = (doc or {}).get("parameters") or {}
    required = set(schema.get("required") or [])
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    for name, values in params.items():
        given = [v for v in values if v != ""]
        if not given or (len(given) < len(values) and name not in required):
            continue  # may be left out
        value = _pick(given[0])
        args[name] = value if lang is None else _source(value, props.get(name) or {}, lang)
    return args


def oracle_answer(entry: Any) -> Answer:
    """The entry's ground truth as an Answer: one tool call per expected call; a plain-text abstention where no
    call is expected (irrelevance). ``entry`` has ``ground_truth``, ``function`` and ``subset``."""
    docs = {f.get("name"): f for f in entry.function}
    lang = LANGUAGES.get(entry.subset)
    calls = []
    for call in entry.ground_truth:
        for name, params in call.items():
            args = _arguments(params, docs.get(name), lang)
            calls.append(ToolCall(id=f"call_{len(calls)}", name=openai_name(name), arguments=json.dumps(args)))
    if not calls:
        return Answer(content=ABSTENTION, finish_reason="stop")
    return Answer(content=None, tool_calls=tuple(calls), finish_reason="tool_calls")
