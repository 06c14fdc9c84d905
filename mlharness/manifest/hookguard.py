"""Every call of a manifest's code is bounded in time and cannot end the process.

A hook is code from a manifest. Two things it may do would break a run's promises, and Python cannot stop
either from the outside:

- **Run for ever** (a ``time.sleep``, a read from a pipe nobody writes): no thread can interrupt another, so
  the :class:`Watchdog` names the hook once it has run past its deadline (``hooks.timeout_s`` of the model
  manifest, else :data:`DEFAULT_DEADLINES_S`) and calls the action set with :func:`on_overrun`: the CLI keeps
  the run's partial output as ``*.failed-<time>`` and ends the process with exit status 3, as it does for a
  LoadGen test that cannot stop. Without an action (a library caller), the process ends the same way.
- **End the process** with ``sys.exit()`` or ``os._exit()``, which would be exit status 0 with no result.
  ``SystemExit`` is caught where the hook is called. ``os._exit`` cannot be caught, so it is replaced (also as
  ``posix._exit``) by a function that refuses on a thread that is running a hook, and calls the real one
  anywhere else (a forked child included, whose ``multiprocessing`` bootstrap ends with it); mlharness's own
  exits use :func:`hard_exit`. Either attempt fails the hook with :class:`ExitAttempt`, even when the hook
  catches what the refusal raises.

What stays out of reach in-process: a thread a hook starts itself, and code that ends the process through the
C library (``ctypes``) or replaces it (``os.exec*``). Hooks are trusted code; run untrusted manifests in a
sandbox.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from mlharness.errors import HookError, suggest

log = logging.getLogger(__name__)

hard_exit: Callable[[int], NoReturn] = os._exit
"""The real ``os._exit``, for mlharness's own exit paths (a stuck test, a second Ctrl-C, a hook past its
deadline): they must end the process even while a hook runs on the same thread."""

# Seconds one call may run. Hooks that run once and may read or build a whole dataset or model get long
# deadlines; the per-sample and per-batch hooks shorter ones, so a stuck sample is named within minutes.
DEFAULT_DEADLINES_S: dict[str, float] = {
    "module": 600.0,  # module-level code of the hooks (imports of frameworks), when the run compiles them
    "generator": 3600.0,  # model.generator: may download and convert weights
    "before_preprocess": 600.0,
    "init": 1800.0,  # may generate or scan a dataset
    "load": 1800.0,  # one call per loaded set of samples
    "sample": 60.0,
    "preprocess": 300.0,  # per sample (a 3D volume is resampled here)
    "before_postprocess": 600.0,
    "predict": 1800.0,  # per batch (sliding-window inference runs the model many times)
    "postprocess": 300.0,  # per batch
    "unload": 600.0,
    "after_preprocess": 600.0,
    "after_postprocess": 600.0,
}
MAX_DEADLINE_S = 7 * 24 * 3600.0  # mlharness.numbers.MAX_TIMEOUT_S
POLL_S = 0.25  # how often the watchdog looks: a deadline is noticed at most this late


def deadline(timeout_s: float | dict[str, float] | None, key: str) -> tuple[float, bool]:
    """(seconds, whether the manifest set them) for one call of ``key`` (a hook, ``module`` or ``generator``):
    ``hooks.timeout_s`` is one number for every hook, or a mapping over the defaults."""
    if isinstance(timeout_s, dict):
        if key in timeout_s:
            return float(timeout_s[key]), True
    elif timeout_s is not None:
        return float(timeout_s), True
    return DEFAULT_DEADLINES_S.get(key, max(DEFAULT_DEADLINES_S.values())), False


def check_deadline(value: Any, where: str) -> float:
    """One deadline from a manifest: a finite number of seconds above 0 and at most a week (the rule of
    :func:`mlharness.numbers.problem`; a ValueError here, as pydantic names the field)."""
    from mlharness import numbers

    said = numbers.problem(value, minimum=0, above=True, maximum=MAX_DEADLINE_S, unit=" s", high_why="a week")
    if said:
        raise ValueError(f"{where} {said}")
    return float(value)


def check_timeout_s(cls: Any, value: Any) -> Any:  # noqa: ARG001 - a pydantic validator
    """``hooks.timeout_s``: None, one deadline, or a mapping of known hook names to deadlines."""
    if value is None:
        return value
    if not isinstance(value, dict):
        return check_deadline(value, "the deadline")
    for key in value:
        if key not in DEFAULT_DEADLINES_S:
            raise ValueError(f"'{key}' is not a hook.{suggest(str(key), DEFAULT_DEADLINES_S)}")
    return {key: check_deadline(v, f"the deadline of '{key}'") for key, v in value.items()}


class ExitAttempt(Exception):  # noqa: N818 - named for what the hook did
    """A hook tried to end the process (``sys.exit``, ``os._exit``); raised where the hook was called."""

    def __init__(self, how: str):
        super().__init__(how)
        self.how = how

    def explain(self) -> str:
        return f"called {self.how}; manifest code must return or raise an exception, never end the process"


class _Refused(BaseException):
    """What a refused ``os._exit`` raises inside the hook: not an ``Exception``, so the hook's own ``except
    Exception`` does not swallow it on the way out."""


class _Hook:
    """What a call's deadline and message need: fixed per hook."""

    __slots__ = ("hook", "where", "timeout_s", "configured", "deadline_key")

    def __init__(self, hook: str, where: str, timeout_s: float, configured: bool, deadline_key: str):
        self.hook = hook
        self.where = where  # the manifest (or file) that defines the hook
        self.timeout_s = timeout_s
        self.configured = configured  # the deadline comes from the manifest, not the default
        self.deadline_key = deadline_key  # the hook, or "module" for its module-level code


class _Call:
    __slots__ = ("spec", "started", "thread", "exit_attempt", "reported")

    def __init__(self, spec: _Hook, started: float, thread: int):
        self.spec = spec
        self.started = started
        self.thread = thread
        self.exit_attempt: str | None = None
        self.reported = False


_active: set[_Call] = set()  # calls running now; one set add and discard per call (no lock on the timed path)
_owner_pid = os.getpid()


def _innermost_call() -> _Call | None:
    """The call of manifest code the current thread is in (the latest started, for nested calls)."""
    me = threading.get_ident()
    mine = [c for c in list(_active) if c.thread == me]
    return max(mine, key=lambda c: c.started) if mine else None


def _guarded_exit(status: int) -> NoReturn:
    call = _innermost_call() if os.getpid() == _owner_pid else None
    if call is None:  # mlharness's own code, a library's thread, or a forked child: the real exit
        hard_exit(status)
    call.exit_attempt = f"os._exit({status!r})"
    raise _Refused(call.exit_attempt)


def install_exit_guard() -> None:
    """Replace ``os._exit`` (and ``posix._exit``, the same function) before any manifest code runs, and start
    the watchdog; idempotent."""
    global _owner_pid
    WATCHDOG.start()
    posix = sys.modules.get("posix")
    if os._exit is _guarded_exit and getattr(posix, "_exit", None) in (None, _guarded_exit):
        return
    _owner_pid = os.getpid()
    os._exit = _guarded_exit
    if posix is not None:
        posix._exit = _guarded_exit  # type: ignore[attr-defined]


class Watchdog:
    """One daemon thread that names the first call of manifest code past its deadline."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.action: Callable[[HookError], None] | None = None

    def start(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():  # not alive: a forked child
                self._thread = threading.Thread(target=self._loop, name="mlharness-hook-watchdog", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(POLL_S)
            now = time.monotonic()
            for call in list(_active):
                if not call.reported and now - call.started > call.spec.timeout_s:
                    call.reported = True
                    self._overrun(overrun_error(call, now))

    def _overrun(self, error: HookError) -> None:
        log.debug("hook past its deadline: %s", error)
        try:
            (self.action or _end_process)(error)
        finally:  # the process must end whatever the action did: the hook still runs
            _end_process(error)


WATCHDOG = Watchdog()


def on_overrun(action: Callable[[HookError], None] | None) -> None:
    """What the watchdog does with a hook past its deadline. The action runs on the watchdog's thread while the
    hook still runs; it should end the process (the hook cannot be stopped)."""
    WATCHDOG.action = action


def overrun_error(call: _Call, now: float) -> HookError:
    spec = call.spec
    what = "its module-level code is" if spec.deadline_key == "module" else "it is"
    source = "field 'hooks.timeout_s' of the model manifest" if spec.configured else (
        f"the default for '{spec.deadline_key}'; field 'hooks.timeout_s' of the model manifest changes it")
    return HookError(spec.hook, spec.where, f"{what} still running after {now - call.started:.1f} s, past its "
                     f"deadline of {spec.timeout_s:g} s ({source}). A running hook cannot be interrupted, so "
                     f"mlharness ended the run")


def _end_process(error: HookError) -> NoReturn:
    try:
        os.write(2, f"error: {error}\n".encode(errors="replace"))
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001, S110 - ending anyway
        pass
    hard_exit(3)


def call_hook(hook: str, where: str, timeout_s: float, fn: Callable[..., Any], *args: Any,
              configured: bool = False, deadline_key: str | None = None) -> Any:
    """``fn(*args)`` as manifest code: watched against ``timeout_s``, and ``sys.exit``/``os._exit`` inside it
    raise :class:`ExitAttempt` (the traceback still points at the hook's line)."""
    return _run(_Hook(hook, where, timeout_s, configured, deadline_key or hook), fn, args)


def _run(spec: _Hook, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    if os._exit is not _guarded_exit:  # the first manifest code of the process, or code put the real one back
        install_exit_guard()
    call = _Call(spec, time.monotonic(), threading.get_ident())
    _active.add(call)
    try:
        result = fn(*args)
    except SystemExit as e:
        raise ExitAttempt(f"sys.exit({e.code!r})").with_traceback(e.__traceback__) from None
    except _Refused as e:
        raise ExitAttempt(call.exit_attempt or "os._exit").with_traceback(e.__traceback__) from None
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM (loadgen.interrupt.Interrupted): say which hook it stopped
        name_the_hook(e, spec)
        raise
    finally:
        _active.discard(call)
    if call.exit_attempt is not None:  # the hook caught the refusal and went on: it still tried to exit
        raise ExitAttempt(call.exit_attempt)
    return result


def name_the_hook(e: BaseException, spec: _Hook) -> None:
    """Note on ``e`` the manifest code it stopped (the innermost call only); the CLI prints the notes."""
    if any(n.startswith(NOTE_PREFIXES) for n in getattr(e, "__notes__", ())):
        return
    if spec.deadline_key == "module":
        e.add_note(f"while loading hook '{spec.hook}' of {spec.where} (its module-level code)")
    else:
        e.add_note(f"while hook '{spec.hook}' of {spec.where} was running")


NOTE_PREFIXES = ("while loading hook '", "while hook '")


def guarded(hook: str, where: str, timeout_s: float, fn: Callable[..., Any], configured: bool = False
            ) -> Callable[..., Any]:
    """``fn`` wrapped in :func:`call_hook`; its signature is kept (``inspect.signature`` follows the wrapper)."""
    install_exit_guard()
    spec = _Hook(hook, where, timeout_s, configured, hook)

    @functools.wraps(fn)
    def hook_call(*args: Any) -> Any:
        return _run(spec, fn, args)

    return hook_call
