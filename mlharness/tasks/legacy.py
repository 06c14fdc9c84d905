"""Module paths of the flat ``mlharness.tasks`` layout (``mlharness.tasks.vision``, ``mlharness.tasks.squad_synth``,
...), still accepted with a warning in hooks and in ``generator:`` / ``factory:`` strings of older manifests."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import sys

log = logging.getLogger(__name__)

PACKAGE = "mlharness.tasks"

# Module paths of the flat layout, still accepted (with a warning) in hooks (`from mlharness.tasks import vision`)
# and in `generator:` / `factory:` strings of manifests written for it.
LEGACY_MODULES = {
    "vision": "imagenet.preprocess", "imagenet_synth": "imagenet.synth", "resnet50_onnx": "imagenet.resnet50_onnx",
    "resnet50_torch": "imagenet.resnet50_torch", "imagenet_oracle_frameworks": "imagenet.oracle_frameworks",
    "squad_post": "squad.postprocess", "squad_eval": "squad.evaluate", "squad_synth": "squad.synth",
    "bert_torch": "squad.bert_torch", "kits19_dice": "kits19.metric", "kits19_synth": "kits19.synth",
    "kits19_reference": "kits19.prepared", "sliding_window": "kits19.sliding_window",
}  # fmt: skip
# Names the flat modules held that now live in a sibling module of the package that replaced them.
LEGACY_NAMES = {
    "imagenet_synth": ("imagenet.models",), "squad_synth": ("squad.models",), "kits19_synth": ("kits19.models",),
}


def forward_to(package: str, modules: tuple[str, ...]):  # -> a module __getattr__
    """A task package's ``__getattr__``: names of its flat-layout module (``mlharness.tasks.squad`` was one
    module) are looked up in the package's modules, so old hooks keep working."""

    def __getattr__(name: str):  # noqa: ANN202 - module attribute hook
        if name.startswith("__"):
            raise AttributeError(name)
        for module in modules:
            mod = importlib.import_module(f"{package}.{module}")
            if hasattr(mod, name):
                return getattr(mod, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


_seen: dict[str, object] = {}


def legacy_module(name: str):  # noqa: ANN202 - the module that replaced a flat-layout module
    if name in _seen:
        return _seen[name]
    new = f"{PACKAGE}.{LEGACY_MODULES[name]}"
    log.warning("mlharness.tasks.%s is now %s; please update the manifest", name, new)
    module = importlib.import_module(new)
    extra = LEGACY_NAMES.get(name)
    if extra:  # a view of the old module: its new home plus the names that moved to a sibling
        view = type(module)(f"{PACKAGE}.{name}")
        view.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        view.__getattr__ = forward_to(PACKAGE, extra)
        module = view
    _seen[name] = module
    return module


def tasks_getattr(name: str):  # noqa: ANN202 - mlharness.tasks.__getattr__: `from mlharness.tasks import vision`
    if name in LEGACY_MODULES:
        return legacy_module(name)
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


class _LegacyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import mlharness.tasks.vision`` and ``generator: mlharness.tasks.imagenet_synth:fn`` of the flat layout."""

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201 - importlib protocol
        prefix, _, name = fullname.rpartition(".")
        if prefix == PACKAGE and name in LEGACY_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):  # noqa: ANN001, ANN201
        return legacy_module(spec.name.rpartition(".")[2])

    def exec_module(self, module):  # noqa: ANN001, ANN201
        pass


def install() -> None:
    if not any(isinstance(f, _LegacyFinder) for f in sys.meta_path):
        sys.meta_path.append(_LegacyFinder())
