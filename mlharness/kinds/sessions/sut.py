"""The SUT of a session model: one LoadGen sample is one session of turns.

LoadGen issues a sample; the SUT plays its session's turns in order on one asyncio event loop (a thread of its own)
with a player (:class:`~mlharness.kinds.sessions.replay.SessionPlayer`), each turn's history built from the earlier
answers and its think time honoured; the sample completes once, after the last answer, with the UTF-8 bytes of
``{"session": id, "answers": [...]}``. Turns cannot be LoadGen samples of their own: a turn's history and the tool
results keyed to the previous answer's calls exist only once that answer does, and LoadGen issues samples in its
own order. So LoadGen's latency is a session's end to end, and the per-turn TTFT, TPOT and cached tokens are the
player's records, written beside LoadGen's logs (``sessions.jsonl``, ``sessions_summary.json``).

Scenarios: SingleStream plays one session at a time; Server starts sessions at LoadGen's Poisson arrivals; Offline
receives every session at once and starts each at its recorded ``start_s`` after the issue (``timing: recorded``)
or at once (``asap``), with at most ``concurrency`` sessions in flight where one is set.

Every sample completes exactly once. A session that fails (an engine error, a turn past its timeout) is the run's
error, naming the session, the sample and the turn; from then on every outstanding and later sample is completed
empty at once, so LoadGen reaches its end and the runner fails the run (as :mod:`mlharness.kinds.tokens.sut` does).
A signal drains the SUT the same way. No LoadGen call is made once ``StartTest`` has returned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import RunFailed
from mlharness.kinds.sessions.input import BadSessionInput, SessionSettings
from mlharness.kinds.sessions.records import SessionRecord, write_records
from mlharness.kinds.sessions.report import SUMMARY_FILE, summarize
from mlharness.loadgen.completion import Completions
from mlharness.loadgen.qsl import SampleLoader, SampleStore
from mlharness.loadgen.sut import run_fast_sut

log = logging.getLogger(__name__)
RECORDS_FILE = "sessions.jsonl"
CLOSE_TIMEOUT_S = 30.0


class SessionFailed(RunFailed):
    """A session's turn failed: the engine's error, or the turn's timeout."""


def response_bytes(session_id: str, answers: list[Any]) -> np.ndarray:
    """What LoadGen is handed for a played session (the accuracy log's bytes)."""
    text = json.dumps({"session": session_id, "answers": [a.as_json() for a in answers]}, ensure_ascii=False)
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def failed_turn(record: SessionRecord) -> str:
    bad = next((t for t in record.turns if t.error is not None), None)
    if bad is not None:
        return f"turn {bad.turn}: {bad.error}"
    return f"turn {len(record.turns)}: {record.error}" if record.turns else str(record.error)


class SessionSUT(Completions):
    """LoadGen's callbacks for session players, and the event loop thread that plays them."""

    failure_label = "a session"

    def __init__(self, make_players: Callable[[], list[Any]], store: SampleStore, scenario: str,
                 settings: SessionSettings, outdir: Path | None = None,
                 on_failure: Callable[[BaseException], None] | None = None, warmup: int = 0,
                 close: Callable[[], Any] | None = None):
        super().__init__(on_failure)
        self.make_players = make_players  # called on the loop thread: engines bind their connections to it
        self.store = store
        self.scenario = scenario
        self.settings = settings
        self.outdir = outdir
        self.warmup = warmup
        self.close_engines = close  # an awaitable factory releasing the engines, run on the loop at the end
        self._scrapes: list[list[Any]] = []  # the servers' prefix-cache counters before and after the test
        self.records: list[SessionRecord] = []
        self.players: list[Any] = []
        self._next = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._gate: asyncio.Semaphore | None = None
        self._open: dict[int, asyncio.Future[Any] | None] = {}  # LoadGen sample id -> its task (None: not yet)
        self._open_lock = threading.Lock()
        self._wall: list[float] = []  # perf_counter when LoadGen's test started and ended

    # -- the loop ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(ready.set)
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="mlharness-sessions", daemon=True)
        self._thread.start()
        ready.wait(10)
        self.call(self._setup())

    async def _setup(self) -> None:
        self.players = list(self.make_players())
        if self.settings.concurrency is not None:
            self._gate = asyncio.Semaphore(self.settings.concurrency)

    def call(self, coro: Any, timeout: float | None = None) -> Any:
        """Run a coroutine on the loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shut() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self.close_engines is not None:
                await self.close_engines()

        try:
            self.call(shut(), CLOSE_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the results stand; a client that does not close is reported
            log.warning("closing the session engines failed: %s: %s", type(e).__name__, e)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)
        self._loop.close()
        self._loop = None

    # -- LoadGen callbacks ---------------------------------------------------------------------------------------
    def issue(self, ids: list[int], indices: list[int]) -> None:
        self._count_issued(len(ids))
        t0 = time.perf_counter()
        with self._open_lock:
            for i in ids:
                self._open[int(i)] = None
        for i, x in zip(ids, indices, strict=True):
            if self.halted:
                self._finish(int(i), None)
                continue
            fut = asyncio.run_coroutine_threadsafe(self._play(int(i), int(x), t0), self._loop)
            with self._open_lock:
                if int(i) in self._open:
                    self._open[int(i)] = fut

    def flush(self) -> None:
        pass

    def fail(self, e: BaseException) -> None:
        super().fail(e)
        self._abandon()

    def drain(self, interrupted: Any) -> None:
        super().drain(interrupted)
        self._abandon()

    def _abandon(self) -> None:
        """Complete every session still playing, empty, and stop playing it: LoadGen can end its test."""
        with self._open_lock:
            left = list(self._open.items())
        for sample_id, fut in left:
            if self._finish(sample_id, None) and fut is not None:
                fut.cancel()

    # -- one session -----------------------------------------------------------------------------------------------
    def session_at(self, index: int) -> Any:
        return self.store.gather(np.asarray([index], dtype=np.int64))[0][0]

    def player(self) -> Any:
        player = self.players[self._next % len(self.players)]
        self._next += 1
        return player

    async def _play(self, sample_id: int, index: int, issued: float) -> None:
        try:
            session = self.session_at(index)
            if self.scenario == "Offline" and self.settings.timing == "recorded" and session.start_s > 0:
                await asyncio.sleep(max(0.0, issued + session.start_s - time.perf_counter()))
            if self._gate is not None and self.scenario == "Offline":
                async with self._gate:
                    record, answers = await self.player().play(session, index)
            else:
                record, answers = await self.player().play(session, index)
        except asyncio.CancelledError:
            return
        except BaseException as e:  # noqa: BLE001 - the sample must still complete
            self.fail(SessionFailed(f"session of sample {index} (qsl_idx) failed: {type(e).__name__}: {e}"))
            self._finish(sample_id, None)
            return
        record.index = index
        self.records.append(record)  # the loop thread alone appends
        if not record.ok:
            self.fail(SessionFailed(f"session '{record.session}' (sample {index}, qsl_idx) failed at "
                                    f"{failed_turn(record)}"))
            self._finish(sample_id, None)
            return
        self._finish(sample_id, response_bytes(session.id, answers))

    def _finish(self, sample_id: int, data: np.ndarray | None) -> bool:
        """Complete one sample (empty when ``data`` is None) unless it was already; True if this call did."""
        with self._open_lock:
            if sample_id not in self._open:
                return False
            del self._open[sample_id]
        self.complete_one(sample_id, None if self.halted else data, None, "a session")
        return True

    def play_once(self, index: int, timeout_s: float | None = None) -> SessionRecord:
        """Play sample ``index``'s session outside LoadGen (warm-up, calibration); raises on its failure."""
        if self._loop is None:
            self.start()
        session = self.session_at(index)
        record, _ = self.call(self.players[0].play(session, index), timeout_s)
        if not record.ok:
            raise SessionFailed(f"session '{record.session}' (sample {index}, qsl_idx) failed at "
                                f"{failed_turn(record)}")
        return record

    def warm_up(self, indices: list[int]) -> None:
        """Untimed, before LoadGen starts its clock: play the first loaded session ``warmup`` times."""
        for _ in range(max(0, self.warmup)):
            try:
                self.play_once(int(indices[0]))
            except SessionFailed as e:
                raise SessionFailed(f"warming up: {e}") from e

    # -- one LoadGen test ----------------------------------------------------------------------------------------
    def _end(self) -> None:
        self._end_test()
        self._wall.append(time.perf_counter())

    def run_test(self, loader: SampleLoader, total_count: int, performance_count: int, settings: Any,
                 log_settings: Any, audit_config: str, warmup: int = 0) -> None:
        import mlperf_loadgen as lg

        self._lg = lg
        if self._loop is None:
            self.start()
        self._scrapes.append(self._scrape())
        try:
            self._wall.append(time.perf_counter())
            run_fast_sut(self, loader, total_count, performance_count, settings, log_settings, audit_config,
                         self.issue, self.flush, self.warm_up, on_end=self._end)
        finally:
            self._scrapes.append(self._scrape())
            self.stop()
            self.write()
        if isinstance(loader.error, BadSessionInput):  # the user's input, as if refused before the run (exit 2)
            raise loader.error
        self._raise_if_failed()

    def _scrape(self) -> list[Any]:
        """Each engine's server's prefix-cache counters (vLLM's /metrics), None where it has none."""
        from mlharness.kinds.sessions.cache_metrics import scrape

        bases = [getattr(getattr(p, "engine", None), "base", None) for p in self.players]
        return [scrape(b) if isinstance(b, str) else None for b in dict.fromkeys(bases)]

    def _server_cache(self) -> dict[str, Any] | None:
        """The servers' own hit rate over the test (the counters' difference), where they report one."""
        from mlharness.kinds.sessions.cache_metrics import HITS, QUERIES, hit_rate

        if len(self._scrapes) < 2 or not any(self._scrapes[0]):
            return None
        pairs = [(b, a) for b, a in zip(*self._scrapes[:2], strict=False) if b and a]
        before = {k: sum(b.get(k, 0.0) for b, _ in pairs) for k in (QUERIES, HITS)}
        after = {k: sum(a.get(k, 0.0) for _, a in pairs) for k in (QUERIES, HITS)}
        return {"hit_rate": hit_rate(before, after), "queries": after[QUERIES] - before[QUERIES],
                "hits": after[HITS] - before[HITS]}

    def write(self) -> None:
        """``sessions.jsonl`` (one record per played session, in the order they ended) and the summary."""
        if self.outdir is None:
            return
        records = sorted(self.records, key=lambda r: r.started)
        write_records(self.outdir / RECORDS_FILE, records)
        wall = self._wall[-1] - self._wall[0] if len(self._wall) >= 2 else None
        summary = summarize(records, self.settings.slo, wall_s=wall, scenario=self.scenario,
                            server_cache=self._server_cache())
        (self.outdir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")


def session_engines(predictors: list[Any], manifest: Any) -> Callable[[], list[Any]]:
    """A maker of each predictor instance's chat engine (``chat_engine()``), refused when the framework has none."""
    from mlharness.errors import ManifestError

    for p in predictors:
        if not callable(getattr(p, "chat_engine", None)):
            raise ManifestError(manifest.path, "framework.name", f"response.kind is 'session', but framework "
                                f"'{manifest.model.framework.name}' answers no chat turns (no chat_engine()); use "
                                "openai (--endpoint), transformers, or a task's oracle")
    return lambda: [p.chat_engine() for p in predictors]


def make_players(engines: Callable[[], list[Any]], replay: dict[str, Any], max_tokens: int
                 ) -> tuple[Callable[[], list[Any]], Callable[[], Any]]:
    """The players of a run (one per engine, the run's replay options) and an awaitable closing the engines."""
    from mlharness.kinds.sessions.replay import ReplayOptions, SessionPlayer

    made: list[Any] = []
    options = ReplayOptions(**{"max_tokens": max_tokens, **replay})

    def players() -> list[Any]:
        made.extend(engines())
        return [SessionPlayer(engine, options) for engine in made]

    async def close() -> None:
        for engine in made:
            await engine.aclose()

    return players, close
