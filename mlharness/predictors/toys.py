"""Toy predictors: measure the harness without a framework, and exercise its failure paths."""

from __future__ import annotations

import time

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.base import Predictor


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
