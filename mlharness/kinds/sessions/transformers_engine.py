"""Sessions in-process with transformers: the ``chat_engine()`` of the ``transformers`` predictor.

A turn's whole history (system prompt, earlier turns and answers, tool results) and its tools go through the
checkpoint's own chat template (``tokenizer.apply_chat_template(messages, tools=...)``), so the model sees the
conversation as its server would render it; the answer is generated with the manifest's generation settings (greedy
unless ``generation.do_sample``; the replay's request fields ``temperature``, ``top_p``, ``top_k`` and ``seed`` over
them, temperature 0 being greedy), the turn's token cap as ``max_new_tokens``, and parsed back into content,
reasoning and tool calls (:func:`parse_answer`).

Qwen's tool format (Qwen2.5, Qwen3, Hermes) writes each call as ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>``; Qwen3-Coder and Qwen3.5/3.6 checkpoints may write ``<tool_call><function=NAME><parameter=P>value
</parameter></function></tool_call>``; both are read. A call's arguments are re-serialised as JSON text (as an
OpenAI-compatible server's tool parser does); a block whose JSON does not parse is kept as its text (it is the
model's answer: a scorer must see it fail, not a parser error). ``<think>...</think>`` before the answer is its
reasoning.

Generation runs on one worker thread of the engine's own (the model answers one turn at a time; the event loop
that plays the sessions is never blocked), and ``timing.first()`` is called from that thread the moment the first
new token exists (a streamer sees every step). Framework options: ``chat_template_kwargs`` (passed to the
template; default ``{"enable_thinking": false}``: reasoning off, as the qwen3.6-27b reference serves the model).
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mlharness.errors import PredictorError
from mlharness.kinds.sessions.engine import Timing, TurnRequest
from mlharness.kinds.sessions.model import Answer, ToolCall

DEFAULT_TEMPLATE_KWARGS = {"enable_thinking": False}
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_XML_FUNCTION = re.compile(r"^\s*<function=([^>\n]+)>(.*?)(?:</function>\s*)?$", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGUMENTS = re.compile(r'"arguments"\s*:\s*(.*?)\s*\}?\s*$', re.DOTALL)


def _json_call(body: str) -> tuple[str, str]:
    """(name, argument text) of a ``{"name": ..., "arguments": ...}`` block; what it holds where it is not JSON."""
    try:
        call = json.loads(body)
    except ValueError:
        call = None
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        return call["name"], json.dumps(call.get("arguments", {}), ensure_ascii=False)
    # malformed (cut by the token cap, or simply wrong): the name where it can be read, the rest as written
    name = _NAME.search(body)
    args = _ARGUMENTS.search(body)
    return (json.loads(f'"{name.group(1)}"') if name else "",
            args.group(1) if args and args.group(1) else body.strip())


def _xml_call(match: re.Match[str]) -> tuple[str, str]:
    """(name, argument JSON) of a ``<function=NAME><parameter=P>value</parameter></function>`` block: a value that
    is JSON (a number, a list) is taken as such, any other as a string, as Qwen3-Coder's tool parser does."""
    args: dict[str, Any] = {}
    for param in _XML_PARAMETER.finditer(match.group(2)):
        value = param.group(2)
        try:
            args[param.group(1).strip()] = json.loads(value)
        except ValueError:
            args[param.group(1).strip()] = value
    return match.group(1).strip(), json.dumps(args, ensure_ascii=False)


def parse_answer(text: str, id_prefix: str = "call") -> tuple[str | None, tuple[ToolCall, ...], str | None]:
    """(content, tool calls, reasoning) of a model's generated text. The calls get the ids ``{id_prefix}_{k}``;
    content is the text outside the call blocks and the reasoning (None where only whitespace is left)."""
    reasoning = None
    if "</think>" in text:
        head, text = text.split("</think>", 1)
        reasoning = head.replace("<think>", "", 1).strip() or None
    calls = []
    for k, block in enumerate(_BLOCK.finditer(text)):
        body = block.group(1)
        xml = _XML_FUNCTION.match(body)
        name, arguments = _xml_call(xml) if xml else _json_call(body)
        calls.append(ToolCall(id=f"{id_prefix}_{k}", name=name, arguments=arguments))
    content = _BLOCK.sub("", text).strip() if calls else text.strip()
    return content or None, tuple(calls), reasoning


class _FirstToken:
    """transformers' streamer interface: ``put`` gets the prompt first, then each step's new token; the first new
    token calls ``timing.first()`` (on the generating thread, when it exists)."""

    def __init__(self, timing: Timing):
        self.timing = timing
        self.prompt_seen = False
        self.tokens = 0

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.tokens += 1
        if self.tokens == 1:
            self.timing.first()

    def end(self) -> None:
        pass


class TransformersChatEngine:
    """A :class:`~mlharness.kinds.sessions.engine.ChatEngine` over a loaded causal LM and its tokenizer's chat template
    (made by :meth:`TransformersPredictor.chat_engine <mlharness.predictors.transformers.TransformersPredictor>`)."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, device: str, eos: set[int], pad: int, generation: Any,
                 template_kwargs: dict[str, Any] | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise PredictorError("transformers: sessions are rendered with the checkpoint's chat template, and its "
                                 "tokenizer has none (chat_template.jinja or tokenizer_config.json's chat_template)")
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.eos, self.pad, self.generation = eos, pad, generation
        self.template_kwargs = dict(DEFAULT_TEMPLATE_KWARGS if template_kwargs is None else template_kwargs)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlharness-transformers-chat")

    async def answer(self, request: TurnRequest, timing: Timing) -> Answer:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, self.answer_now, request, timing)

    def render(self, request: TurnRequest) -> Any:
        """The turn's history and tools as the model's input ids (1 x prompt length), by the chat template."""
        try:
            return self.tokenizer.apply_chat_template(
                request.messages, tools=request.tools or None, add_generation_prompt=True, tokenize=True,
                return_dict=True, return_tensors="pt", **self.template_kwargs)["input_ids"]
        except Exception as e:  # noqa: BLE001 - jinja's errors and a message the template cannot take alike
            raise PredictorError(f"transformers: session {request.session_id} turn {request.turn}: the chat "
                                 f"template cannot render the turn's {len(request.messages)} messages: "
                                 f"{type(e).__name__}: {e}") from e

    def sampling(self, extra: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """(do_sample, sampling keywords): the manifest's generation settings, with the run's request fields
        (``temperature``, ``top_p``, ``top_k`` of the replay's ``extra_body``) over them; temperature 0 is greedy,
        as a server takes it."""
        g = self.generation
        values = {"temperature": g.temperature, "top_p": g.top_p, "top_k": g.top_k}
        do_sample = g.do_sample
        for key in values:
            if extra.get(key) is not None:
                values[key] = extra[key]
        if extra.get("temperature") is not None:
            do_sample = float(extra["temperature"]) > 0
        return do_sample, (values if do_sample else {})

    def answer_now(self, request: TurnRequest, timing: Timing) -> Answer:
        """Answer one turn on the calling thread (the engine's worker, or a test's)."""
        import torch

        ids = self.render(request).to(self.device)
        do_sample, sampling = self.sampling(request.extra_body)
        try:
            with torch.inference_mode():
                if "seed" in request.extra_body:
                    torch.manual_seed(int(request.extra_body["seed"]))
                out = self.model.generate(
                    input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max(1, request.max_tokens),
                    do_sample=do_sample, eos_token_id=sorted(self.eos) or None, pad_token_id=self.pad,
                    streamer=_FirstToken(timing), **sampling, **self.generation.options)
        except (RuntimeError, ValueError) as e:
            raise PredictorError(f"transformers: session {request.session_id} turn {request.turn}: generation "
                                 f"failed on a {ids.shape[-1]}-token prompt: {e}") from e
        new = out[0, ids.shape[-1]:].tolist()
        stopped = bool(new) and new[-1] in self.eos
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        content, calls, reasoning = parse_answer(text, f"call_{request.turn}")
        finish = "tool_calls" if calls else ("stop" if stopped else "length")
        return Answer(content=content, tool_calls=calls, reasoning=reasoning, prompt_tokens=int(ids.shape[-1]),
                      completion_tokens=len(new), finish_reason=finish)

    async def aclose(self) -> None:
        self._worker.shutdown(wait=True)
