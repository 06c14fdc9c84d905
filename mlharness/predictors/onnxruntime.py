"""ONNX Runtime predictor: one InferenceSession, feeds matched to the model's input names."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError, PredictorError
from mlharness.fileguard import read_json
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.predictors.checks import ORT_TYPES, ModelTensor, check_inputs
from mlharness.predictors.options import int_option, option_error, unknown_options, written_file_option
from mlharness.telemetry.framework_profile import ClockAlign

log = logging.getLogger(__name__)

_GRAPH_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
                 "all": "ORT_ENABLE_ALL"}
_SESSION_KEYS = {"intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level", "execution_mode",
                 "providers", "provider_options", "enable_mem_pattern", "enable_cpu_mem_arena", "log_severity_level",
                 "optimized_model_filepath", "allow_spinning"}


class OnnxRuntimePredictor(Predictor):
    name = "onnxruntime"

    def __init__(self, config: PredictorConfig):
        super().__init__(config)
        self.session: Any = None
        self._feed_names: list[str] = []
        self._fetch_names: list[str] = []
        self._fixed_batch: int | None = None
        self._profile_dir: str | None = None  # where ONNX Runtime writes its profile (framework tracing)
        self._profile_since = 0
        self._profiling = False
        self._align: Any = None

    def framework_version(self) -> str:
        import onnxruntime

        return onnxruntime.__version__

    def _session_options(self) -> tuple[Any, list[Any]]:
        import onnxruntime as ort

        opts = dict(self.config.options)
        unknown_options(self.config, "onnxruntime", _SESSION_KEYS)
        for key in ("intra_op_num_threads", "inter_op_num_threads"):
            if key in opts:
                int_option(self.config, key)
        if "log_severity_level" in opts:
            int_option(self.config, "log_severity_level", 0, 4)
        if "optimized_model_filepath" in opts:  # ONNX Runtime writes the optimized graph there
            opts["optimized_model_filepath"] = written_file_option(self.config, "optimized_model_filepath")
        so = ort.SessionOptions()
        if self.config.threads:
            opts["intra_op_num_threads"] = self.config.threads
        for key in ("intra_op_num_threads", "inter_op_num_threads", "enable_mem_pattern", "enable_cpu_mem_arena",
                    "log_severity_level", "optimized_model_filepath"):
            if key in opts:
                try:
                    setattr(so, key, opts[key])
                except (TypeError, ValueError) as e:  # pybind11 refuses a value of the wrong type
                    raise option_error(self.config, key, f"{opts[key]!r} is not accepted: {e}") from None
        self.spinning = allow_spinning(opts)
        for key in ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning"):
            so.add_session_config_entry(key, "1" if self.spinning else "0")
        if "graph_optimization_level" in opts:
            level = str(opts["graph_optimization_level"]).lower()
            if level not in _GRAPH_LEVELS:
                raise option_error(self.config, "graph_optimization_level",
                                   f"'{level}': expected one of {', '.join(_GRAPH_LEVELS)}")
            so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _GRAPH_LEVELS[level])
        if "execution_mode" in opts:
            mode = str(opts["execution_mode"]).lower()
            if mode not in ("sequential", "parallel"):
                raise option_error(self.config, "execution_mode", f"'{mode}': expected sequential or parallel")
            so.execution_mode = getattr(ort.ExecutionMode, f"ORT_{mode.upper()}")
        providers = opts.get("providers")
        if providers is not None and not (isinstance(providers, list) and all(
                isinstance(p, str) or (isinstance(p, list | tuple) and p and isinstance(p[0], str)) for p in providers)):
            raise option_error(self.config, "providers", f"expected a list of provider names, got {providers!r}")
        if providers is None:
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if self.config.device.startswith(
                "cuda") else ["CPUExecutionProvider"]
        available = ort.get_available_providers()
        missing = [p for p in providers if (p if isinstance(p, str) else p[0]) not in available]
        if missing:
            raise option_error(self.config, "providers", f"onnxruntime provider(s) {missing} are not available in "
                                                         f"this install; available: {available}")
        if "provider_options" in opts:
            given = opts["provider_options"]
            if not isinstance(given, list) or len(given) != len(providers) or not all(
                    isinstance(o, dict) for o in given):
                raise option_error(self.config, "provider_options",
                                   f"expected a list of {len(providers)} mapping(s), one per provider in "
                                   f"{providers}, got {given!r}")
            providers = list(zip(providers, given, strict=True))
        return so, providers

    def load(self) -> None:
        import onnxruntime as ort

        if not self.config.model_path:
            raise PredictorError("the onnxruntime predictor needs a model file (model.graph_path)")
        so, providers = self._session_options()
        if self.config.profile:
            import tempfile

            # ONNX Runtime can only profile a session created with profiling on; the profile covers the whole
            # session and is trimmed to the LoadGen test when it is collected
            self._profile_dir = tempfile.mkdtemp(prefix="mlharness-ort-profile-")
            so.enable_profiling = True
            so.profile_file_prefix = f"{self._profile_dir}/ort"
            self._profiling = True
            self._align = ClockAlign()
        try:
            self.session = ort.InferenceSession(self.config.model_path, sess_options=so, providers=providers)
        except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph types
            self.close()
            raise PredictorError(f"onnxruntime cannot load {self.config.model_path}: {e}") from e
        model_inputs = self.session.get_inputs()
        model_outputs = self.session.get_outputs()
        self._feed_names = _match(
            "input", [i.name for i in model_inputs], self.config.input_names, self.config.model_path
        )
        self._fetch_names = _match(
            "output", [o.name for o in model_outputs], self.config.output_names, self.config.model_path
        )
        by_name = {i.name: i for i in model_inputs}
        check_inputs(self.config.input_specs,
                     [ModelTensor(n, ORT_TYPES.get(by_name[n].type), list(by_name[n].shape or []) or None)
                      for n in self._feed_names], self.config.model_path, self.config.manifest_path)
        first = model_inputs[0].shape[0] if model_inputs[0].shape else None
        # A fixed leading dim (e.g. 1) means the graph has no dynamic batch axis: run it in slices.
        self._fixed_batch = first if isinstance(first, int) and first > 0 else None
        log.info("onnxruntime session on %s, providers %s", self.config.model_path, self.session.get_providers())

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        n = inputs[0].shape[0]
        fb = self._fixed_batch
        if fb is None or fb == n:
            return self.session.run(self._fetch_names, dict(zip(self._feed_names, inputs, strict=True)))
        chunks: list[list[np.ndarray]] = []
        for start in range(0, n, fb):
            part = [x[start:start + fb] for x in inputs]
            short = fb - part[0].shape[0]
            if short:
                part = [np.concatenate([p, np.repeat(p[-1:], short, axis=0)]) for p in part]
            out = self.session.run(self._fetch_names, dict(zip(self._feed_names, part, strict=True)))
            chunks.append([o[: fb - short] for o in out])
        return [np.concatenate([c[i] for c in chunks]) for i in range(len(self._fetch_names))]

    def profile_start(self, tracer: Any) -> None:
        self._profile_since = tracer.now()

    def profile_stop(self, tracer: Any) -> None:
        if self.session is None or self._profile_dir is None:
            return
        from mlharness.telemetry.framework_profile import ort_events, thread_names

        start_ns = self.session.get_profiling_start_time_ns()
        align = self._align
        align.mark()
        path = self._end_profiling()
        if path is None:
            return
        try:
            profile = read_json(path, "onnxruntime profile")
        except MLHarnessError as e:
            log.warning("cannot read the onnxruntime profile %s: %s", path, e)
            return
        events = ort_events(profile, start_ns, align, tracer.t0_ns, tracer.pid, since_ns=self._profile_since,
                            tid_map=tracer.native_ids)
        names = thread_names(events, "onnxruntime", tracer.pid, tracer.native_ids.values())
        tracer.extra_events.extend(names + events)

    def _end_profiling(self) -> Any:
        """Stop profiling; the profile's path (``close`` removes its folder), None when not profiling."""
        from pathlib import Path

        if not self._profiling or self.session is None:
            return None
        self._profiling = False
        try:
            path = Path(self.session.end_profiling())
        except Exception as e:  # noqa: BLE001 - a profile is diagnostics: never fail the run for it
            log.warning("onnxruntime end_profiling failed: %s", e)
            return None
        return path if path.is_file() else None

    def close(self) -> None:
        if self._profile_dir is not None:
            import shutil

            if self.session is not None:
                self._end_profiling()
            shutil.rmtree(self._profile_dir, ignore_errors=True)
            self._profile_dir = None
        self.session = None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.session is not None:
            d["providers"] = self.session.get_providers()
            d["fixed_batch"] = self._fixed_batch
        d["threads"] = self.config.threads
        d["allow_spinning"] = getattr(self, "spinning", None)
        return d


def allow_spinning(opts: dict[str, Any]) -> bool:
    """Whether ONNX Runtime's pool threads spin between parallel sections: the ``allow_spinning`` option, else
    only when they leave a core free. Spinning threads on every core take the CPU from LoadGen's issue thread and
    the SUT's own threads, and from each other when one of them is preempted: on a 2-core machine a spinning
    2-thread ResNet50 had a p99 batch-1 latency 2.5x its median, against 1.4x without spinning."""
    import os

    if "allow_spinning" in opts:
        return bool(opts["allow_spinning"])
    threads = int(opts.get("intra_op_num_threads") or 0)  # 0: ONNX Runtime's default, one per physical core
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 0 < threads < cores


def _match(kind: str, model_names: list[str], declared: list[str | None], model_path: str) -> list[str]:
    """Feed/fetch names: declared names must exist in the model; undeclared ones are taken by position."""
    if len(declared) > len(model_names) and kind == "input":
        raise PredictorError(
            f"the manifest declares {len(declared)} {kind}s but {model_path} has {len(model_names)}: {model_names}"
        )
    names = []
    for i, name in enumerate(declared):
        if name is None:
            if i >= len(model_names):
                raise PredictorError(f"{kind} {i} has no name and {model_path} has only {len(model_names)} {kind}s")
            names.append(model_names[i])
        elif name not in model_names:
            raise PredictorError(f"{kind} '{name}' declared in the manifest is not in {model_path}; "
                                 f"the model's {kind}s are {model_names}")
        else:
            names.append(name)
    if kind == "input" and len(names) < len(model_names):
        raise PredictorError(f"{model_path} needs inputs {model_names}; the manifest declares only {names}")
    return names
