"""Module paths that moved, still imported (with a warning, once) by hooks and by ``factory:`` / ``generator:``
strings of manifests written before the move: the session and pipeline kinds' modules joined their packages under
``mlharness/kinds/``. The old name is the same module object as the new one, so what a module registers (a
pipeline stage, say) is registered once."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys

log = logging.getLogger(__name__)

MOVED = {
    "mlharness.sessions": "mlharness.kinds.sessions",
    "mlharness.pipeline": "mlharness.kinds.pipeline",
    "mlharness.predictors.session_oracle": "mlharness.kinds.sessions.oracle",
    "mlharness.predictors.transformers_sessions": "mlharness.kinds.sessions.transformers_engine",
}
_warned: set[str] = set()


def new_name(name: str) -> str | None:
    """Where the module ``name`` is now; None for a module that did not move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201 - importlib protocol
        new = new_name(fullname)
        if new is None or importlib.util.find_spec(new) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec):  # noqa: ANN001, ANN201
        new = new_name(spec.name)
        if spec.name not in _warned:
            _warned.add(spec.name)
            log.warning("%s is now %s; please update the manifest or the import", spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module):  # noqa: ANN001, ANN201
        pass


def install() -> None:
    """Puts the finder first: before the path finder, which would load a second copy of a moved module's file
    under its old name."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
