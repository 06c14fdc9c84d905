"""The package's shape: no import cycles between modules, no module past the size a reader takes in, no reach into
another module's private names, and a task that plugs in through one registry line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mlharness"
GENERATED = ("protos",)  # gRPC stubs from scripts/gen_protos.sh
MAX_LINES = 400


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, generated stubs aside."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        if any(part in GENERATED for part in path.relative_to(root).parts):
            continue
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every import of a module of the package, at any depth of the file (function-level and TYPE_CHECKING
    imports included: they are cycles all the same), resolved to the module it names."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for name in names:
                target = resolve(name) if name.split(".")[0] == PACKAGE.name else None
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_another_that_imports_it_back():
    found = cycles(import_graph(modules()))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_finds_a_cycle(tmp_path):
    """The check above can fail: two modules that import each other (one of them only inside a function) and a
    three-module ring are reported, an acyclic package is not."""
    pkg = tmp_path / "mlharness"
    (pkg / "loadgen").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "loadgen" / "__init__.py").write_text("")
    (pkg / "loadgen" / "sut.py").write_text("from mlharness.loadgen.stages import StagedWorkers\n")
    (pkg / "loadgen" / "stages.py").write_text("def f():\n    from mlharness.loadgen import sut\n")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("import mlharness.c\n")
    (pkg / "c.py").write_text("from mlharness.a import x\n")
    (pkg / "d.py").write_text("from mlharness import a\n")
    found = cycles(import_graph(modules(pkg)))
    assert sorted(found) == [["mlharness.a", "mlharness.b", "mlharness.c"],
                             ["mlharness.loadgen.stages", "mlharness.loadgen.sut"]]
    (pkg / "loadgen" / "stages.py").write_text("def f():\n    pass\n")
    (pkg / "c.py").write_text("x = 1\n")
    assert cycles(import_graph(modules(pkg))) == []


def test_no_module_is_longer_than_a_reader_takes_in():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_module_imports_a_private_name_of_another():
    offenders = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE.name):
                offenders += [f"{mod}: from {node.module} import {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert not offenders, offenders


@pytest.mark.parametrize("task", ["imagenet", "squad", "kits19", "openimages", "coco", "cnndm", "generic"])
def test_each_task_is_a_package_with_the_same_modules(task):
    from mlharness.tasks import METRICS, TASKS, cli_modules

    folder = PACKAGE / "tasks" / task
    assert task in TASKS
    assert {"__init__.py", "dataset.py", "synth.py", "models.py", "metric.py", "cli.py"} <= {
        p.name for p in folder.iterdir()}
    assert f"mlharness.tasks.{task}.cli" in cli_modules()
    ns: dict = {}
    exec(compile((folder / "__init__.py").read_text(), str(folder), "exec"), ns)  # noqa: S102 - our own file
    for name, target in ns["METRICS"].items():
        assert name in METRICS.names() and target.startswith(f"mlharness.tasks.{task}.metric:")
        assert METRICS.get(name).name == name


def test_flat_layout_module_paths_still_import():
    """Hooks and generator/factory strings of manifests written for the flat layout keep working."""
    import importlib

    from mlharness.tasks import vision
    from mlharness.tasks.imagenet import preprocess

    assert vision is preprocess
    synth = importlib.import_module("mlharness.tasks.squad_synth")
    assert synth.ensure_oracle_model.__module__ == "mlharness.tasks.squad.models"
    assert synth.write_synthetic_squad.__module__ == "mlharness.tasks.squad.synth"
    from mlharness.tasks import squad

    assert squad.dataset_features.__module__ == "mlharness.tasks.squad.dataset"
    with pytest.raises(AttributeError):
        squad.no_such_name  # noqa: B018 - the attribute access is the test
