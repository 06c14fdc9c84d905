"""Reading a trace file record by record, each with the line it starts on, and the errors that name that line.

Trace files come as JSON Lines (one record a line), as one JSON array of records (ShareGPT's usual form), or as
JSON values one after another over several lines (pretty-printed JSON Lines). One reader takes all three: it
decodes JSON values one after another from the text and steps into a top-level array, so a record's line is where
its value starts, and a malformed value is reported at the line and column where the decoder stopped. A user who
fixes a trace by hand needs the line, not the record's index: that is why the formats' readers carry it along.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlharness import numbers
from mlharness.errors import DatasetError
from mlharness.fileguard import DATA_FILE_LIMIT, JSON_DEPTH_LIMIT, json_depth, read_bytes_bounded

_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


class TraceError(DatasetError):
    """A trace is malformed: names the file, the line (1-based) of the record and the field at fault.

    Printed as ``trace.jsonl:17: field 'turn': must be a whole number, got 'x'``, the form compilers use, so
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


RECORDED_WHY = "a week: a replay waits out its recorded times"
TURNS_WHY = "turns per session: each resends the whole history"


class TraceNumberError(numbers.TraceNumberError, TraceError):
    """A record's number out of type or range (:mod:`mlharness.numbers`): a TraceError like any other."""


def shown(value: Any, limit: int = 60) -> str:
    """A value as the error shows it: its JSON text, shortened (a trace's strings can be whole files)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path: Path) -> str:
    """The whole trace as text, read through the one door: a FIFO, a device or a folder is refused naming what it
    is, and no more than :data:`~mlharness.fileguard.DATA_FILE_LIMIT` bytes are read."""
    path = Path(path)
    if not os.path.lexists(path):
        raise TraceError(path, None, None, "no such trace file")
    data = read_bytes_bounded(path, "trace file", DATA_FILE_LIMIT, name_path=False,
                              error=lambda m: TraceError(path, None, None, m))
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise TraceError(path, line, None, f"not UTF-8 text (byte 0x{data[e.start]:02x} at column {column})") from None


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def _brackets(text: str) -> bytes:
    """The brackets of the JSON text outside its strings, in order: what
    :func:`~mlharness.fileguard.json_depth` measures, made in a few passes of C (it scans a long text itself at
    a few MB/s). Escaped backslashes and quotes go first, so every quote left opens or closes a string."""
    data = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    data = data.translate(None, _NOT_STRUCTURE)
    return re.sub(rb'"[^"]*"', b"", data).replace(b'"', b"")


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _too_deep_at(text: str) -> int:
    """Where the nesting of arrays and objects first passes :data:`JSON_DEPTH_LIMIT` (strings skipped as
    :func:`~mlharness.fileguard.json_depth` skips them)."""
    depth = 0
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > JSON_DEPTH_LIMIT:
                return m.start()
        elif c in "]}":
            depth -= 1
    return 0


def iter_records(path: Path, text: str | None = None) -> Iterator[tuple[int, Any]]:
    """Each record of the file as ``(line, value)``; a top-level array gives its elements."""
    text = read_text(path) if text is None else text
    pos, line, n = 0, 1, len(text)

    def line_of(p: int) -> int:
        return text.count("\n", 0, p) + 1

    if json_depth(_brackets(text)) > JSON_DEPTH_LIMIT:
        raise TraceError(path, line_of(_too_deep_at(text)), None, f"arrays and objects nest more than "
                         f"{JSON_DEPTH_LIMIT} deep; no trace record nests so deeply, check that it is the right file")

    def skip(p: int) -> int:
        while p < n and text[p] in _SPACE:
            p += 1
        return p

    def line_at(p: int) -> int:
        nonlocal pos, line
        line += text.count("\n", pos, p)
        pos = p
        return line

    def whole_value(a: int, b: int) -> bool:
        """``text[a:b]`` holds one complete JSON value and nothing else."""
        try:
            _value, end = _DECODER.raw_decode(text, a)
        except (json.JSONDecodeError, RecursionError):
            return False
        return end <= b and not text[end:b].strip()

    def invalid(p: int, e: json.JSONDecodeError) -> TraceError:
        """The error for the value starting at ``p``, at the line of the bad text. The decoder reads on over line
        ends (a pretty-printed record spans lines), so a JSON Lines record left unclosed is reported by it only at
        the next record's first character; that case is told by the next line being a whole value by itself, and
        named at the unclosed record instead."""
        at, msg = e.pos, e.msg
        start = text.rfind("\n", 0, at) + 1
        if start > p and text[start:at].strip() == "":
            end = text.find("\n", at)
            end = n if end < 0 else end
            if whole_value(at, end):
                head = text[p:start].rstrip()
                try:
                    _DECODER.raw_decode(head)
                except json.JSONDecodeError as e2:
                    at, msg = min(p + e2.pos, p + len(head)), e2.msg
                else:
                    at, msg = p + len(head), "Expecting ',' delimiter"
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        return TraceError(path, line_of(at), None, f"invalid JSON: {msg} (column {column})")

    def decode(p: int) -> tuple[Any, int]:
        try:
            return _DECODER.raw_decode(text, p)
        except json.JSONDecodeError as e:
            raise invalid(p, e) from None
        except RecursionError:
            raise TraceError(path, line_of(p), None, "arrays and objects nest too deeply to decode") from None

    p = skip(0)
    while p < n:
        if text[p] == "[":
            p = skip(p + 1)
            if p < n and text[p] == "]":
                p = skip(p + 1)
                continue
            while True:
                start = line_at(p)
                value, end = decode(p)
                yield start, value
                p = skip(end)
                if p < n and text[p] == ",":
                    p = skip(p + 1)
                    continue
                if p < n and text[p] == "]":
                    p = skip(p + 1)
                    break
                # the comma is missing after the value just read, not where the next one starts
                raise TraceError(path, line_of(end), None, "invalid JSON: expected ',' or ']' after this value "
                                 "in the array")
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

    def integer(self, field: str, *, required: bool = False, minimum: int = 1, maximum: int | None = None,
                why: str = "") -> int | None:
        """A whole number in ``[minimum, maximum]`` (:func:`mlharness.numbers.check`)."""
        value = self.row.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing (an integer is required)")
            return None
        if isinstance(value, float):  # JSON's 2.0 is a typo for a count, not two
            raise self.source(field).fail(f"must be a whole number, got {shown(value)}")
        return numbers.check(value, self.source(field), integer=True, minimum=minimum, maximum=maximum,
                             high_why=why)

    def number(self, field: str, *, required: bool = False, maximum: float | None = None, unit: str = "",
               why: str = "") -> float | None:
        """A finite number >= 0 (times, delays), at most ``maximum`` (:func:`mlharness.numbers.check`)."""
        value = self.row.get(field)
        if value is None:
            if required:
                raise self.error(field, "missing (a number is required)")
            return None
        return float(numbers.check(value, self.source(field), minimum=0, maximum=maximum, unit=unit, high_why=why))

    def source(self, field: str) -> numbers.Source:
        """Where a number of this record comes from: the file, the line and the field."""
        return numbers.trace(self.path, self.line, self.prefix + field, TraceNumberError)

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
