"""A manifest's folder is importable: ``model.factory: mymodels:build`` or ``import helpers`` in a hook finds
``mymodels.py`` / ``helpers.py`` beside the manifest without ``PYTHONPATH``. The folder is appended to
``sys.path`` (installed packages keep precedence). ``validate`` checks these imports without building a model or
running a hook: the factory's and generator's modules are imported, a hook's top-level imports are only located."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

from mlharness.errors import ManifestError


def make_importable(directory: Path) -> None:
    """Adds the manifest's folder to ``sys.path``; from then on this process writes no bytecode cache, so importing
    the user's modules leaves no ``__pycache__`` in a folder mlharness did not make."""
    sys.dont_write_bytecode = True
    folder = str(Path(directory).resolve())
    if folder not in sys.path:
        sys.path.append(folder)


def check_target(target: str, manifest: Path, field: str) -> None:
    """Import ``module:function`` and check the function exists (the function is not called)."""
    module, sep, fn = target.partition(":")
    if not sep or not module or not fn:
        raise ManifestError(manifest, field, f"'{target}' is not 'module:function'")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ManifestError(manifest, field, f"cannot import module '{e.name}' (for '{target}'): no such module "
                            f"beside the manifest ({manifest.parent}) or installed") from None
    except Exception as e:  # noqa: BLE001 - the module's own code failed; say so with the field
        raise ManifestError(manifest, field, f"importing '{module}' raised {type(e).__name__}: {e}") from None
    if not callable(getattr(mod, fn, None)):
        raise ManifestError(manifest, field, f"module '{module}' ({getattr(mod, '__file__', '?')}) defines no "
                            f"function '{fn}'")


def missing_imports(source: str) -> list[str]:
    """The top-level modules a hook's source imports that cannot be found (nothing is imported)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # reported by the hook compilation
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    missing = []
    for name in names:
        top = name.split(".")[0]
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
        if not found and top not in missing:
            missing.append(top)
    return missing
