"""Speech-to-text generation in-process with Hugging Face transformers (framework ``transformers-speech``).

The prompt a :class:`~mlharness.predictors.generative.TokenRequest` carries is a clip's samples: float waveforms
in [-1, 1], or integer 16-bit PCM sample values (scaled by 1/32768), at the rate of the manifest's ``type: audio``
input (``parameters.sample_rate``). The model is a local checkpoint folder of an encoder-decoder speech model
(``AutoModelForSpeechSeq2Seq``: Whisper and the like) with its feature extractor (Whisper's: log-mel features of
30 s windows) and tokenizer. Requests waiting when the engine becomes free run as one batch: the feature extractor
turns their samples into the model's input features, ``model.generate`` decodes greedily (unless
``generation.do_sample``), and a streamer reports each sample's first token the moment it exists and finishes each
sample at its own EOS or at ``generation.max_new_tokens``.

The generated ids are what LoadGen counts (``n_tokens``: the tokens after the decoder prompt, EOS included).
What a sample answers is those ids, or, with the framework option ``response: "module:function"``, that function
of the transcript (the ids decoded, special tokens skipped): whisper's manifests answer
``mlharness.tasks.librispeech.dataset:text_to_labels``, the label indices the reference SUT writes.

Framework options: ``dtype`` (float32, bfloat16, float16), ``attn_implementation``, ``response``; the manifest's
``generation.options`` go to ``generate`` as they are (whisper: ``language: en``, ``task: transcribe``).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.engine import OnceStream, QueuedGenerator
from mlharness.predictors.generative import TokenRequest
from mlharness.predictors.transformers import quiet_progress_bars, torch_load_settings

PCM16_SCALE = 1.0 / 32768.0
# transformers' generation code warns on every generate call about what the manifest sets on purpose
# (max_new_tokens beside the checkpoint's max_length, the suppress-token arguments whisper's own generate passes):
# a dozen lines per run, hundreds in SingleStream. Errors still show; -v shows the warnings too.
GENERATION_LOGGERS = ("transformers.generation", "transformers.models.whisper.generation_whisper")


def quiet_generation_warnings() -> None:
    """Only errors from transformers' generation code, unless the run logs at INFO or lower (``-v``)."""
    if logging.getLogger().isEnabledFor(logging.INFO):
        return
    for name in GENERATION_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def response_function(spec: Any) -> Callable[[str], Any] | None:
    """The ``module:function`` a transcript is answered with (None: answer the token ids)."""
    if spec in (None, "", "tokens"):
        return None
    module, _, name = str(spec).partition(":")
    try:
        fn = getattr(importlib.import_module(module), name) if name else None
    except (ImportError, AttributeError) as e:
        raise PredictorError(f"framework option response: cannot import {spec!r}: {e}") from e
    if not callable(fn):
        raise PredictorError(f"framework option response: {spec!r} is not a 'module:function' taking the "
                             "transcript text")
    return fn


def finish(stream: OnceStream, ids: list[int], response: Any = None) -> None:
    """Done: ``ids`` are the generated tokens; ``response`` (when given) what the sample answers instead."""
    if stream.finished:
        return
    stream.finished = True
    ids_array = np.asarray(ids, dtype=np.int32)
    try:
        if response is None:
            stream.stream.done(ids_array)
        else:
            stream.stream.done(ids_array, response=np.asarray(response, dtype=np.int64))
    except Exception as e:  # noqa: BLE001 - the sample is marked finished: its failure must still reach the stream
        stream.stream.fail(e)


def waveform(prompt: np.ndarray) -> np.ndarray:
    """A prompt as float32 samples in [-1, 1] (integer prompts are 16-bit PCM values)."""
    a = np.asarray(prompt).ravel()
    if a.dtype.kind in "iu":
        return a.astype(np.float32) * np.float32(PCM16_SCALE)
    if a.dtype.kind != "f":
        raise PredictorError(f"transformers-speech: a prompt must hold audio samples, got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)


class _Streamer:
    """transformers' streamer interface for one batch: ``put`` gets the decoder prompt first, then one token per
    row each step. A row's sample is finished by :meth:`end` (the engine then decodes its transcript)."""

    def __init__(self, streams: list[OnceStream], eos: set[int], min_new: int):
        self.streams, self.eos, self.min_new = streams, eos, min_new
        self.tokens: list[list[int]] = [[] for _ in streams]
        self.ended = [False] * len(streams)
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for row, token in enumerate(value.reshape(-1).tolist()):
            if self.ended[row]:
                continue
            ids = self.tokens[row]
            ids.append(int(token))
            if len(ids) == 1:
                self.streams[row].first(np.asarray(ids, dtype=np.int32))
            if int(token) in self.eos and len(ids) >= self.min_new:
                self.ended[row] = True

    def end(self) -> None:
        pass


class SpeechPredictor(QueuedGenerator):
    name = "transformers-speech"

    def load_engine(self) -> None:
        import torch

        quiet_progress_bars()
        quiet_generation_warnings()
        from transformers import AutoFeatureExtractor, AutoModelForSpeechSeq2Seq, AutoTokenizer

        path = self.config.model_path
        o = self.config.options
        self.device, kwargs = torch_load_settings(self.config, "transformers-speech")
        self.dtype = kwargs["dtype"]
        try:
            self.model = AutoModelForSpeechSeq2Seq.from_pretrained(path, **kwargs).to(self.device).eval()
            self.features = AutoFeatureExtractor.from_pretrained(path)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise PredictorError(f"transformers-speech cannot load the checkpoint {path}: {e}") from e
        self.respond = response_function(o.get("response"))
        self.sample_rate = self._sample_rate()
        gc = self.model.generation_config
        eos = gc.eos_token_id if gc.eos_token_id is not None else self.model.config.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos = {int(e) for e in eos_ids} | {int(t) for t in self.generation.stop_token_ids}
        self._torch = torch

    def _sample_rate(self) -> int:
        """The audio input's ``parameters.sample_rate``, which must be the feature extractor's rate."""
        expected = int(getattr(self.features, "sampling_rate", 16000))
        for spec in self.config.input_specs:
            rate = (spec.get("parameters") or {}).get("sample_rate")
            if spec.get("type") == "audio" and rate is not None and int(rate) != expected:
                raise PredictorError(f"input '{spec.get('name')}': parameters.sample_rate is {rate}, but the "
                                     f"feature extractor of {self.config.model_path} takes {expected} Hz audio")
        return expected

    def input_features(self, prompts: list[np.ndarray]) -> Any:
        """The model's input features of a batch of clips (Whisper: log-mel, padded to 30 s)."""
        feats = self.features([waveform(p) for p in prompts], sampling_rate=self.sample_rate, return_tensors="pt")
        return feats["input_features"].to(self.device, dtype=self.dtype)

    def generate_ids(self, prompts: list[np.ndarray], streamer: Any = None) -> Any:
        """One batch of clips through ``model.generate`` with the manifest's settings; the generated ids (the
        decoder prompt columns included). Also what the overhead bench times bare."""
        torch, g = self._torch, self.generation
        sampling = {"temperature": g.temperature, "top_p": g.top_p, "top_k": g.top_k} if g.do_sample else {}
        with torch.inference_mode():
            return self.model.generate(input_features=self.input_features(prompts), max_new_tokens=g.max_new_tokens,
                                       min_new_tokens=g.min_new_tokens, do_sample=g.do_sample, streamer=streamer,
                                       **sampling, **g.options)

    def generate(self, batch: list[tuple[TokenRequest, OnceStream]]) -> None:
        streamer = _Streamer([s for _, s in batch], self.eos, self.generation.min_new_tokens)
        self.generate_ids([r.prompt for r, _ in batch], streamer)
        for ids, (_, stream) in zip(streamer.tokens, batch, strict=True):
            finish(stream, ids, self.answer(ids))

    def answer(self, ids: list[int]) -> Any:
        """What a sample with generated ``ids`` answers: None (the ids) or the response function's value."""
        if self.respond is None:
            return None
        return self.respond(self.tokenizer.decode(ids, skip_special_tokens=True))

    def framework_version(self) -> str:
        import transformers

        return transformers.__version__

    def computes_off_host(self) -> bool:
        return self.device != "cpu"
