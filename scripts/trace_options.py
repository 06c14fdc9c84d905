"""Follow a run's options object through one real run: which modules it enters and how often it climbs back up.

    .venv/bin/python scripts/trace_options.py [--steps 400] [--count 32] [--json] [--edges]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python scripts/trace_options.py   # trace another tree

One demo run (Offline, accuracy mode, the embedded ``demo`` manifest, its output in a temporary folder) goes
through the run's entry point, ``run(opts)`` of ``mlharness.run.runner`` (or ``mlharness.loadgen.runner`` in the
layout before the run package existed), in this process, under ``sys.setprofile`` and ``threading.setprofile``.

Definitions (what the figures count):

- A **step** is a Python call whose declared parameters (``co_varnames[:argcount + kwonlyargcount]``) hold the
  run's options: the object given to ``run`` itself, or any instance of its class (``dataclasses.replace``
  copies). Calls outside mlharness count as steps too (``dataclasses.replace`` is one); only the first
  ``--steps`` steps are kept.
- A step's **callee** is the module of the called function (its frame's ``__name__``); its **caller** is the
  module of the nearest mlharness frame above it (``frame.f_back``, skipping frames outside mlharness such as
  ``threading`` or ``contextlib``, which only carry the call).
- **modules**: the distinct mlharness callee modules of the kept steps.
- **climbs**: steps whose callee is in a higher layer (see ``LAYERS``) than their caller: the options went from
  a lower floor back up to a higher one. Calls within one layer never climb.
- **back edges**: steps whose callee module was already entered by an earlier step and is not the caller's
  own module: the options re-enter a module they had already passed through, from elsewhere, whatever the
  layers. ``climbs_back`` (JSON only) counts the steps that are both.

Layers are keyed by each module's home in the layout with ``mlharness/run/`` and ``mlharness/calibration/``,
so that a run traced before and after the move ranks its modules alike (see ``layer``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

# Higher is nearer the command line. The data kinds (mlharness/kinds/) were part of loadgen/ and keep its rank.
LAYERS = {
    "cli": 9, "__main__": 9, "startup": 9, "measurement": 9, "session": 9,
    "report": 8, "submission": 7, "run": 6, "kinds": 5, "calibration": 5, "loadgen": 4,
    "predictors": 3, "agent": 3, "manifest": 2, "tasks": 1,
}
# Before the move, mlharness/loadgen/ also held the run's orchestration and the calibration.
OLD_RUN = {"runner", "plan", "context", "options", "destination", "rundir", "interrupt", "metadata", "factory",
           "pinning", "run_args"}
OLD_CALIBRATION = {"calibrate", "calibrate_dev", "calibrate_tokens", "estimate", "server_bound", "server_probe",
                   "explain", "stated"}


def layer(module: str) -> int | None:
    """The layer rank of an mlharness module, None for a module outside mlharness."""
    parts = module.split(".")
    if parts[0] != "mlharness":
        return None
    if len(parts) == 1:
        return 0
    if parts[-1] == "cli":  # each layer's cli.py belongs to the command line
        return 9
    top = parts[1]
    if top == "loadgen" and len(parts) > 2:
        if parts[2] in OLD_RUN:
            return LAYERS["run"]
        if parts[2] in OLD_CALIBRATION:
            return LAYERS["calibration"]
    return LAYERS.get(top, 0)


@dataclass(frozen=True)
class Step:
    callee: str  # module of the called function
    caller: str | None  # module of the nearest mlharness frame above it; None when there is none
    function: str
    thread: str


@dataclass
class Figures:
    steps: int
    modules: list[str]
    climbs: list[Step]
    back_edges: list[Step]
    climbs_back: int


def count(steps: list[Step]) -> Figures:
    """The figures of the module docstring over steps in the order they were called."""
    entered: set[str] = set()
    modules: list[str] = []
    climbs: list[Step] = []
    back: list[Step] = []
    climbs_back = 0
    for step in steps:
        to, frm = layer(step.callee), (layer(step.caller) if step.caller else None)
        climbed = to is not None and frm is not None and to > frm
        returned = to is not None and step.callee in entered and step.callee != step.caller
        climbs += [step] if climbed else []
        back += [step] if returned else []
        climbs_back += climbed and returned
        if to is not None and step.callee not in entered:
            entered.add(step.callee)
            modules.append(step.callee)
    return Figures(len(steps), modules, climbs, back, climbs_back)


def _module(frame) -> str:
    return frame.f_globals.get("__name__", "?")


def _caller(frame) -> str | None:
    up = frame.f_back
    while up is not None and layer(_module(up)) is None:
        up = up.f_back
    return None if up is None else _module(up)


class Tracer:
    """Records steps from every thread until ``limit`` of them are kept."""

    def __init__(self, opts: object, limit: int):
        self.opts, self.cls, self.limit = opts, type(opts), limit
        self.steps: list[Step] = []
        self._lock = threading.Lock()

    def __call__(self, frame, event, _arg):
        if event != "call" or len(self.steps) >= self.limit:
            return
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        if not n:
            return
        local = frame.f_locals
        for name in code.co_varnames[:n]:
            value = local.get(name)
            if value is self.opts or isinstance(value, self.cls):
                qualname = getattr(code, "co_qualname", code.co_name)  # Python 3.11+
                step = Step(_module(frame), _caller(frame), qualname, threading.current_thread().name)
                with self._lock:
                    if len(self.steps) < self.limit:
                        self.steps.append(step)
                return

    def __enter__(self):
        self._before = sys.getprofile(), threading.getprofile()
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *_exc):
        sys.setprofile(self._before[0])
        threading.setprofile(self._before[1])


def _first(root: Path, *names: str):
    """The first of the named modules whose file is in the tree at root (the layout moves modules between packages).

    Looked up as files, not with the import system: an editable install's finder answers for names the tree on
    PYTHONPATH lacks from the installed checkout, which would mix two layouts in one trace.
    """
    for name in names:
        if root.joinpath(*name.split(".")[1:]).with_suffix(".py").is_file():
            return importlib.import_module(name)
    raise SystemExit(f"error: none of {', '.join(names)} is in {root}")


def _strays(root: Path) -> list[str]:
    """mlharness modules imported from outside root."""
    return sorted(name for name, mod in list(sys.modules.items())
                  if name.split(".")[0] == "mlharness" and getattr(mod, "__file__", None)
                  and not Path(mod.__file__).resolve().is_relative_to(root))


def trace(limit: int, samples: int) -> tuple[list[Step], str]:
    """Run the demo once under the tracer; the kept steps and the runner module's name."""
    import mlharness

    root = Path(mlharness.__file__).resolve().parent
    print(f"mlharness from {root}", file=sys.stderr)
    runner = _first(root, "mlharness.run.runner", "mlharness.loadgen.runner")
    options = _first(root, "mlharness.run.options", "mlharness.loadgen.options")
    with tempfile.TemporaryDirectory(prefix="trace-options-") as tmp:
        # the demo's images are generated into the cache: a fresh one keeps the user's cache untouched
        os.environ["MLHARNESS_CACHE"] = str(Path(tmp) / "cache")
        opts = options.RunOptions(scenario="Offline", mode="accuracy", manifest="demo", count=samples,
                                  output=Path(tmp) / "out", results_root=Path(tmp) / "results")
        with Tracer(opts, limit) as tracer:
            runner.run(opts)
    strays = _strays(root)
    if strays:
        raise SystemExit(f"error: modules imported from outside {root}: {', '.join(strays)}")
    return tracer.steps, runner.__name__


def _edge(step: Step) -> str:
    return f"{step.caller} -> {step.callee}.{step.function} [{step.thread}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400, help="steps kept (default 400)")
    ap.add_argument("--count", type=int, default=32, help="samples the demo run uses (default 32)")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of the text report")
    ap.add_argument("--edges", action="store_true", help="also list every kept step, marking climbs and back edges")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.count < 1:
        ap.error("--steps and --count must be at least 1")
    steps, entry = trace(args.steps, args.count)
    fig = count(steps)
    if args.json:
        print(json.dumps({
            "entry": f"{entry}.run", "steps": fig.steps, "modules": len(fig.modules), "climbs": len(fig.climbs),
            "back_edges": len(fig.back_edges), "climbs_back": fig.climbs_back, "module_list": fig.modules,
            "climb_edges": [_edge(s) for s in fig.climbs], "back_edge_list": [_edge(s) for s in fig.back_edges],
        }))
        return 0
    print(f"entry: {entry}.run; steps kept: {fig.steps}")
    print(f"modules entered: {len(fig.modules)}")
    for name in fig.modules:
        print(f"  [{layer(name)}] {name}")
    print(f"climbs: {len(fig.climbs)}")
    print(f"back edges: {len(fig.back_edges)} ({fig.climbs_back} of them climbs)")
    if args.edges:
        for step in steps:
            marks = [mark for mark, listed in (("climb", fig.climbs), ("back", fig.back_edges))
                     if any(step is other for other in listed)]  # equal steps may be marked differently
            print(f"  {_edge(step)}{'  <- ' + ', '.join(marks) if marks else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
