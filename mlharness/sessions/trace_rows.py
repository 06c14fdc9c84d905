"""Reading a trace file record by record, each with the line it starts on, and the errors that name that line.

Trace files come as JSON Lines (one record a line), as one JSON array of records (ShareGPT's usual form), or as
JSON values one after another over several lines (pretty-printed JSON Lines). One reader takes all three: it
decodes JSON values one after another from the text and steps into a top-level array, so a record's line is where
its value starts, and a malformed value is reported at the line and column where the decoder stopped. A user who
fixes a trace by hand needs the line, not the record's index: that is why the formats' readers carry it along.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlharness.errors import DatasetError

_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


class TraceError(DatasetError):
    """A trace is malformed: names the file, the line (1-based) of the record and the field at fault.

    Printed as ``trace.jsonl:17: field 'turn': expected a positive integer, got "x"``, the form compilers use, so
    an editor can jump to the line.
    """

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        where = self.path if line is None else f"{self.path}:{line}"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")


def shown(value: Any, limit: int = 60) -> str:
    """A value as the error shows it: its JSON text, shortened (a trace's strings can be whole files)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(path, None, None, "no such trace file") from None
    except IsADirectoryError:
        raise TraceError(path, None, None, "is a directory, not a trace file") from None
    except UnicodeDecodeError as e:
        raise TraceError(path, None, None, f"not UTF-8 text (byte {e.start})") from None


def iter_records(path: Path, text: str | None = None) -> Iterator[tuple[int, Any]]:
    """Each record of the file as ``(line, value)``; a top-level array gives its elements."""
    text = read_text(path) if text is None else text
    pos, line, n = 0, 1, len(text)

    def skip(p: int) -> int:
        while p < n and text[p] in _SPACE:
            p += 1
        return p

    def line_at(p: int) -> int:
        nonlocal pos, line
        line += text.count("\n", pos, p)
        pos = p
        return line

    def decode(p: int) -> tuple[Any, int]:
        try:
            return _DECODER.raw_decode(text, p)
        except json.JSONDecodeError as e:
            raise TraceError(path, e.lineno, None, f"invalid JSON: {e.msg} (column {e.colno})") from None

    p = skip(0)
    while p < n:
        if text[p] == "[":
            p = skip(p + 1)
            if p < n and text[p] == "]":
                p = skip(p + 1)
                continue
            while True:
                start = line_at(p)
                value, p = decode(p)
                yield start, value
                p = skip(p)
                if p < n and text[p] == ",":
                    p = skip(p + 1)
                    continue
                if p < n and text[p] == "]":
                    p = skip(p + 1)
                    break
                raise TraceError(path, line_at(min(p, n)), None, "invalid JSON: expected ',' or ']' in the array")
        else:
            start = line_at(p)
            value, p = decode(p)
            yield start, value
            p = skip(p)


def read_records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every record, each a JSON object (anything else is named at its line)."""
    out = []
    for line, value in iter_records(path):
        if not isinstance(value, dict):
            raise TraceError(path, line, None, f"expected a JSON object (one record), got {shown(value)}")
        out.append((line, value))
    return out


class Fields:
    """Typed reads of one record's fields, each failure naming the file, the record's line and the field."""

    def __init__(self, path: Path, line: int, row: dict[str, Any], prefix: str = ""):
        self.path, self.line, self.row, self.prefix = path, line, row, prefix

    def error(self, field: str | None, message: str) -> TraceError:
        name = None if field is None else self.prefix + field
        return TraceError(self.path, self.line, name, message)

    def has(self, field: str) -> bool:
        return self.row.get(field) is not None

    def get(self, field: str, default: Any = None) -> Any:
        value = self.row.get(field)
        return default if value is None else value

    def string(self, field: str, *, required: bool = False, nonempty: bool = False) -> str | None:
        value = self.row.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing (a string is required)")
            return None
        if not isinstance(value, str):
            raise self.error(field, f"expected a string, got {shown(value)}")
        if nonempty and not value:
            raise self.error(field, "expected a non-empty string, got \"\"")
        return value

    def integer(self, field: str, *, required: bool = False, minimum: int = 1) -> int | None:
        value = self.row.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing (an integer is required)")
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.error(field, f"expected {what}, got {shown(value)}")
        return value

    def number(self, field: str, *, required: bool = False) -> float | None:
        """A number >= 0 (times, delays)."""
        value = self.row.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing (a number is required)")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
            raise self.error(field, f"expected a number >= 0, got {shown(value)}")
        return float(value)

    def array(self, field: str, *, required: bool = False, nonempty: bool = False) -> list[Any] | None:
        value = self.row.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing (a list is required)")
            return None
        if not isinstance(value, list):
            raise self.error(field, f"expected a list, got {shown(value)}")
        if nonempty and not value:
            raise self.error(field, "expected a non-empty list, got []")
        return value

    def objects(self, field: str, *, required: bool = False, nonempty: bool = False) -> list[dict[str, Any]] | None:
        """A list whose every element is a JSON object (tools, tool calls, messages)."""
        items = self.array(field, required=required, nonempty=nonempty)
        if items is None:
            return None
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.error(f"{field}[{i}]", f"expected an object, got {shown(item)}")
        return items

    def sub(self, field: str, row: dict[str, Any]) -> Fields:
        """The fields of a nested object (``tool_calls[0]``), named with their path in errors."""
        return Fields(self.path, self.line, row, f"{self.prefix}{field}.")


def tool_calls(fields: Fields, field: str = "tool_calls") -> list[dict[str, Any]] | None:
    """An assistant message's ``tool_calls`` in the OpenAI wire form, checked as the MLCommons endpoints reference
    checks them (an id, ``type: function``, a function name, arguments as a JSON string or an object); arguments
    given as an object are written as their JSON text, the form every OpenAI-compatible server takes."""
    calls = fields.objects(field)
    if calls is None:
        return None
    if not calls:
        raise fields.error(field, "expected a non-empty list of tool calls (omit the field for none), got []")
    out = []
    for i, call in enumerate(calls):
        f = fields.sub(f"{field}[{i}]", call)
        call_id = f.string("id", required=True, nonempty=True)
        if call.get("type") != "function":
            raise f.error("type", f"expected \"function\", got {shown(call.get('type'))}")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise f.error("function", f"expected an object with 'name' and 'arguments', got {shown(fn)}")
        ff = f.sub("function", fn)
        name = ff.string("name", required=True, nonempty=True)
        args = fn.get("arguments")
        if isinstance(args, dict):
            args = json.dumps(args, ensure_ascii=False)
        elif not isinstance(args, str):
            raise ff.error("arguments", f"expected a JSON string or an object, got {shown(args)}")
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": args}})
    return out
