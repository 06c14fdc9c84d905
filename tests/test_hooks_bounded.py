"""A manifest's code is bounded: a hook (or ``model.generator``) that runs past its deadline ends the run with exit 3
naming it; one that calls ``sys.exit()`` or ``os._exit()`` never yields exit 0 without a result; an ``unload`` that
raises fails the run; ``manifest validate`` imports a module beside the manifest only with ``--trust``.

Every case runs the real CLI in a subprocess with a timeout, on the toy ``echo`` predictor (no model, no framework).
:data:`HOSTILE_HOOK_CASES` is plain data, so a battery elsewhere can run the same cases."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlharness.manifest import hookguard, schema
from mlharness.manifest.hooks import HookSet
from mlharness.manifest.loader import load_manifest
from tests.helpers.toy_manifest import toy_manifest

CASE_TIMEOUT_S = 60  # a hang fails the case through the subprocess timeout, never hangs the suite

BASE: dict[str, Any] = toy_manifest(warmup=0)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the hooks) as ``|`` blocks, the way people write manifests."""


_BlockDumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                                  style="|" if "\n" in s else None))


def manifest(*changes: tuple[tuple[str, ...], Any]) -> str:
    """The base manifest with each ``(path, value)`` set (a missing last key is added)."""
    m = copy.deepcopy(BASE)
    for path, value in changes:
        node: Any = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return yaml.dump(m, Dumper=_BlockDumper, sort_keys=False)


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


RUN = ("run", "--manifest", "{manifest}", "--scenario", "Offline", "--mode", "accuracy", "--count", "4",
       "--output", "{output}", "--no-progress")
VALIDATE = ("manifest", "validate", "{manifest}")
TRUSTED = (*VALIDATE, "--trust")
EXITS = "manifest code must return or raise an exception, never end the process"
PAST = "past its deadline of 1 s"


@dataclass(frozen=True)
class HookCase:
    """One hostile manifest: its text, further files beside it, the command (``{manifest}`` and ``{output}`` are
    filled in), the exit status and the texts the output must hold (``{manifest}`` filled in too)."""

    id: str
    manifest: str
    args: tuple[str, ...] = RUN
    rc: int = 3
    expect: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    partial: bool = False  # the run's partial output is kept as <output>.failed-<time>


def _gen(case_id: str, source: str, args: tuple[str, ...], rc: int, *expect: str) -> HookCase:
    module = f"gen_{case_id}"
    return HookCase(case_id, manifest(
        (("model",), {"graph_path": "model.bin", "generator": f"{module}:make"})), args, rc,
        ("field 'model.generator'", *expect), {f"{module}.py": src(source)})


HOSTILE_HOOK_CASES: list[HookCase] = [
    # -- sys.exit / os._exit at module level: refused while the hooks are compiled (exit 2)
    HookCase("module_sys_exit", manifest((("postprocess",), src("""
        import sys
        sys.exit(0)
        def postprocess(ctx, outputs):
            return outputs[0]
        """))), rc=2, expect=("hook 'postprocess' of {manifest}, line 2", "called sys.exit(0)", EXITS)),
    HookCase("module_os_exit", manifest((("dataset", "init"), src("""
        import os
        os._exit(0)
        def init(count):
            return 8
        """))), rc=2, expect=("hook 'init' of {manifest}, line 2", "called os._exit(0)")),
    # -- before the LoadGen test: reported like an exception in that hook (exit 2)
    HookCase("init_sys_exit", manifest((("dataset", "init"), src("""
        import sys
        def init(count):
            sys.exit(0)
        """))), rc=2, expect=("hook 'init' of {manifest}, line 3", "called sys.exit(0)")),
    # -- in the LoadGen test: the run fails (exit 3), naming the hook and its line, its logs kept
    HookCase("preprocess_sys_exit", manifest((("preprocess",), src("""
        import sys
        def preprocess(ctx, index):
            sys.exit(0)
        """))), expect=("hook 'preprocess' of {manifest}, line 3", "called sys.exit(0)", EXITS), partial=True),
    HookCase("preprocess_os_exit", manifest((("preprocess",), src("""
        import os
        def preprocess(ctx, index):
            os._exit(0)
        """))), expect=("hook 'preprocess' of {manifest}, line 3", "called os._exit(0)"), partial=True),
    HookCase("postprocess_sys_exit", manifest((("postprocess",), src("""
        import sys
        def postprocess(ctx, outputs):
            raise SystemExit
        """))), expect=("hook 'postprocess' of {manifest}, line 3", "called sys.exit(None)"), partial=True),
    HookCase("postprocess_os_exit", manifest((("postprocess",), src("""
        import os
        def postprocess(ctx, outputs):
            os._exit(0)
        """))), expect=("hook 'postprocess' of {manifest}, line 3", "called os._exit(0)"), partial=True),
    HookCase("postprocess_posix_exit_caught", manifest((("postprocess",), src("""
        import posix
        def postprocess(ctx, outputs):
            try:
                posix._exit(0)
            except BaseException:
                pass
            return outputs[0]
        """))), expect=("hook 'postprocess' of {manifest}", "called os._exit(0)"), partial=True),
    HookCase("load_os_exit", manifest((("dataset", "load"), src("""
        import os
        def load(sample_list):
            os._exit(0)
        """))), expect=("hook 'load' of {manifest}, line 3", "called os._exit(0)"), partial=True),
    # -- teardown hooks: an exception fails the run (exit 3) instead of being swallowed
    HookCase("unload_raises", manifest((("dataset", "unload"), src("""
        def unload(sample_list):
            raise ValueError("cannot free")
        """))), expect=("hook 'unload' of {manifest}, line 2", "ValueError: cannot free"), partial=True),
    HookCase("unload_os_exit", manifest((("dataset", "unload"), src("""
        import os
        def unload(sample_list):
            os._exit(0)
        """))), expect=("hook 'unload' of {manifest}, line 3", "called os._exit(0)"), partial=True),
    HookCase("after_postprocess_raises", manifest((("after_postprocess",), src("""
        def after_postprocess(ctx):
            raise RuntimeError("report not written")
        """))), expect=("hook 'after_postprocess' of {manifest}, line 2", "RuntimeError: report not written"),
        partial=True),
    # -- hooks past their deadline: the run ends with exit 3 within seconds, naming the hook
    HookCase("preprocess_sleeps", manifest((("hooks",), {"timeout_s": 1}), (("preprocess",), src("""
        import time
        def preprocess(ctx, index):
            time.sleep(600)
        """))), expect=("hook 'preprocess' of {manifest}", PAST, "field 'hooks.timeout_s'"), partial=True),
    HookCase("postprocess_sleeps", manifest((("hooks",), {"timeout_s": {"postprocess": 1}}), (("postprocess",), src("""
        import time
        def postprocess(ctx, outputs):
            time.sleep(600)
        """))), expect=("hook 'postprocess' of {manifest}", PAST, "field 'hooks.timeout_s'"), partial=True),
    HookCase("init_sleeps", manifest((("hooks",), {"timeout_s": {"init": 1}}), (("dataset", "init"), src("""
        import time
        def init(count):
            time.sleep(600)
        """))), expect=("hook 'init' of {manifest}", PAST)),
    HookCase("module_level_sleeps", manifest((("hooks",), {"timeout_s": {"module": 1}}), (("postprocess",), src("""
        import time
        time.sleep(600)
        def postprocess(ctx, outputs):
            return outputs[0]
        """))), expect=("hook 'postprocess' of {manifest}", "its module-level code is still running", PAST)),
    # -- hooks.timeout_s itself is checked
    HookCase("timeout_zero", manifest((("hooks",), {"timeout_s": 0})), VALIDATE, 2,
             ("field 'hooks.timeout_s'", "must be > 0 s")),
    HookCase("timeout_unknown_hook", manifest((("hooks",), {"timeout_s": {"preproces": 5}})), VALIDATE, 2,
             ("field 'hooks.timeout_s'", "Did you mean 'preprocess'?")),
    # -- model.generator: validate imports a module beside the manifest only with --trust
    _gen("validate_untrusted", "import sys\nsys.exit(0)\ndef make(path):\n    return path\n", VALIDATE, 0,
         "NOT imported", "--trust"),
    _gen("validate_sys_exit", "import sys\nsys.exit(0)\ndef make(path):\n    return path\n", TRUSTED, 2,
         "importing module 'gen_validate_sys_exit' called sys.exit(0)"),
    _gen("validate_os_exit", "import os\nos._exit(0)\ndef make(path):\n    return path\n", TRUSTED, 2,
         "importing module 'gen_validate_os_exit' called os._exit(0)"),
    _gen("validate_raises", "raise RuntimeError('needs a GPU')\n", TRUSTED, 2, "gen_validate_raises",
         "RuntimeError: needs a GPU"),
    # -- model.generator at run time: raises, exits or returns no path -> exit 2 naming it
    _gen("generator_returns_none", "def make(path):\n    return None\n", RUN, 2,
         "'gen_generator_returns_none:make' returned None"),
    _gen("generator_sys_exit", "import sys\ndef make(path):\n    sys.exit(0)\n", RUN, 2,
         "'gen_generator_sys_exit:make' called sys.exit(0)"),
    _gen("generator_os_exit", "import os\ndef make(path):\n    os._exit(0)\n", RUN, 2,
         "'gen_generator_os_exit:make' called os._exit(0)"),
    _gen("generator_raises", "def make(path):\n    raise OSError('disk full')\n", RUN, 2,
         "'gen_generator_raises:make' raised OSError: disk full"),
]


def write_case(case: HookCase, folder: Path) -> tuple[Path, Path]:
    """The case's manifest and files in ``folder``; (manifest, output)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.bin").write_bytes(b"placeholder: the echo predictor never reads it")
    path = folder / "m.yaml"
    path.write_text(case.manifest)
    for name, text in case.files.items():
        (folder / name).write_text(text)
    return path, folder / "out"


def cli(folder: Path, args: list[str], **popen: Any) -> Any:
    env = dict(os.environ, MLHARNESS_CACHE=str(folder / "cache"))
    env.pop("MLHARNESS_MANIFEST_PATH", None)
    cmd = [sys.executable, "-m", "mlharness.cli", *args]
    if popen:
        return subprocess.Popen(cmd, cwd=folder, env=env, text=True, **popen)
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)


@pytest.mark.parametrize("case", HOSTILE_HOOK_CASES, ids=[c.id for c in HOSTILE_HOOK_CASES])
def test_hostile_hook(tmp_path: Path, case: HookCase) -> None:
    path, out = write_case(case, tmp_path / case.id)
    args = [a.replace("{manifest}", str(path)).replace("{output}", str(out)) for a in case.args]
    started = time.monotonic()
    result = cli(path.parent, args)
    wall = time.monotonic() - started
    text = result.stdout + result.stderr
    assert result.returncode == case.rc, f"rc={result.returncode}\n{text}"
    assert "Traceback" not in text, text
    for needle in case.expect:
        assert needle.replace("{manifest}", str(path)) in text, f"{needle!r} not in:\n{text}"
    if case.rc != 0:
        assert "error:" in result.stderr, text
        assert not out.exists(), "a failed run committed a result"
        assert list(out.parent.glob(".out.partial-*")) == [], "a staging folder was left behind"
        assert bool(list(out.parent.glob("out.failed-*"))) == case.partial, sorted(out.parent.iterdir())
    if PAST in case.expect:
        assert wall < 30, f"the deadline of 1 s ended the run after {wall:.1f} s"


def test_a_well_behaved_generator_validates_with_trust_and_runs(tmp_path: Path) -> None:
    """The gate is only on importing: a trusted module beside the manifest is checked, and the run uses it."""
    case = _gen("good", "from pathlib import Path\ndef make(path):\n    Path(path).write_text('x')\n    return path\n",
                TRUSTED, 0)
    path, out = write_case(case, tmp_path)
    checked = cli(tmp_path, ["manifest", "validate", str(path), "--trust"])
    assert checked.returncode == 0 and "NOT imported" not in checked.stdout, checked.stdout + checked.stderr
    missing = case.manifest.replace("gen_good:make", "gen_good:nothing")
    path.write_text(missing)
    checked = cli(tmp_path, ["manifest", "validate", str(path), "--trust"])
    assert checked.returncode == 2 and "defines no function 'nothing'" in checked.stderr, checked.stderr
    path.write_text(case.manifest)
    ran = cli(tmp_path, [a.replace("{manifest}", str(path)).replace("{output}", str(out)) for a in RUN])
    assert ran.returncode == 0, ran.stderr
    assert (out / "mlharness_run.json").is_file()


def test_interrupting_a_hook_still_stops_the_run(tmp_path: Path) -> None:
    """Ctrl-C during a hook on the main thread is not taken for the hook's own exit: exit 130, at once."""
    marker = tmp_path / "init-started"
    case = HookCase("interrupted", manifest((("dataset", "init"), src(f"""
        import time
        from pathlib import Path
        def init(count):
            Path({str(marker)!r}).write_text("")
            time.sleep(600)
        """))))
    path, out = write_case(case, tmp_path)
    proc = cli(tmp_path, [a.replace("{manifest}", str(path)).replace("{output}", str(out)) for a in RUN],
               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + CASE_TIMEOUT_S
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate(timeout=5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr


# ------------------------------------------------------------------------------------------- the guard itself

GUARD_SCRIPT = r'''
import os, sys, threading
from mlharness.manifest import hookguard

hookguard.install_exit_guard()
what = sys.argv[1]
if what == "outside":  # mlharness's or a library's os._exit, outside manifest code: the real one
    os._exit(7)
if what == "other_thread":  # a hook runs on the main thread while another thread exits: the real one
    def hook():
        threading.Thread(target=lambda: os._exit(8)).start()
        threading.Event().wait(30)
    hookguard.call_hook("init", "m.yaml", 60, hook)
if what == "forked_child":  # a hook forks (multiprocessing does); the child's os._exit is its own
    def hook():
        pid = os.fork()
        if pid == 0:
            os._exit(5)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    sys.exit(hookguard.call_hook("preprocess", "m.yaml", 60, hook))
if what == "hard_exit_in_hook":  # mlharness's own exit paths end the process even inside a hook
    hookguard.call_hook("init", "m.yaml", 60, lambda: hookguard.hard_exit(9))
sys.exit(1)
'''


@pytest.mark.parametrize(("what", "rc"), [("outside", 7), ("other_thread", 8), ("forked_child", 5),
                                         ("hard_exit_in_hook", 9)])
def test_the_real_exit_is_kept_outside_manifest_code(tmp_path: Path, what: str, rc: int) -> None:
    script = tmp_path / "guard.py"
    script.write_text(GUARD_SCRIPT)
    result = subprocess.run([sys.executable, str(script), what], capture_output=True, text=True, timeout=60)
    assert result.returncode == rc, result.stderr


def test_deadlines_cover_every_hook_and_the_manifest_sets_them(tmp_path: Path) -> None:
    assert set(hookguard.DEFAULT_DEADLINES_S) == {*schema.DATASET_ALL_HOOK_KEYS, *schema.MODEL_HOOK_KEYS,
                                                  "module", "generator"}
    per_sample = max(hookguard.DEFAULT_DEADLINES_S[k] for k in ("sample", "preprocess", "postprocess"))
    assert all(hookguard.DEFAULT_DEADLINES_S[k] > per_sample for k in ("init", "load", "generator", "module"))
    assert hookguard.deadline(None, "init") == (hookguard.DEFAULT_DEADLINES_S["init"], False)
    assert hookguard.deadline(5, "init") == (5.0, True)
    assert hookguard.deadline({"preprocess": 2}, "preprocess") == (2.0, True)
    assert hookguard.deadline({"preprocess": 2}, "init") == (hookguard.DEFAULT_DEADLINES_S["init"], False)
    path = tmp_path / "m.yaml"
    (tmp_path / "model.bin").write_bytes(b"")
    path.write_text(manifest((("hooks",), {"timeout_s": {"postprocess": 2.5}}), (("postprocess",), src("""
        def postprocess(ctx, outputs, indices):
            return outputs[0]
        """))))
    hooks = HookSet(load_manifest(path))
    import inspect

    # the wrapped hook keeps its signature: the pipeline passes indices to a three-parameter postprocess
    assert list(inspect.signature(hooks.get("postprocess")).parameters) == ["ctx", "outputs", "indices"]
    assert hooks.get("postprocess")({}, ["y"], None) == "y"
