"""YAML from users, read within a budget: file size, nesting depth and the size of the document once its
aliases are expanded are bounded, and a key given twice in one mapping is an error.

PyYAML's safe loader alone accepts "billion laughs" documents (a few hundred bytes of nested aliases that
expand to billions of nodes once anything walks them), recurses until Python's stack runs out on deep nesting,
and keeps the last of two equal keys silently. The budget is checked while the document is composed, node by
node, so a hostile file costs at most the budget, never the expansion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mlharness.fileguard import open_regular

MAX_BYTES = 8 * 1024 * 1024
"""Largest YAML file read (a manifest is a few kilobytes, hooks included)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences, aliases expanded."""
MAX_NODES = 250_000
"""Most nodes (scalars, mappings, sequences) in a document once its aliases are expanded."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLBudgetError(yaml.YAMLError):
    """The document exceeds a budget or repeats a key; ``field`` is the dotted path where it happened."""

    def __init__(self, problem: str, field: str | None, mark: Any = None):
        super().__init__(problem)
        self.problem = problem
        self.field = field
        self.problem_mark = mark


class BudgetLoader(yaml.SafeLoader):
    """A SafeLoader that keeps the budget while composing and refuses duplicate keys."""

    def __init__(self, stream: Any):
        super().__init__(stream)
        self._path: list[str] = []
        self._depth = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded height)

    def _field(self) -> str | None:
        out = ""
        for part in self._path:
            out += part if part.startswith("[") else ("." if out else "") + part
        if len(out) > 80:  # a path 60 levels deep says no more than its ends
            out = f"{out[:50]}...{out[-20:]}"
        return out or None

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if isinstance(index, ScalarNode):
            self._path.append(str(index.value))
        elif isinstance(index, int):
            self._path.append(f"[{index}]")
        else:
            self._path.append("<key>" if parent is not None else "")
        self._depth += 1
        try:
            if self.check_event(AliasEvent):
                anchored = self.anchors.get(self.peek_event().anchor)
                if anchored is not None and id(anchored) not in self._sizes:  # still being composed
                    raise YAMLBudgetError("an alias refers to a node that contains it (a recursive alias)",
                                          self._field(), self.peek_event().start_mark)
            if self._depth > MAX_DEPTH:
                raise YAMLBudgetError(f"nested deeper than {MAX_DEPTH} levels", self._field(),
                                      self.peek_event().start_mark)
            node = super().compose_node(parent, index)
            self._measure(node)
            return node
        finally:
            self._depth -= 1
            self._path.pop()

    def _measure(self, node: Node) -> None:
        key = id(node)
        if key in self._sizes:  # an alias: the node was measured where its anchor is
            size, height = self._sizes[key]
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                self._check_duplicates(node)
                children = [n for pair in node.value for n in pair]
            size, height = 1, 1
            for child in children:
                measured = self._sizes.get(id(child))
                if measured is None:  # an alias to a node still being composed: it contains itself
                    raise YAMLBudgetError("an alias refers to a node that contains it (a recursive alias)",
                                          self._field(), node.start_mark)
                size += measured[0]
                height = max(height, measured[1] + 1)
            self._sizes[key] = (size, height)
        if height + self._depth - 1 > MAX_DEPTH:
            raise YAMLBudgetError(f"nested deeper than {MAX_DEPTH} levels once its aliases are expanded",
                                  self._field(), node.start_mark)
        if size > MAX_NODES:
            raise YAMLBudgetError(f"expands to more than {MAX_NODES:,} nodes once its aliases are expanded "
                                  "(nested aliases, as in a 'billion laughs' document)", self._field(),
                                  node.start_mark)

    def _check_duplicates(self, node: MappingNode) -> None:
        seen: dict[tuple[str, str], Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            k = (key_node.tag, key_node.value)
            if k in seen:
                first = seen[k].start_mark
                where = self._field()
                field = f"{where}.{key_node.value}" if where else str(key_node.value)
                raise YAMLBudgetError(f"duplicate key '{key_node.value}' (first given at line {first.line + 1})",
                                      field, key_node.start_mark)
            seen[k] = key_node


def decode(data: bytes) -> str:
    """UTF-8 (or UTF-16/32 with a byte-order mark, as YAML allows) text; UnicodeDecodeError otherwise."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8")
    return data.decode("utf-8")


def read_manifest_bytes(path: Path, limit: int = MAX_BYTES) -> bytes:
    """At most ``limit`` bytes of ``path``; ValueError when the file is larger, or is not a regular file (a FIFO
    would block the read forever, a device never end it), or cannot be read. The message leaves the path out:
    the caller's error names it."""
    with open_regular(path, "the file", error=ValueError, name_path=False) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"the file is larger than {limit // (1024 * 1024)} MiB; a manifest is a few kilobytes")
    return data


def load(text: str) -> tuple[Any, Node | None]:
    """The document and its composed node tree, within the budget (YAMLError otherwise)."""
    try:
        loader = BudgetLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.reader.ReaderError as e:  # reported by offset: give the line and column instead
        line = text.count("\n", 0, e.position)
        column = e.position - (text.rfind("\n", 0, e.position) + 1)
        character = e.character if isinstance(e.character, str) else chr(e.character)
        raise YAMLBudgetError(f"the character {character!r} is not allowed in YAML text", None,
                              yaml.Mark("", e.position, line, column, None, None)) from None
    return data, node


def describe_error(e: yaml.YAMLError) -> tuple[str | None, str]:
    """(field path or None, 'line L, column C: problem') for a YAML error."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(e, "problem", None) or str(e)
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and cmark is not None and mark is not None and cmark.line != mark.line:
        # an unclosed bracket or quote is reported where parsing failed; name where it was opened too
        problem += f" ({context} at line {cmark.line + 1}, column {cmark.column + 1})"
    return getattr(e, "field", None), f"{where}{problem}"


def undecodable(data: bytes, e: UnicodeDecodeError) -> str:
    """Where a file stops being UTF-8, for an error message."""
    line = data[: e.start].count(b"\n") + 1
    column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
    return f"not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}, column {column}"


def safe_load_file(path: Path) -> Any:
    """A user's YAML file within the budget, for readers that need no node tree. Raises ValueError with a
    one-line reason (size, encoding, syntax, budget, duplicate key)."""
    data = read_manifest_bytes(path)
    try:
        text = decode(data)
    except UnicodeDecodeError as e:
        raise ValueError(undecodable(data, e)) from None
    try:
        return load(text)[0]
    except yaml.YAMLError as e:
        field, problem = describe_error(e)
        raise ValueError(f"field '{field}': {problem}" if field else f"invalid YAML: {problem}") from None
    except RecursionError:
        raise ValueError(f"invalid YAML: nested too deeply (more than {MAX_DEPTH} levels)") from None
