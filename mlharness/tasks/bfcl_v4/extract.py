"""The model's answer as the MLCommons endpoints reference reads it for BFCL v4 (``FunctionCallExtractor`` of
``evaluation/extractor.py`` and ``BFCLv4Scorer.get_scoring_outputs``), ported line for line.

An answer with tool calls is scored as the JSON list of its calls (``[{"id", "type", "function": {"name",
"arguments"}}]``); one without is scored as its text, which the extractor still reads as calls when it can: a JSON
list of calls, a JSON list of ``{"name", "arguments"}``, or, as a last resort, ``name(key=value, ...)`` text. Text
is only parsed (``json.loads``, ``ast.parse``, ``ast.literal_eval``), never run. Standard library only.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_SKIP_NAMES = frozenset({
    "print", "return", "if", "for", "while", "def", "class", "import", "from", "with", "assert", "raise", "try",
    "except", "len", "str", "int", "float", "list", "dict", "set", "tuple", "type", "isinstance", "range",
    "enumerate", "zip", "map", "filter", "Note", "Example", "Here", "This", "The", "For",
})
_FUNC_START_PATTERN = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def scoring_output(answer: dict[str, Any]) -> str:
    """The text the reference scores for one answer (``{"content", "tool_calls": [{"id", "name", "arguments"}]}``,
    the accuracy log's form): its tool calls as JSON when it has any, else its text."""
    calls = answer.get("tool_calls") or []
    if calls:
        return json.dumps([{"id": c.get("id", ""), "type": "function",
                            "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")}}
                           for c in calls], separators=(",", ":"))
    return (answer.get("reasoning") or "") + (answer.get("content") or "")


def extract(text: str, default: str | None = None) -> str | None:
    """``FunctionCallExtractor.extract``: the calls as JSON ``[{"name", "arguments"}]``, or ``default``."""
    if not text or not isinstance(text, str):
        return default
    text = text.strip()
    if not text:
        return default
    for parse in (_try_parse_tool_calls_json, _try_parse_function_array, _try_parse_text_function_calls):
        result = parse(text)
        if result is not None:
            return result
    return default


def has_native_tool_calls(text: str) -> bool:
    return _try_parse_tool_calls_json(text) is not None


def _try_parse_tool_calls_json(text: str) -> str | None:
    try:
        data = json.loads(text)
        if not isinstance(data, list):
            return None
        calls: list[dict[str, Any]] = []
        for item in data:
            if not isinstance(item, dict):
                return None
            func_data = item.get("function")
            if not isinstance(func_data, dict):
                return None
            name = func_data.get("name", "")
            arguments = func_data.get("arguments", "{}")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except (json.JSONDecodeError, ValueError):
                    pass
            calls.append({"name": name, "arguments": arguments})
        if calls:
            return json.dumps(calls)
    except (json.JSONDecodeError, ValueError, TypeError):
        pass
    return None


def _try_parse_function_array(text: str) -> str | None:
    try:
        data = json.loads(text)
        if not isinstance(data, list):
            return None
        calls: list[dict[str, Any]] = []
        for item in data:
            if not isinstance(item, dict) or "name" not in item:
                return None
            calls.append({"name": item["name"], "arguments": item.get("arguments", {})})
        if calls:
            return json.dumps(calls)
    except (json.JSONDecodeError, ValueError, TypeError):
        pass
    return None


def _find_balanced_parens(text: str, start: int) -> int | None:
    depth = 0
    i = start
    in_single = in_double = False
    while i < len(text):
        ch = text[i]
        if ch == "\\" and (in_single or in_double):
            i += 2
            continue
        if ch == "'" and not in_double:
            in_single = not in_single
        elif ch == '"' and not in_single:
            in_double = not in_double
        elif not in_single and not in_double:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    return i
        i += 1
    return None


def _try_parse_text_function_calls(text: str) -> str | None:
    calls: list[dict[str, Any]] = []
    consumed: list[tuple[int, int]] = []
    for match in _FUNC_START_PATTERN.finditer(text):
        if any(s <= match.start() < e for s, e in consumed):
            continue
        func_name = match.group(1)
        if func_name in _SKIP_NAMES:
            continue
        paren_open = match.end() - 1
        paren_close = _find_balanced_parens(text, paren_open)
        if paren_close is None:
            continue
        consumed.append((paren_open, paren_close + 1))
        args_str = text[paren_open + 1:paren_close].strip()
        if args_str and _looks_like_signature(args_str):
            continue
        calls.append({"name": func_name, "arguments": _parse_arguments_string(args_str)})
    return json.dumps(calls) if calls else None


def _looks_like_signature(args_str: str) -> bool:
    parts = [p.strip() for p in args_str.split(",")]
    return all(re.fullmatch(r"[A-Za-z_]\w*(?:\s*:\s*\w+)?", p) for p in parts if p)


def _parse_arguments_string(args_str: str) -> dict[str, Any]:
    if not args_str:
        return {}
    arguments: dict[str, Any] = {}
    try:
        tree = ast.parse(f"dict({args_str})", mode="eval")
        if isinstance(tree.body, ast.Call):
            for kw in tree.body.keywords:
                if kw.arg is not None:
                    try:
                        arguments[kw.arg] = ast.literal_eval(kw.value)
                    except (ValueError, SyntaxError):
                        arguments[kw.arg] = ast.unparse(kw.value)
    except (SyntaxError, ValueError):
        arguments = {"_raw": args_str}
    return arguments


def bfcl_calls(extracted: str) -> tuple[bool, list[dict[str, Any]]]:
    """``BFCLv4Scorer._score_ast``'s conversion: (whether the answer has calls at all, the calls as bfcl-eval's
    AST checker takes them, ``[{name: arguments}]``, arguments that are not JSON read as ``{}``)."""
    try:
        model_output = json.loads(extracted) if isinstance(extracted, str) else extracted
    except (json.JSONDecodeError, TypeError):
        model_output = []
    out = []
    for call in model_output if isinstance(model_output, list) else []:
        if not isinstance(call, dict) or "name" not in call:
            continue
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, ValueError):
                args = {}
        out.append({call["name"]: args})
    return bool(model_output), out
