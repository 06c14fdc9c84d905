"""The registry of data kinds: the built-in rows, the rows other packages register by entry point, and those a
program registers by :func:`register`. The run, the plan and the report ask here by name; only the kind's own
package knows what its functions do.

A package adds a kind without a change to mlharness by naming its row in its ``pyproject.toml``::

    [project.entry-points."mlharness.kinds"]
    toy = "toykind.kind:KIND"

The entry point's name is the kind's name (what ``response.kind`` or ``inputs[0].type`` says in a manifest); it is
imported the first time a manifest names it. A built-in kind's name cannot be taken by another."""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from functools import cache
from typing import Any

from mlharness.errors import ManifestError, MLHarnessError, suggest
from mlharness.kinds.base import Kind

GROUP = "mlharness.kinds"

# name -> "module:attribute" of its Kind row, imported when first asked for
BUILTIN: dict[str, str] = {
    "tensor": "mlharness.kinds.tensor.kind:KIND",
    "tokens": "mlharness.kinds.tokens.kind:KIND",
    "video": "mlharness.kinds.video.kind:KIND",
    "session": "mlharness.kinds.sessions.kind:KIND",
    "pipeline": "mlharness.kinds.pipeline.kind:KIND",
    "chat": "mlharness.kinds.chat.kind:KIND",
    "graph": "mlharness.kinds.graph.kind:KIND",
    "jagged": "mlharness.kinds.jagged.kind:KIND",
}
# the built-in kinds a manifest's response.kind may name (the others are inputs alone); a registered kind says
# by its row (Kind.responds)
BUILTIN_RESPONSES = ("tensor", "tokens", "video", "session", "pipeline")
# the built-in kinds an inputs[0].type may name (a tensor input is LoadGen's adapter's own)
BUILTIN_INPUTS = ("session", "pipeline", "chat", "graph", "jagged")

_lock = threading.Lock()
_registered: dict[str, Kind] = {}
_loaded: dict[str, Kind] = {}


class KindError(MLHarnessError):
    """A kind that cannot be found or loaded, or a row that breaks the interface."""


@cache
def _entry_points() -> dict[str, Any]:
    """The installed packages' entry points of :data:`GROUP`, by name (read once per process)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=GROUP)}


def register(kind: Kind) -> Kind:
    """Adds ``kind`` for this process (a program's own kind, a test's); returns it."""
    if not isinstance(kind, Kind):
        raise KindError(f"register() takes a mlharness.kinds.base.Kind, got {type(kind).__name__}")
    if kind.name in BUILTIN:
        raise KindError(f"kind '{kind.name}' is built in; a registered kind takes a name of its own")
    with _lock:
        _registered[kind.name] = kind
        _loaded.pop(kind.name, None)
    return kind


def unregister(name: str) -> None:
    """Takes back a kind :func:`register` added (a test cleaning up)."""
    with _lock:
        _registered.pop(name, None)
        _loaded.pop(name, None)


def names() -> list[str]:
    """Every kind's name: built in, registered, and installed by entry point (none is imported)."""
    return sorted(set(BUILTIN) | set(_registered) | set(_entry_points()))


def response_names() -> list[str]:
    """The names ``response.kind`` may take: the built-in response kinds, and every other kind that responds
    (an entry point's row is imported to know)."""
    others = [n for n in names() if n not in BUILTIN and get(n).responds]
    return sorted(set(BUILTIN_RESPONSES) | set(others))


def _load(name: str, target: str, where: str) -> Kind:
    module, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise KindError(f"kind '{name}' ({where} '{target}') cannot be loaded: {e}") from e
    if not isinstance(obj, Kind) or obj.name != name:
        raise KindError(f"kind '{name}' ({where} '{target}') is not a mlharness.kinds.base.Kind named '{name}' "
                        f"(got {type(obj).__name__} {getattr(obj, 'name', '')!r})")
    return obj


def get(name: str) -> Kind:
    """The row of kind ``name``; KindError names the kinds there are when none has it."""
    with _lock:
        if name in _loaded:
            return _loaded[name]
        if name in _registered:
            return _registered[name]
    if name in BUILTIN:
        kind = _load(name, BUILTIN[name], "built in as")
    elif name in _entry_points():
        ep = _entry_points()[name]
        kind = _load(name, ep.value, f"entry point of {ep.dist.name if ep.dist else 'a package'},")
    else:
        raise KindError(f"unknown data kind '{name}'.{suggest(name, names())}")
    with _lock:
        _loaded[name] = kind
    return kind


def find(name: str) -> Kind | None:
    """The row of kind ``name``, or None when there is no such kind."""
    return get(name) if name in names() else None


def data_kind(model: Any) -> Kind:
    """The row of a manifest's model, by its ``response.kind`` (the schema admits only :func:`response_names`)."""
    return get(model.response.kind)


def input_of(spec_type: str | None) -> Kind | None:
    """The kind whose input an ``inputs[0].type`` names; None for a tensor (or any type no kind reads itself)."""
    if not spec_type or (spec_type in BUILTIN and spec_type not in BUILTIN_INPUTS):
        return None  # known without importing the kind
    kind = find(spec_type)
    return kind if kind is not None and kind.make_input is not None else None


def make_input(ctx: dict[str, Any], manifest: str) -> Any:
    """The InputKind of a run whose context is ``ctx`` (its ``inputs``, ``mode``, ``graph``); None for tensors."""
    specs = ctx.get("inputs") or []
    kind = input_of(specs[0].get("type")) if specs else None
    return kind.make_input(ctx, manifest) if kind is not None else None


def check_inputs(loaded: Any) -> None:
    """A manifest's kinds, before a run starts: its ``response.kind`` is a kind that responds, and each input's
    parameters are as its kind checks them (a pipeline's stage list: its workers, timeouts and visits);
    ManifestError names the file and the field."""
    check_response_kind(loaded.model.response.kind, loaded.path)
    for k, spec in enumerate(loaded.model.inputs):
        kind = input_of(spec.type)
        if kind is not None and kind.check_input is not None:
            kind.check_input(spec.parameters, loaded.path, f"inputs[{k}].parameters")


def check_response_kind(name: str, path: Any = None) -> str:
    """``response.kind`` checked against the kinds there are (ManifestError names the field)."""
    try:
        known = response_names()
    except KindError as e:
        raise ManifestError(path, "response.kind", e.message) from None
    if name not in known:
        raise ManifestError(path, "response.kind", f"unknown kind '{name}'.{suggest(name, known)}")
    return name


def _named(field: str) -> list[Any]:
    """Each kind's ``field`` function ("module:function"), in the order of :func:`names`, imported now."""
    out = []
    for name in names():
        target = getattr(get(name), field)
        if target is not None:
            module, _, attr = target.partition(":")
            out.append(getattr(importlib.import_module(module), attr))
    return out


def report_sections() -> list[Any]:
    """Each kind's section of the HTML report (a report is being written)."""
    return _named("report")


def run_rows(outdir: Any) -> list[tuple[str, str]]:
    """The rows each kind adds to what ``mlharness run`` prints for the run in ``outdir`` (none for most)."""
    return [row for rows in _named("rows") for row in rows(outdir)]
