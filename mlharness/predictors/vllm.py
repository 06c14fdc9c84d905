"""Generation in-process with vLLM (a GPU machine with the ``vllm`` package installed).

vLLM batches continuously: the engine thread adds every waiting request to the running batch between two engine
steps, so a request issued while others generate joins them at the next step. Each step's outputs are deltas
(``RequestOutputKind.DELTA``): a request's first delta is its first token (reported at once), and its last one
ends it. ``model.graph_path`` is a local checkpoint folder (or a model name vLLM resolves); framework options are
passed to ``vllm.EngineArgs`` (``dtype``, ``tensor_parallel_size``, ``max_num_seqs``, ``gpu_memory_utilization``,
``max_model_len``, ...); ``generation.options`` are further ``SamplingParams`` fields. Greedy unless
``generation.do_sample``. Reviewed against vLLM's ``LLMEngine`` (``from_engine_args``, ``add_request(request_id,
prompt, params)``, ``step()``), which vLLM keeps for the V1 engine too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.predictors.engine import OnceStream, QueuedGenerator


def import_vllm() -> Any:
    """The vllm package, or a clear error saying how to get it."""
    try:
        import vllm
    except ImportError as e:
        raise PredictorError("framework 'vllm' needs the vllm package, which is not installed (it needs a GPU "
                             f"machine: pip install vllm); use framework 'transformers' on this one ({e})") from e
    return vllm


def sampling_params(vllm: Any, g: Any) -> Any:
    """vLLM's SamplingParams for a GenerationConfig: deltas, greedy unless ``do_sample``."""
    from vllm.sampling_params import RequestOutputKind

    return vllm.SamplingParams(
        max_tokens=g.max_new_tokens, min_tokens=g.min_new_tokens,
        temperature=g.temperature if g.do_sample else 0.0,
        top_p=g.top_p if g.do_sample else 1.0, top_k=(g.top_k or -1) if g.do_sample else -1,
        stop_token_ids=list(g.stop_token_ids) or None, output_kind=RequestOutputKind.DELTA,
        **g.options,
    )


class VllmPredictor(QueuedGenerator):
    name = "vllm"

    def load_engine(self) -> None:
        vllm = import_vllm()
        if self.config.model_path is None:
            raise PredictorError("vllm needs a checkpoint folder or model name (model.graph_path)")
        from vllm.inputs import TokensPrompt

        self._prompt = TokensPrompt
        self.params = sampling_params(vllm, self.generation)
        args = {"max_num_seqs": max(1, int(self.config.max_batchsize)), **self.config.options}
        self.engine = vllm.LLMEngine.from_engine_args(vllm.EngineArgs(model=self.config.model_path, **args))
        self.running: dict[str, tuple[OnceStream, list[int]]] = {}
        self._next_id = 0

    def run_engine(self) -> None:
        while True:
            waiting = self.take(1 << 30, block=not self.running)
            if waiting is None:
                return
            for req, stream in waiting:  # join the running batch before the next step
                rid = str(self._next_id)
                self._next_id += 1
                prompt = self._prompt(prompt_token_ids=np.asarray(req.prompt).ravel().tolist())
                try:
                    self.engine.add_request(rid, prompt, self.params)
                except Exception as e:  # noqa: BLE001 - a request vLLM refuses fails alone
                    stream.fail(e)
                    self.finished(1)
                    continue
                self.running[rid] = (stream, [])
            if not self.running:
                continue
            try:
                outputs = self.engine.step()
            except BaseException as e:
                for stream, _ in self.running.values():
                    stream.fail(e)
                self.finished(len(self.running))
                self.running.clear()
                raise
            for out in outputs:
                self.on_output(out)

    def on_output(self, out: Any) -> None:
        entry = self.running.get(out.request_id)
        if entry is None:
            return
        stream, ids = entry
        ids.extend(int(t) for t in out.outputs[0].token_ids)
        if ids:
            stream.first(np.asarray(ids, dtype=np.int32))
        if out.finished:
            del self.running[out.request_id]
            stream.done(np.asarray(ids, dtype=np.int32))
            self.finished(1)

    def close(self) -> None:
        super().close()
        running = getattr(self, "running", {})
        for stream, _ in running.values():
            stream.fail(PredictorError("vllm: the engine was closed while this request ran"))
        self.finished(len(running))
        running.clear()

    def framework_version(self) -> str:
        return str(getattr(import_vllm(), "__version__", "unknown"))

    def computes_off_host(self) -> bool:
        return True
