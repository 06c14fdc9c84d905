"""Generation in-process with Hugging Face transformers (CPU, or CUDA when ``--device cuda``).

The model is a local checkpoint folder (config, safetensors, tokenizer) named by ``model.graph_path`` or written
by ``model.generator``. Greedy unless ``generation.do_sample``. Requests waiting when the engine becomes free run
as one left-padded batch through ``model.generate``; a streamer sees every step's tokens, so each sample's first
token is reported the moment it is generated and each sample is done at its own EOS (or ``max_new_tokens``).
Framework options: ``dtype`` (float32, bfloat16, float16), ``attn_implementation``. Before any weight loads, the
manifest's inputs and the checkpoint's config are checked (:mod:`.transformers_checks`): one input, the prompt's
token ids, and a config that AutoModelForCausalLM takes; or one ``type: chat`` input, the prompt's messages, and a
checkpoint with a processor that AutoModelForImageTextToText takes (:mod:`.transformers_chat`). With
``response.text`` each sample's response is its generated text (the tokenizer's decoding, special tokens skipped).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors import transformers_chat as chat
from mlharness.predictors.chat import ChatPrompt
from mlharness.predictors.engine import OnceStream, QueuedGenerator
from mlharness.predictors.generative import TokenRequest, text_response
from mlharness.predictors.transformers_checks import causal_lm_class, check_inputs, read_config

PROGRESS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


def quiet_progress_bars() -> None:
    """No tqdm bars of transformers' checkpoint loading in a run's output (they would come with every run),
    unless the user set HF_HUB_DISABLE_PROGRESS_BARS themselves (0: keep the bars)."""
    if PROGRESS_ENV in os.environ:
        return
    os.environ[PROGRESS_ENV] = "1"  # read by huggingface_hub when transformers first imports it
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def torch_load_settings(config: Any, framework: str) -> tuple[str, dict[str, Any]]:
    """What every transformers engine checks before ``from_pretrained``: a checkpoint folder, torch's thread
    count, a CUDA device that exists; returns the device and the keyword arguments (``dtype``,
    ``attn_implementation``) of the manifest's options."""
    import torch

    if config.model_path is None:
        raise PredictorError(f"{framework} needs a checkpoint folder (model.graph_path or model.generator)")
    if config.threads:
        torch.set_num_threads(int(config.threads))
    device = config.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PredictorError(f"--device {device}: this torch {torch.__version__} sees no CUDA device")
    o = config.options
    kwargs: dict[str, Any] = {"dtype": getattr(torch, str(o.get("dtype", "float32")))}
    if o.get("attn_implementation"):
        kwargs["attn_implementation"] = o["attn_implementation"]
    return device, kwargs


class _BatchStreamer:
    """transformers' streamer interface for a batch: ``put`` gets the prompt first, then one token per row.
    ``finish(stream, ids)`` ends a row (``stream.done`` unless given)."""

    def __init__(self, streams: list[OnceStream], eos: set[int], min_new: int,
                 finish: Callable[[OnceStream, np.ndarray], None] | None = None):
        self.streams, self.eos, self.min_new = streams, eos, min_new
        self.finish = finish or (lambda stream, ids: stream.done(ids))
        self.tokens: list[list[int]] = [[] for _ in streams]
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:  # generate() hands over the prompt first
            self.prompt_seen = True
            return
        step = value.reshape(-1).tolist()
        for row, (token, stream) in enumerate(zip(step, self.streams, strict=True)):
            if stream.finished:
                continue
            ids = self.tokens[row]
            ids.append(int(token))
            if len(ids) == 1:
                stream.first(np.asarray(ids, dtype=np.int32))
            if int(token) in self.eos and len(ids) >= self.min_new:
                self.finish(stream, np.asarray(ids, dtype=np.int32))

    def end(self) -> None:
        for ids, stream in zip(self.tokens, self.streams, strict=True):
            if not stream.finished:
                self.finish(stream, np.asarray(ids, dtype=np.int32))


class TransformersPredictor(QueuedGenerator):
    name = "transformers"

    def load_engine(self) -> None:
        import torch

        quiet_progress_bars()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device, kwargs = torch_load_settings(self.config, "transformers")
        # before any weight is read: what this predictor would drop, cast or load with a random head is refused
        self.processor = None
        if check_inputs(self.config.input_specs, self.config.manifest_path):  # the checkpoint's processor and chat template, and the class its config names
            config = read_config(Path(self.config.model_path), self.config.manifest_path)
            model_class = chat.image_text_class(config, self.config.model_path, self.config.manifest_path)
            self.processor = chat.load_processor(self.config.model_path, config, self.config.manifest_path)
        else:
            causal_lm_class(self.config.model_path, self.config.manifest_path)
            model_class = AutoModelForCausalLM
        if self.generation.text:
            self.tokenizer = self.processor.tokenizer if self.processor is not None else \
                AutoTokenizer.from_pretrained(self.config.model_path)
        try:
            self.model = model_class.from_pretrained(self.config.model_path, **kwargs).to(self.device)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise PredictorError(f"transformers cannot load the checkpoint {self.config.model_path}: {first}") from e
        self.model.eval()
        gc = self.model.generation_config
        eos = gc.eos_token_id if gc.eos_token_id is not None else self.model.config.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos = {int(e) for e in eos_ids} | {int(t) for t in self.generation.stop_token_ids}
        pad = gc.pad_token_id if gc.pad_token_id is not None else self.model.config.pad_token_id
        self.pad = int(pad if pad is not None else (eos_ids[0] if eos_ids else 0))
        self._torch = torch

    def generate(self, batch: list[tuple[TokenRequest, OnceStream]]) -> None:
        streamer = _BatchStreamer([s for _, s in batch], self.eos, self.generation.min_new_tokens,
                                  self._finish_text if self.generation.text else None)
        prompts = [r.prompt for r, _ in batch]
        if self.processor is not None:
            if not all(isinstance(p, ChatPrompt) for p in prompts):
                raise PredictorError("transformers: a chat model's requests are chat prompts (a type: chat input)")
            self._generate(chat.encode(self.processor, prompts, self.device), streamer)
        else:
            self.generate_ids(prompts, streamer)
        streamer.end()

    def _finish_text(self, stream: OnceStream, ids: np.ndarray) -> None:
        """Done with the text of ``ids`` as the response (``response.text``); the ids count the tokens."""
        if stream.finished:
            return
        stream.finished = True
        try:
            text = self.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
            stream.stream.done(ids, response=text_response(text))
        except Exception as e:  # noqa: BLE001 - the sample is marked finished: its failure must still reach it
            stream.stream.fail(e)

    def generate_ids(self, prompt_ids: list[np.ndarray], streamer: Any = None) -> Any:
        """One left-padded batch through ``model.generate`` with the manifest's settings; returns its output ids
        (prompt columns included). The generation loop of :meth:`generate`, also what ``bench generate`` times
        bare."""
        torch = self._torch
        prompts = [np.asarray(p, dtype=np.int64).ravel() for p in prompt_ids]
        width = max(len(p) for p in prompts)
        ids = np.full((len(prompts), width), self.pad, dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, p in enumerate(prompts):  # left padding: every row's next token comes at the same position
            ids[row, width - len(p):] = p
            mask[row, width - len(p):] = 1
        return self._generate({"input_ids": torch.from_numpy(ids).to(self.device),
                               "attention_mask": torch.from_numpy(mask).to(self.device)}, streamer)

    def _generate(self, inputs: dict[str, Any], streamer: Any) -> Any:
        """``model.generate`` on one batch of model inputs with the manifest's generation settings."""
        g = self.generation
        sampling = {"temperature": g.temperature, "top_p": g.top_p, "top_k": g.top_k} if g.do_sample else {}
        with self._torch.inference_mode():
            return self.model.generate(
                **inputs, max_new_tokens=g.max_new_tokens, min_new_tokens=g.min_new_tokens, do_sample=g.do_sample,
                eos_token_id=sorted(self.eos) or None, pad_token_id=self.pad, streamer=streamer,
                **sampling, **g.options,
            )

    def chat_engine(self) -> Any:
        """The engine that answers a session's turns with this model (a ``type: session`` input): the history and
        tools rendered by the checkpoint's chat template, tool calls parsed from the text
        (:mod:`.transformers_sessions`)."""
        from transformers import AutoTokenizer

        from mlharness.kinds.sessions.transformers_engine import TransformersChatEngine

        if self.processor is not None:
            raise PredictorError("transformers: sessions run on a causal language model; this checkpoint is an "
                                 "image+text model loaded for chat prompts")
        tokenizer = getattr(self, "tokenizer", None) or AutoTokenizer.from_pretrained(self.config.model_path)
        return TransformersChatEngine(self.model, tokenizer, device=self.device, eos=self.eos, pad=self.pad,
                                      generation=self.generation,
                                      template_kwargs=self.config.options.get("chat_template_kwargs"))

    def framework_version(self) -> str:
        import transformers

        return transformers.__version__

    def computes_off_host(self) -> bool:
        return self.device != "cpu"
