"""A lazy registry of ``"module:attr"`` placeholders: listing never imports heavy frameworks."""

from __future__ import annotations

import importlib
from typing import Any

from mlharness.errors import MLHarnessError, suggest
from mlharness.extras import hint_for_exception


class Registry:
    def __init__(self, kind: str, entries: dict[str, str], error: type[MLHarnessError] = MLHarnessError):
        self.kind = kind
        self._entries = dict(entries)
        self._error = error
        self._loaded: dict[str, Any] = {}

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def register(self, name: str, target: str | Any) -> None:
        if isinstance(target, str):
            self._entries[name] = target
        else:
            self._entries[name] = f"{target.__module__}:{target.__qualname__}"
            self._loaded[name] = target

    def get(self, name: str) -> Any:
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._entries:
            raise self._error(f"unknown {self.kind} '{name}'.{suggest(name, self._entries)}")
        module, _, attr = self._entries[name].partition(":")
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as e:
            hint = hint_for_exception(e)
            if hint is None:  # not an optional package: a bug, shown with its traceback
                raise
            raise self._error(f"{self.kind} '{name}' needs a package that is not installed ({e}); {hint}") from e
        for part in attr.split("."):
            obj = getattr(obj, part)
        self._loaded[name] = obj
        return obj
