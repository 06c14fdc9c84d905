"""The package's shape: no import cycles between modules, no module past the size a reader takes in, no reach into
another module's private names, a task that plugs in through one registry line, layers that point one way, the
run's options kept to the run package and the drivers that start runs, and every package named in the table of
docs/architecture.md."""

from __future__ import annotations

import ast
import re
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


def imports(mod: str, path: Path) -> list[tuple[ast.stmt, list[str]]]:
    """Each import statement of a module, at any depth, with the dotted names it may bind (relative imports
    resolved): ``from a.b import c`` gives ``a.b.c`` and ``a.b``."""
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.append((node, [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node, [f"{base}.{a.name}" for a in node.names] + [base]))
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
        for _node, names in imports(mod, path):
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


def test_moved_module_paths_still_import_as_the_same_modules():
    """Hooks and factory strings written before the session and pipeline kinds got their packages keep working,
    and the old name is the new module itself (a stage registers once)."""
    import importlib

    from mlharness.kinds.pipeline import stage
    from mlharness.kinds.sessions import oracle
    from mlharness.moved import new_name

    assert importlib.import_module("mlharness.pipeline.stage") is stage
    assert importlib.import_module("mlharness.predictors.session_oracle") is oracle
    from mlharness.sessions.model import Session  # the form a hook uses

    assert Session.__module__ == "mlharness.kinds.sessions.model"
    assert new_name("mlharness.pipelines") is None and new_name("mlharness.run.plan") is None


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


# The layers point one way (docs/architecture.md, "Layers"): a package on the left never imports one on the right.
# LoadGen's adapter is below calibration, calibration below the data kinds, the data kinds below the run.
ABOVE_RUN = ("mlharness.measurement", "mlharness.report", "mlharness.submission")
MAY_NOT_IMPORT = {
    "mlharness.run": ABOVE_RUN,
    "mlharness.calibration": (*ABOVE_RUN, "mlharness.run", "mlharness.kinds"),
    # the data kinds (mlharness/kinds/) use calibration's skeletons and LoadGen's adapter, which name none of them
    "mlharness.kinds": (*ABOVE_RUN, "mlharness.run"),
    "mlharness.loadgen": (*ABOVE_RUN, "mlharness.run", "mlharness.calibration", "mlharness.kinds"),
    # a cluster's runs are mlharness processes on their nodes: the executors start command lines, never a run
    "mlharness.cluster": ("mlharness.run", "mlharness.calibration", "mlharness.loadgen"),
}


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


# A module's layer is its package's, except a data kind's report module (its row's ``report``: the kind's section
# of the HTML report and its plots), which is of the report's layer: it may import mlharness.report, and nothing
# below the report imports it (the report finds it through the kinds' registry, by name).
KIND_REPORT = re.compile(r"^mlharness\.kinds\.\w+\.plots$")


def layer_name(module: str) -> str:
    return f"mlharness.report.{module}" if KIND_REPORT.match(module) else module


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{mod} -> {target}" for mod, targets in graph.items() for lower, uppers in MAY_NOT_IMPORT.items()
                  if within(layer_name(mod), lower) for target in targets
                  if any(within(layer_name(target), up) for up in uppers))


def test_layers_point_one_way():
    found = upward_imports(import_graph(modules()))
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_a_kinds_report_module_is_of_the_reports_layer():
    graph = {"mlharness.kinds.toy.plots": {"mlharness.report.plots", "mlharness.kinds.toy.report"},
             "mlharness.kinds.toy.kind": {"mlharness.kinds.toy.plots", "mlharness.calibration.played"},
             "mlharness.kinds.toy.sut": {"mlharness.report.plots"},
             "mlharness.calibration.played": {"mlharness.kinds.toy.report"},
             "mlharness.run.plan": {"mlharness.kinds.registry"}}
    assert upward_imports(graph) == ["mlharness.calibration.played -> mlharness.kinds.toy.report",
                                     "mlharness.kinds.toy.kind -> mlharness.kinds.toy.plots",
                                     "mlharness.kinds.toy.sut -> mlharness.report.plots"]


def test_the_layer_check_finds_an_upward_import(tmp_path):
    """Upward imports at module level, inside a function, relative and as a bare package are reported; downward
    ones and a module whose name only starts like a package's (``runner`` is not ``run``) are not."""
    pkg = tmp_path / "mlharness"
    for sub in ("run", "calibration", "loadgen"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "runner.py").write_text("")
    (pkg / "run" / "plan.py").write_text("from mlharness.loadgen import settings\nfrom ..calibration import est\n")
    (pkg / "calibration" / "est.py").write_text("from mlharness.loadgen.settings import x\nimport mlharness.runner\n")
    (pkg / "loadgen" / "settings.py").write_text("x = 1\n")
    graph = import_graph(modules(pkg))
    assert upward_imports(graph) == []
    (pkg / "loadgen" / "sut.py").write_text("def f():\n    from mlharness.run.plan import y\n")
    (pkg / "loadgen" / "qsl.py").write_text("from ..calibration import est\n")
    (pkg / "calibration" / "probe.py").write_text("from mlharness import run\n")
    assert upward_imports(import_graph(modules(pkg))) == [
        "mlharness.calibration.probe -> mlharness.run",
        "mlharness.loadgen.qsl -> mlharness.calibration",
        "mlharness.loadgen.qsl -> mlharness.calibration.est",
        "mlharness.loadgen.sut -> mlharness.run.plan",
    ]


# The run's options are built by the drivers that start runs and turned into a plan inside mlharness.run; every
# step below takes the plan's parts. Drivers: the command lines (mlharness.cli, any *.cli) and the measurement
# package.
OPTIONS_MODULE = "mlharness.run.options"
OPTIONS_TYPE = "RunOptions"
STARTS_RUNS = ("mlharness.measurement", "mlharness.cli")


def options_importers(mods: dict[str, Path]) -> list[str]:
    """Modules outside ``mlharness.run`` and the drivers that import the options type or its module."""
    found = []
    for mod, path in mods.items():
        if within(mod, "mlharness.run") or mod.endswith(".cli") or any(within(mod, d) for d in STARTS_RUNS):
            continue
        for node, names in imports(mod, path):
            if isinstance(node, ast.ImportFrom) and any(a.name == OPTIONS_TYPE for a in node.names):
                names.append(OPTIONS_TYPE)
            if any(n == OPTIONS_TYPE or within(n, OPTIONS_MODULE) for n in names):
                found.append(f"{mod} (line {node.lineno})")
    return sorted(found)


def test_only_the_run_package_imports_the_run_options():
    found = options_importers(modules())
    assert not found, f"{OPTIONS_TYPE} imported below the run package (take the plan's parts instead):\n" + \
        "\n".join(found)


def test_the_options_check_finds_an_importer(tmp_path):
    """The type imported from any module (a re-export too), the options module imported whole, relatively or
    inside a function are reported; the run package, the drivers (command lines, measurement) and an unrelated
    name are not."""
    pkg = tmp_path / "mlharness"
    for sub in ("run", "loadgen", "measurement", "agent", "submission"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "run" / "options.py").write_text("class RunOptions: ...\n")
    (pkg / "run" / "plan.py").write_text("from mlharness.run.options import RunOptions\n")
    (pkg / "measurement" / "bench.py").write_text("from mlharness.run.runner import RunOptions\n")
    (pkg / "agent" / "backend.py").write_text("def f():\n    from mlharness.run.options import RunOptions\n")
    (pkg / "submission" / "cli.py").write_text("from mlharness.run import options\n")
    (pkg / "cli.py").write_text("from mlharness.run.options import RunOptions\n")
    (pkg / "loadgen" / "settings.py").write_text("from mlharness.run.options import METADATA_FILE as RunOpts\n")
    assert options_importers(modules(pkg)) == ["mlharness.agent.backend (line 2)",
                                               "mlharness.loadgen.settings (line 1)"]
    (pkg / "loadgen" / "settings.py").write_text("from mlharness.run.plan import RunPlan\n")
    (pkg / "agent" / "backend.py").write_text("def f():\n    from mlharness.run.factory import make_predictor\n")
    assert options_importers(modules(pkg)) == []
    (pkg / "loadgen" / "sut.py").write_text("def f():\n    from mlharness.run.runner import RunOptions\n")
    (pkg / "agent" / "client.py").write_text("from ..run import options\n")
    (pkg / "submission" / "steps.py").write_text("import mlharness.run.options\n")
    assert options_importers(modules(pkg)) == ["mlharness.agent.client (line 1)", "mlharness.loadgen.sut (line 2)",
                                               "mlharness.submission.steps (line 1)"]


# The package table of docs/architecture.md ("Layout") names every package (a folder holding __init__.py) as
# `mlharness/<path>/` in its first column. One row `mlharness/tasks/<task>/` stands for every task package
# registered in mlharness.tasks.TASKS; any other package under tasks/ (a helper shared by tasks) has its own row.
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
TASK_ROW = "mlharness/tasks/<task>/"


def package_table(text: str) -> set[str]:
    """The `mlharness/.../` names in the first column of the table under the page's "## Layout" heading."""
    section = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            names.update(part for part in first.split("`")[1::2] if part.startswith("mlharness/") and
                         part.endswith("/"))
    return names


def packages(root: Path = PACKAGE) -> list[str]:
    return sorted(f"{root.name}/{p.parent.relative_to(root).as_posix()}/" for p in root.rglob("__init__.py")
                  if p.parent != root)


def missing_from_table(found: list[str], table: set[str], tasks: tuple[str, ...]) -> list[str]:
    covered = {f"mlharness/tasks/{t}/" for t in tasks} if TASK_ROW in table else set()
    return [p for p in found if p not in table and p not in covered]


def test_every_package_is_in_the_architecture_table():
    from mlharness.tasks import TASKS

    table = package_table(ARCHITECTURE.read_text())
    missing = missing_from_table(packages(), table, TASKS)
    assert not missing, f"packages missing from the table in {ARCHITECTURE.name}: {missing}"
    stale = sorted(table - set(packages()) - {TASK_ROW})
    assert not stale, f"the table in {ARCHITECTURE.name} names packages that do not exist: {stale}"


def test_the_table_check_finds_a_missing_package(tmp_path):
    """A made-up package is reported missing; a task package is covered by the task row only when it is a
    registered task, and not at all without that row."""
    from mlharness.tasks import TASKS

    table = package_table(ARCHITECTURE.read_text())
    pkg = tmp_path / "mlharness"
    for sub in ("executors", "tasks", "tasks/imagenet", "tasks/shared_helpers"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "paths").mkdir()  # a folder without __init__.py is package data, not a package
    found = packages(pkg)
    assert found == ["mlharness/executors/", "mlharness/tasks/", "mlharness/tasks/imagenet/",
                     "mlharness/tasks/shared_helpers/"]
    assert missing_from_table(found, table, TASKS) == ["mlharness/executors/", "mlharness/tasks/shared_helpers/"]
    assert missing_from_table(found, table - {TASK_ROW}, TASKS) == [
        "mlharness/executors/", "mlharness/tasks/imagenet/", "mlharness/tasks/shared_helpers/"]


# What a kind does for a run (its SUT, input, calibration and report plots) is its own: the rest of mlharness reaches
# it through the kind's row (kind.py, which the registry finds by name), never by importing those modules.
KIND_PRIVATE = ("sut", "input", "calibrate", "plots")


def kind_boundary(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for mod, targets in graph.items():
        for target in targets:
            parts = target.split(".")
            if len(parts) > 3 and parts[:2] == ["mlharness", "kinds"] and parts[3] in KIND_PRIVATE \
                    and not within(mod, ".".join(parts[:3])):
                found.append(f"{mod} -> {target}")
    return sorted(found)


def test_a_kinds_sut_input_calibration_and_plots_are_its_own():
    found = kind_boundary(import_graph(modules()))
    assert not found, "imports of a kind's own modules from outside its package:\n" + "\n".join(found)


def test_the_kind_boundary_check_finds_an_import_from_outside():
    graph = {"mlharness.kinds.toy.kind": {"mlharness.kinds.toy.sut", "mlharness.kinds.tensor.kind"},
             "mlharness.kinds.video.kind": {"mlharness.kinds.toy.calibrate"},
             "mlharness.run.runner": {"mlharness.kinds.toy.input", "mlharness.kinds.registry"},
             "mlharness.report.html": {"mlharness.kinds.toy.plots", "mlharness.kinds.toy"}}
    assert kind_boundary(graph) == ["mlharness.kinds.video.kind -> mlharness.kinds.toy.calibrate",
                                    "mlharness.report.html -> mlharness.kinds.toy.plots",
                                    "mlharness.run.runner -> mlharness.kinds.toy.input"]


# LoadGen's adapter alone: settings, the QSL, the base SUT and its batch path, completion, Server queueing,
# interrupts, logs, bounds, pinning. What a data kind adds lives in its package under mlharness/kinds/.
MAX_LOADGEN_MODULES = 12


def kind_names(loadgen: Path) -> list[str]:
    """Where the modules of ``loadgen`` name a data kind: a module named for one of mlharness/kinds/'s packages,
    or a string that is an input kind's type (``"pipeline"``, ``"chat"``, ...)."""
    from mlharness.kinds.registry import BUILTIN

    kinds = {p.name for p in (PACKAGE / "kinds").iterdir() if (p / "__init__.py").is_file()}
    named = set(BUILTIN) - {"tensor"}  # a tensor is what LoadGen's adapter handles itself
    found = []
    for path in sorted(loadgen.glob("*.py")):
        if path.stem in kinds:
            found.append(f"{path.name}: a module named for the '{path.stem}' kind")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in named:
                found.append(f"{path.name}:{node.lineno}: the kind {node.value!r}")
    return found


def test_loadgen_is_the_adapter_alone_and_names_no_kind():
    adapter = sorted(p.name for p in (PACKAGE / "loadgen").glob("*.py") if p.name != "__init__.py")
    assert len(adapter) <= MAX_LOADGEN_MODULES, f"loadgen/ holds {len(adapter)} modules: {adapter}"
    assert not kind_names(PACKAGE / "loadgen")


def test_the_kind_check_finds_a_named_kind(tmp_path):
    (tmp_path / "qsl.py").write_text('def f(spec):\n    return spec.type == "pipeline"\n')
    (tmp_path / "sessions.py").write_text("")
    assert kind_names(tmp_path) == ["qsl.py:2: the kind 'pipeline'", "sessions.py: a module named for the "
                                    "'sessions' kind"]
