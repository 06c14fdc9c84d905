"""``token-oracle``: a generative test predictor that answers each prompt with a table's token ids.

Its model file is a JSON table (written by ``mlharness.tasks.cnndm.models:ensure_oracle_table``): the sha256 of a
prompt's int32 token ids -> the reference output's ids, and the tokenizer's EOS id; and, for chat prompts, ``"chat"``:
:attr:`~mlharness.predictors.chat.ChatPrompt.key` -> the answer's text, streamed as its UTF-8 bytes (one id per
byte, no EOS) and, with ``response.text``, given as the sample's text response. Each answer is the reference
ids then one EOS, as a model that stops on EOS returns them, streamed on the predictor's own thread; requests run
side by side (each on its own clock), as in an engine that batches continuously.

Options (``framework.options``):
- ``first_token_delay_ms`` (0): time from submit to the first token; ``token_delay_ms`` (0): between later tokens.
- ``eos_padding`` (0): append this many more EOS ids (a model that pads its output: TEST06 fails on it).
- ``fail_after`` (none): fail every request once it has produced this many tokens (0: before the first).
- ``dataset`` and ``tokenizer``: build the table from this cnn_eval.json and checkpoint folder instead of the
  model file (to run the oracle on another dataset).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.fileguard import read_json
from mlharness.predictors.chat import ChatPrompt
from mlharness.predictors.generative import GenerativePredictor, TokenRequest, TokenStream
from mlharness.tasks.cnndm.models import prompt_key

log = logging.getLogger(__name__)


@dataclass
class _Active:
    request: TokenRequest
    stream: TokenStream
    ids: np.ndarray
    sent: int = 0  # tokens produced so far
    error: BaseException | None = None


class TokenOraclePredictor(GenerativePredictor):
    name = "token-oracle"

    def __init__(self, config: Any):
        super().__init__(config)
        opts = config.options
        self.first_delay = float(opts.get("first_token_delay_ms", 0.0)) / 1000.0
        self.token_delay = float(opts.get("token_delay_ms", 0.0)) / 1000.0
        self.eos_padding = int(opts.get("eos_padding", 0))
        fail_after = opts.get("fail_after")
        self.fail_after = None if fail_after is None else int(fail_after)
        self.table: dict[str, list[int]] = {}
        self.chat: dict[str, str] = {}  # ChatPrompt.key -> the answer's text
        self.eos_id = 0
        self._heap: list[tuple[float, int, _Active]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    def load(self) -> None:
        opts = self.config.options
        if opts.get("dataset"):
            from mlharness.tasks.cnndm.models import oracle_table

            table = oracle_table(Path(str(opts["dataset"])).expanduser(), Path(str(opts.get("tokenizer", "")))
                                 .expanduser())
        else:
            if not self.config.model_path:
                raise PredictorError("token-oracle needs its table: a model file (model.generator) or the "
                                     "options 'dataset' and 'tokenizer'")
            table = read_json(Path(self.config.model_path), "token-oracle: the table", error=PredictorError)
        if not isinstance(table, dict) or not isinstance(table.get("entries", table.get("chat")), dict):
            raise PredictorError(f"token-oracle: {self.config.model_path} is not an oracle table (no 'entries' "
                                 "or 'chat')")
        self.table = table.get("entries") or {}
        self.chat = table.get("chat") or {}
        self.eos_id = int(table.get("eos_token_id", 0))
        self._thread = threading.Thread(target=self._run, name="token-oracle", daemon=True)
        self._thread.start()

    def framework_version(self) -> str:
        return "n/a"

    def answer(self, prompt: np.ndarray | ChatPrompt) -> np.ndarray | None:
        """The ids this oracle streams for ``prompt`` (None when the table does not know the prompt): a token
        prompt's reference ids then EOS; a chat prompt's answer text as its UTF-8 bytes, one id per byte."""
        if isinstance(prompt, ChatPrompt):
            text = self.chat.get(prompt.key)
            return None if text is None else np.frombuffer(str(text).encode("utf-8"), np.uint8).astype(np.int32)
        ids = self.table.get(prompt_key(prompt))
        if ids is None:
            return None
        return np.asarray([*ids, *([self.eos_id] * (1 + self.eos_padding))], dtype=np.int32)

    def submit(self, requests: list[TokenRequest], streams: list[TokenStream]) -> None:
        if len(requests) != len(streams):
            raise PredictorError(f"token-oracle: {len(requests)} requests but {len(streams)} streams")
        now = time.monotonic()
        with self._cond:
            if self._closed:
                raise PredictorError("token-oracle: submit after close")
            for request, stream in zip(requests, streams, strict=True):
                ids = self.answer(request.prompt)
                item = _Active(request, stream, ids if ids is not None else np.zeros(0, np.int32))
                if ids is None:
                    what = (f"chat prompt (key {request.prompt.key[:12]}...)" if isinstance(request.prompt, ChatPrompt)
                            else f"prompt ({len(request.prompt)} token ids)")
                    item.error = PredictorError(
                        f"token-oracle: sample {request.index}: its {what} is not in the oracle table "
                        f"{self.config.model_path} (the oracle answers the dataset its table was built from)")
                heapq.heappush(self._heap, (now + (0.0 if ids is None else self.first_delay), next(self._order),
                                            item))
                self._active += 1
            self._cond.notify_all()

    def _finish(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def _step(self, item: _Active) -> float | None:
        """Produce the item's next token; the delay until the one after, or None when the item is finished."""
        if item.error is None and self.fail_after is not None and item.sent >= self.fail_after:
            item.error = PredictorError(f"token-oracle: sample {item.request.index}: generation failed after "
                                        f"{item.sent} token(s) (fail_after)")
        if item.error is not None:
            item.stream.fail(item.error)
            return None
        item.sent += 1
        if item.sent == 1:
            item.stream.first(item.ids[:1].copy())
        if item.sent >= len(item.ids):
            if self.generation.text and isinstance(item.request.prompt, ChatPrompt):
                item.stream.done(item.ids.copy(), response=item.ids.astype(np.uint8))
            elif self.generation.text:
                item.stream.fail(PredictorError(f"token-oracle: sample {item.request.index}: response.text needs a "
                                                "chat prompt (a token prompt's answer is ids, not text)"))
            else:
                item.stream.done(item.ids.copy())
            return None
        return self.token_delay

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))
                if self._closed:
                    return
                _, _, item = heapq.heappop(self._heap)
            try:
                delay = self._step(item)
            except Exception as e:  # noqa: BLE001 - a stream callback raised: the sample ends here
                log.error("token-oracle: sample %d: %s", item.request.index, e)
                delay = None
                if item.sent <= 1 and item.error is None:
                    item.error = e
                    try:
                        item.stream.fail(e)
                    except Exception:  # noqa: BLE001
                        log.exception("token-oracle: failing sample %d", item.request.index)
            if delay is not None:
                with self._cond:
                    if not self._closed:
                        heapq.heappush(self._heap, (time.monotonic() + delay, next(self._order), item))
                        self._cond.notify_all()
                        continue
                self._fail_closed(item)  # close() came while this token was being sent
            self._finish()

    def drain(self, timeout_s: float | None = None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._active:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _fail_closed(self, item: _Active) -> None:
        try:
            item.stream.fail(PredictorError(f"token-oracle: closed before sample {item.request.index} finished"))
        except Exception:  # noqa: BLE001 - the stream's own failure; the sample is over either way
            log.exception("token-oracle: failing sample %d at close", item.request.index)

    def close(self) -> None:
        """Stop streaming; every request not finished yet fails (once)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)  # the token being sent is sent; the worker then stops
        with self._cond:
            pending = [item for _, _, item in self._heap]
            self._heap.clear()
        for item in pending:
            self._fail_closed(item)
            self._finish()
