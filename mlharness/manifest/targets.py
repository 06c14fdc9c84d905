"""A manifest's ``module:function`` targets (``model.generator``, ``model.factory``) run as manifest code.

Importing a module runs it, so both the import and the call go through :mod:`mlharness.manifest.hookguard`
(bounded by the ``generator`` deadline, unable to end the process), and every failure is a
:class:`~mlharness.errors.ManifestError` naming the field and the module: never a traceback, never exit 0.
``manifest validate`` imports a module that lives beside the manifest only when trusted to (``--trust``)."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from mlharness.errors import ManifestError, MLHarnessError
from mlharness.manifest import hookguard
from mlharness.manifest.imports import check_target
from mlharness.manifest.loader import LoadedManifest


def beside_manifest(target: str, directory: Path) -> Path | None:
    """The file or folder of ``target``'s top-level module when it lives in the manifest's folder (found
    without running anything), else None (an installed module, or none at all)."""
    top = target.partition(":")[0].split(".")[0]
    if not top:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    folder = Path(directory).resolve()
    for location in [spec.origin, *(spec.submodule_search_locations or [])]:
        if location and location not in ("built-in", "frozen"):
            path = Path(location).resolve()
            if path.is_relative_to(folder):
                return path
    return None


def _guarded(loaded: LoadedManifest, field: str, fn: Any, *args: Any) -> Any:
    seconds, configured = hookguard.deadline(loaded.model.hooks.timeout_s, "generator")
    return hookguard.call_hook(field, str(loaded.path), seconds, fn, *args, configured=configured,
                               deadline_key="generator")


def check_importable(loaded: LoadedManifest, field: str) -> None:
    """``manifest validate``: the target's module imports and defines the function (which is not called)."""
    target = getattr(loaded.model.model, field.partition(".")[2])
    module = target.partition(":")[0]
    try:
        _guarded(loaded, field, check_target, target, loaded.path, field)
    except hookguard.ExitAttempt as e:
        raise ManifestError(loaded.path, field, f"importing module '{module}' {e.explain()}") from None


def run_generator(loaded: LoadedManifest, target: Path) -> Path:
    """Call ``model.generator`` with the path it writes the model to; the path it returns, checked."""
    spec = loaded.model.model.generator
    field = "model.generator"
    module, _, name = spec.partition(":")
    try:
        imported = _guarded(loaded, field, importlib.import_module, module)
    except hookguard.ExitAttempt as e:
        raise ManifestError(loaded.path, field, f"importing module '{module}' {e.explain()}") from None
    except ImportError as e:
        raise ManifestError(loaded.path, field, f"cannot import '{spec}': {e}") from None
    except Exception as e:  # noqa: BLE001 - the module's own code failed; say so with the field
        raise ManifestError(loaded.path, field, f"importing module '{module}' raised {type(e).__name__}: {e}"
                            ) from None
    generate = getattr(imported, name, None)
    if not callable(generate):
        raise ManifestError(loaded.path, field, f"module '{module}' ({getattr(imported, '__file__', '?')}) "
                            f"defines no function '{name}'")
    try:
        result = _guarded(loaded, field, generate, target)
    except MLHarnessError:
        raise
    except hookguard.ExitAttempt as e:
        raise ManifestError(loaded.path, field, f"'{spec}' {e.explain()}") from None
    except Exception as e:  # noqa: BLE001 - a generator's failure is the manifest's, named with its field
        raise ManifestError(loaded.path, field, f"'{spec}' raised {type(e).__name__}: {e}") from None
    if not isinstance(result, str | os.PathLike) or not str(result):
        shown = repr(result) if len(repr(result)) < 80 else f"a {type(result).__name__}"
        raise ManifestError(loaded.path, field, f"'{spec}' returned {shown}; it must return the path of the model "
                            f"it wrote (it was given {target})")
    return Path(result)
