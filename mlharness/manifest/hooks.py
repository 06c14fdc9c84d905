"""Compile a manifest's hooks ONCE into one namespace shared by the dataset and model hooks.

MLHarness manifests rely on that sharing: the dataset's ``load`` fills a global that ``preprocess`` reads.
Every hook is compiled under a file name that names the manifest and the hook and is registered with
``linecache``, so a traceback inside a hook shows its source, and errors report the hook's line. Every call of
the manifest's code (module-level code included) goes through :mod:`mlharness.manifest.hookguard`: bounded by
its deadline, and unable to end the process.
"""

from __future__ import annotations

import linecache
import logging
import numbers
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlharness import extras
from mlharness.errors import HookError, ManifestError
from mlharness.fileguard import read_bytes_bounded
from mlharness.manifest import hookguard
from mlharness.manifest.loader import LoadedManifest, SourceInfo
from mlharness.manifest.schema import DATASET_ALL_HOOK_KEYS, MODEL_HOOK_KEYS, HookRef

log = logging.getLogger(__name__)


class HookSet:
    """The compiled hooks of one run. Build it once; call hooks through :meth:`call` or the attributes."""

    def __init__(self, loaded: LoadedManifest, ctx: dict[str, Any] | None = None):
        self.loaded = loaded
        self.manifest = str(loaded.path)
        self.namespace: dict[str, Any] = {
            "__name__": f"mlharness_hooks_{loaded.model.name.replace('-', '_')}",
            "__builtins__": __builtins__,
            # dataset hooks (init/load/unload) take no ctx argument; they read the run's facts from this global
            "ctx": ctx if ctx is not None else {},
        }
        self.functions: dict[str, Callable[..., Any]] = {}  # as the manifest defines them
        self._guarded: dict[str, Callable[..., Any]] = {}  # as the run calls them (hookguard.guarded)
        self._timeout_s = loaded.model.hooks.timeout_s
        hookguard.install_exit_guard()  # before the first line of the manifest's code runs
        # compiled file name -> (hook, first file line, the manifest holding it: a dataset manifest's own hooks
        # are reported at its file, not at the model manifest that named the dataset)
        self._filenames: dict[str, tuple[str, int, str]] = {}
        self._sources: dict[str, str] = {}  # hook -> the manifest that defines it
        self._files_loaded: dict[Path, None] = {}
        if loaded.dataset is not None:
            ds_source = loaded.dataset_source or loaded.source
            prefix = "" if loaded.dataset_source else "dataset."
            for key in DATASET_ALL_HOOK_KEYS:
                self._add(key, getattr(loaded.dataset, key), ds_source, prefix)
        for key in MODEL_HOOK_KEYS:
            self._add(key, getattr(loaded.model, key), loaded.source, "")

    def __contains__(self, name: str) -> bool:
        return name in self.functions

    # -- compilation -------------------------------------------------------------------------------------------
    def _add(self, key: str, hook: str | HookRef | None, source: SourceInfo, prefix: str) -> None:
        if hook is None:
            return
        if isinstance(hook, HookRef):
            self._add_function(key, self._from_file(key, hook, source), source)
            return
        if not hook.strip():
            return
        first_line = source.hook_lines.get(prefix + key, 1)
        filename = f"{source.path}::{key}"
        self._filenames[filename] = (key, first_line, str(source.path))
        linecache.cache[filename] = (len(hook), None, hook.splitlines(keepends=True), filename)
        code = self._compile(key, hook, filename, str(source.path), first_line)
        self._exec(key, code, str(source.path))
        fn = self.namespace.get(key)
        if not callable(fn):
            raise ManifestError(
                source.path, prefix + key, f"the hook's source must define a function named '{key}'"
            )
        self._add_function(key, fn, source)

    def _add_function(self, key: str, fn: Callable[..., Any], source: SourceInfo) -> None:
        seconds, configured = hookguard.deadline(self._timeout_s, key)
        self.functions[key] = fn
        self._sources[key] = str(source.path)
        self._guarded[key] = hookguard.guarded(key, str(source.path), seconds, fn, configured)

    def _compile(self, key: str, text: str, filename: str, manifest: str, first_line: int) -> Any:
        try:
            return compile(text, filename, "exec")
        except SyntaxError as e:
            raise syntax_error(key, manifest, e, first_line) from None
        except (RecursionError, MemoryError):
            raise too_nested(key, manifest) from None

    def _exec(self, key: str, code: Any, where: str) -> None:
        seconds, configured = hookguard.deadline(self._timeout_s, "module")
        try:
            # running the manifest's hooks is the point; its module-level code is watched like a hook call
            hookguard.call_hook(key, where, seconds, exec, code, self.namespace, configured=configured,
                                deadline_key="module")
        except Exception as e:
            raise self.runtime_error(key, e, when="while defining the hook") from e

    def _from_file(self, key: str, ref: HookRef, source: SourceInfo) -> Callable[..., Any]:
        path = (source.path.parent / ref.file).resolve()
        if not path.is_file():
            raise ManifestError(source.path, f"{key}.file", f"hook file {path} does not exist")
        if path not in self._files_loaded:
            text = read_hook_file(source.path, f"{key}.file", path)
            filename = str(path)
            self._filenames[filename] = (key, 1, str(source.path))
            code = self._compile(key, text, filename, str(path), 1)
            self._exec(key, code, str(source.path))
            self._files_loaded[path] = None
        name = ref.function or key
        fn = self.namespace.get(name)
        if not callable(fn):
            raise ManifestError(source.path, f"{key}.function", f"{path} defines no function '{name}'")
        return fn

    # -- invocation --------------------------------------------------------------------------------------------
    def get(self, name: str) -> Callable[..., Any] | None:
        """The hook as the run calls it: watched against its deadline, unable to end the process."""
        return self._guarded.get(name)

    def call(self, name: str, *args: Any) -> Any:
        fn = self._guarded[name]
        try:
            return fn(*args)
        except HookError:
            raise
        except Exception as e:
            raise self.runtime_error(name, e) from e

    def sample_cap(self, ctx: dict[str, Any]) -> int | None:
        """``before_preprocess(ctx)``'s answer: None, or a positive int that caps the sample count (like
        ``--count``); anything else is refused, naming the hook and its manifest."""
        if "before_preprocess" not in self:
            return None
        cap = self.call("before_preprocess", ctx)
        if cap is None:
            return None
        if isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < 1:
            shown = repr(cap) if len(repr(cap)) < 80 else f"{repr(cap)[:80]}..."
            raise HookError("before_preprocess", self._sources.get("before_preprocess", self.manifest),
                            f"before_preprocess(ctx) must return None or a positive int (it caps the number of "
                            f"samples, like --count), got {shown}")
        return int(cap)

    def runtime_error(self, name: str, exc: BaseException, when: str = "") -> HookError:
        """Name the hook and the line inside it where the exception was raised."""
        if isinstance(exc, HookError):  # already names its hook (a caller that wraps every exception)
            return exc
        line = None
        hook = name
        where = ""
        manifest = self._sources.get(name, self.manifest)
        for frame, lineno in traceback.walk_tb(exc.__traceback__):
            filename = frame.f_code.co_filename
            info = self._filenames.get(filename)
            if info is not None:
                hook, line, manifest = info[0], lineno, info[2]
                if "::" in filename:  # inline source: also give the line in the YAML file
                    where = f" (hook line {lineno}, file line {info[1] + lineno - 1})"
                else:
                    where = f" ({filename}, line {lineno})"
        if isinstance(exc, hookguard.ExitAttempt):
            detail = f"{when}: {exc.explain()}" if when else exc.explain()
        else:
            detail = f"raised {when + ': ' if when else ''}{type(exc).__name__}: {exc}"
            hint = extras.hint_for_exception(exc)  # a missing optional package: the extra that brings it
            if hint:
                where += f"; {hint}"
        if log.isEnabledFor(logging.DEBUG):
            log.debug("hook %s failed:\n%s", hook, "".join(traceback.format_exception(exc)))
        return HookError(hook, manifest, f"{detail}{where}", line=line)

def syntax_error(key: str, where: str, e: SyntaxError, first_line: int) -> HookError:
    """A hook's syntax error with its line in the hook and in the file that holds it."""
    line = e.lineno or 0
    if line < 1:  # e.g. a NUL byte: Python names no line
        return HookError(key, where, str(e.msg))
    return HookError(key, where, f"{e.msg} (hook line {line}, file line {first_line + line - 1})", line=line)


def too_nested(key: str, where: str) -> HookError:
    return HookError(key, where, "the source is nested too deeply for Python to compile")


HOOK_FILE_LIMIT = 64 << 20
"""Most bytes of a hook file (Python source beside the manifest: kilobytes; a larger one is the wrong file)."""


def read_hook_file(manifest: Path, field: str, path: Path) -> str:
    """The text of a hook file named by ``field`` of ``manifest``: UTF-8 Python source."""
    data = read_bytes_bounded(path, "hook file", HOOK_FILE_LIMIT, error=lambda m: ManifestError(manifest, field, m))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        from mlharness.manifest.safeyaml import undecodable

        raise ManifestError(manifest, field, f"hook file {path} is {undecodable(data, e)}") from None


def check_hooks(loaded: LoadedManifest) -> list[str]:
    """Compile every hook and check it defines its function, WITHOUT running any of it (for validate/list).
    Returns the names of the hooks present."""
    import ast

    present = []
    sections: list[tuple[tuple[str, ...], Any, SourceInfo, str]] = []
    if loaded.dataset is not None:
        sections.append((DATASET_ALL_HOOK_KEYS, loaded.dataset, loaded.dataset_source or loaded.source,
                         "" if loaded.dataset_source else "dataset."))
    sections.append((MODEL_HOOK_KEYS, loaded.model, loaded.source, ""))
    for keys, section, source, prefix in sections:
        for key in keys:
            hook = getattr(section, key)
            if hook is None:
                continue
            present.append(key)
            if isinstance(hook, HookRef):
                path = (source.path.parent / hook.file).resolve()
                if not path.is_file():
                    raise ManifestError(source.path, f"{prefix}{key}.file", f"hook file {path} does not exist")
                text = read_hook_file(source.path, f"{prefix}{key}.file", path)
                first, where, name = 1, str(path), hook.function or key
            else:
                text, first, where, name = hook, source.hook_lines.get(prefix + key, 1), str(source.path), key
            try:
                tree = ast.parse(text, filename=where)
            except SyntaxError as e:
                raise syntax_error(key, where, e, first) from None
            except (RecursionError, MemoryError):
                raise too_nested(key, where) from None
            defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            if name not in defined and not (isinstance(hook, HookRef) and "import" in text):
                raise ManifestError(source.path, prefix + key, f"the hook's source must define a function named "
                                                               f"'{name}'")
    return present
