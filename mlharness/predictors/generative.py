"""Generative predictors: models whose response to a sample is a stream of token ids.

The contract between the SUT and a generative predictor (``transformers``, ``vllm``, ``openai``, test models):

- The SUT turns each issued sample into a :class:`TokenRequest` (the prompt's token ids, as the manifest's
  ``preprocess`` hook left them at load time, or a :class:`~mlharness.predictors.chat.ChatPrompt` for a model
  whose input is of ``type: chat``) and hands it to :meth:`GenerativePredictor.submit` together with a
  :class:`TokenStream` of its own. ``submit`` returns at once: the predictor generates on its own thread(s), and
  requests submitted while others run join them where the engine batches continuously.
- For every request the predictor calls ``stream.first(ids)`` at most once, as soon as the first new token
  exists, then exactly one of ``stream.done(ids)`` (every new token id of the sample, in order, the first ones
  included) or ``stream.fail(error)``. The calls may come from any thread. The SUT reports the first token to
  LoadGen (``FirstTokenComplete``) and completes the sample with all its ids and ``n_tokens`` on ``done``.
  ``first`` with no id is not a first token (ignored); a call after ``done``/``fail`` is ignored; a sample that
  ends without a first token gets one from the SUT just before its completion (LoadGen needs one outside Offline).
- Token ids are int32 (what the accuracy scripts decode). A sample's response must have at least
  ``GenerationConfig.min_new_tokens`` (default 2) tokens: LoadGen refuses ``n_tokens == 1``.
- With ``GenerationConfig.text`` (the manifest's ``response.text``) ``done`` also gets ``response=`` the generated
  text's UTF-8 bytes (uint8): what the sample answers, its ids still counting its tokens.
- :meth:`GenerativePredictor.drain` returns when every submitted request has finished (done or failed);
  :meth:`close` stops the engine, failing what is still running.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.base import Predictor
from mlharness.predictors.chat import ChatPrompt


@dataclass
class GenerationConfig:
    """How to generate, from the manifest's ``generation:`` section (greedy unless it says otherwise)."""

    max_new_tokens: int = 128
    min_new_tokens: int = 2  # LoadGen refuses a one-token response
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: list[int] = field(default_factory=list)  # in addition to the tokenizer's EOS
    options: dict[str, Any] = field(default_factory=dict)  # engine-specific
    text: bool = False  # the manifest's response.text: done() carries the text's UTF-8 bytes as the response


@dataclass
class TokenRequest:
    index: int  # the sample index (LoadGen's qsl_idx)
    prompt: np.ndarray | ChatPrompt  # 1-D int token ids, or the checked messages of a ``type: chat`` input


class TokenStream(Protocol):
    def first(self, ids: np.ndarray) -> None:
        """The first new token(s) of the sample exist (called at most once)."""

    def done(self, ids: np.ndarray, response: np.ndarray | None = None) -> None:
        """Every new token id of the sample, int32, in order (exactly once, unless :meth:`fail` was called).
        ``response``: what the sample answers instead of the ids, where its accuracy script reads something else
        (whisper: label indices); a stream that only counts or times tokens ignores it."""

    def fail(self, error: BaseException) -> None:
        """Generation of this sample failed (exactly once, instead of :meth:`done`)."""


class GenerativePredictor(Predictor):
    """A predictor whose responses are token streams. ``predict`` (one array per output) does not apply."""

    streaming = True

    @property
    def generation(self) -> GenerationConfig:
        """The manifest's generation settings (``PredictorConfig.generation``), or the defaults."""
        return self.config.generation if self.config.generation is not None else GenerationConfig()

    @abc.abstractmethod
    def submit(self, requests: list[TokenRequest], streams: list[TokenStream]) -> None:
        """Start generating ``requests`` (``streams[i]`` receives request i's tokens); returns at once."""

    def prepare(self, prompt: Any) -> None:
        """Called once per prompt as the QSL loads it (untimed): build what this predictor sends for it (an
        endpoint's request body), so nothing is encoded on the timed path. Nothing by default."""

    @abc.abstractmethod
    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every submitted request has finished; False if ``timeout_s`` passed first."""

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        raise PredictorError(f"{self.name} generates token streams: the SUT calls submit(), not predict()")


def generation_config(spec: Any, text: bool = False) -> GenerationConfig:
    """A :class:`GenerationConfig` from the manifest's ``generation`` section (a pydantic model or a mapping) and
    its ``response.text``."""
    data = spec.model_dump() if hasattr(spec, "model_dump") else dict(spec or {})
    return GenerationConfig(**{"text": text, **data})


def text_response(text: str) -> np.ndarray:
    """The response of a ``response.text`` sample: its text as UTF-8 bytes."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
