"""Pydantic's validation errors as one ManifestError that names the file and lists every problem with its field
path (a typo gets a "did you mean"), so one edit can fix them all."""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from mlharness.errors import ManifestError

# pydantic tags the errors of each union branch with the branch's type; they add nothing for the user
_UNION_TAGS = ("str", "int", "HookRef", "DatasetManifest", "function-after[_known_dtype(), str]")


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_TAGS:
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "<top level>"


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the last key of ``loc`` (to suggest valid keys for a typo)."""
    current: Any = root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            if isinstance(current, type) and issubclass(current, BaseModel):
                continue
            return None
        current = _first_model(current.model_fields[part].annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _first_model(arg)
            if found is not None:
                return found
    return None


def _shadowed(loc: tuple[Any, ...], all_locs: list[tuple[Any, ...]]) -> bool:
    """A union branch that rejected the value's type outright (``dataset.str``) while another branch of the
    same union got further (``dataset.DatasetManifest.lod``): the deeper error is the one that helps."""
    if not loc or loc[-1] not in _UNION_TAGS:
        return False
    head = loc[:-1]
    return any(len(o) > len(loc) and o[: len(head)] == head and o[len(head)] != loc[-1] for o in all_locs)


def format_validation(path: Path, root: type[BaseModel], err: ValidationError) -> ManifestError:
    problems = []
    seen = set()
    errors = err.errors()
    all_locs = [tuple(e["loc"]) for e in errors]
    for e in errors:
        loc = tuple(e["loc"])
        if _shadowed(loc, all_locs):
            continue
        field_path = _loc_to_path(loc)
        if e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "extra_forbidden":
            owner = _model_at(root, loc)
            known = list(owner.model_fields) if owner else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            msg = "unknown key" + (f"; did you mean '{close[0]}'?" if close else "")
            if known and not close:
                msg += f"; expected one of: {', '.join(known)}"
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if "input" in e and e["type"] not in ("value_error",) and not isinstance(e["input"], dict | list):
                msg += f" (got {e['input']!r})"
        if (field_path, msg) in seen:
            continue
        seen.add((field_path, msg))
        problems.append((field_path, msg))
    # union branches produce one error per branch; keep the most specific ones
    first_field, first_msg = problems[0]
    if len(problems) == 1:
        return ManifestError(path, first_field, first_msg)
    rest = "; ".join(f"'{f}': {m}" for f, m in problems[1:])  # every problem, so one edit fixes them all
    return ManifestError(path, first_field, f"{first_msg}. Also {rest}")
