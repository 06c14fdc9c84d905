"""Toy predictors: measure the harness without a framework, and exercise its failure paths."""

from __future__ import annotations

import threading
import time

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.base import Predictor
from mlharness.predictors.engine import OnceStream, QueuedGenerator
from mlharness.predictors.generative import TokenRequest


class EchoPredictor(Predictor):
    """Returns its inputs as outputs (optionally after ``sleep_ms`` per batch)."""

    name = "echo"

    def load(self) -> None:
        self.sleep_s = float(self.config.options.get("sleep_ms", 0)) / 1000.0

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        n_out = max(1, len(self.config.output_names))
        return [inputs[min(i, len(inputs) - 1)] for i in range(n_out)]


class ErrorPredictor(Predictor):
    """Raises on the ``fail_on_call``-th predict call (1-based; default the first)."""

    name = "error"

    def load(self) -> None:
        self.calls = 0
        self.fail_on = int(self.config.options.get("fail_on_call", 1))

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self.calls += 1
        if self.calls >= self.fail_on:
            raise PredictorError(f"error predictor: failing on call {self.calls} as configured")
        return list(inputs)


class TokenToyPredictor(QueuedGenerator):
    """A generative test model: answers each prompt with its own token ids (cycled to ``n_tokens``, default the
    prompt's length, capped by ``generation.max_new_tokens``). Options: ``first_token_ms`` (sleep before the
    first token of a batch), ``token_ms`` (sleep before each later token), ``fail_after`` (raise once k tokens of
    a batch were streamed; with ``fail_sample``, only that sample fails and the others go on),
    ``short_sample`` (that sample index answers with ``short_tokens`` tokens, default 1; 0 is an empty answer
    with no first token; ``one_token_sample`` is ``short_sample`` with one token). Each batch
    runs on a thread of its own, as if the engine batched continuously without slowing down: a request never
    waits for another, so its measured latencies are exactly the configured sleeps plus the harness's share."""

    name = "token-toy"

    def load_engine(self) -> None:
        o = self.config.options
        self.first_s = float(o.get("first_token_ms", 0)) / 1000.0
        self.token_s = float(o.get("token_ms", 0)) / 1000.0
        self.n_tokens = int(o["n_tokens"]) if "n_tokens" in o else None
        self.fail_after = int(o["fail_after"]) if "fail_after" in o else None
        self.fail_sample = int(o["fail_sample"]) if "fail_sample" in o else None
        short = o.get("short_sample", o.get("one_token_sample"))
        self.short_sample = None if short is None else int(short)
        self.short_tokens = int(o.get("short_tokens", 1))

    def run_engine(self) -> None:
        while (batch := self.take(max(1, int(self.config.max_batchsize)))) is not None:
            if batch:
                threading.Thread(target=self.run_batch, args=(batch,), daemon=True).start()

    def generate(self, batch: list[tuple[TokenRequest, OnceStream]]) -> None:
        cap = self.generation.max_new_tokens
        answers = []
        for req, _ in batch:
            prompt = np.asarray(req.prompt, dtype=np.int64).ravel()
            n = self.short_tokens if req.index == self.short_sample else min(cap, self.n_tokens or len(prompt))
            answers.append(np.resize(prompt, n).astype(np.int32))
        for step in range(max(1, *(len(a) for a in answers))):
            time.sleep(self.first_s if step == 0 else self.token_s)
            if self.fail_after is not None and step >= self.fail_after:
                error = PredictorError(f"token-toy: failing after {step} tokens as configured")
                if self.fail_sample is None:
                    raise error
                for req, stream in batch:
                    if req.index == self.fail_sample:
                        stream.fail(error)
            for (_, stream), ids in zip(batch, answers, strict=True):
                if step == 0 and len(ids):
                    stream.first(ids[:1])
                if step == max(len(ids), 1) - 1:
                    stream.done(ids)
