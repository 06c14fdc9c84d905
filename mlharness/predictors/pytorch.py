"""PyTorch predictor: TorchScript files, ``torch.export`` programs, or an ``nn.Module`` from a factory.

Inputs are passed positionally in the manifest's order. Outputs (a tensor, a tuple/list, or a dict keyed by the
manifest's output names) are copied to host once per batch, which is also the batch's only device sync.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import PredictorError
from mlharness.fileguard import check_regular_file, torch_load
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.predictors.checks import check_inputs, exported_inputs
from mlharness.predictors.options import option_error, unknown_options
from mlharness.predictors.threads import intra_op_threads
from mlharness.telemetry.framework_profile import SharedProfiler

log = logging.getLogger(__name__)

_DTYPES = ("float32", "float16", "bfloat16")
_OPTIONS = {"dtype", "factory_args", "channels_last", "strict_load"}
# torch.profiler is process-wide: one session serves every instance of a run
_PROFILER = SharedProfiler()
_DEFAULT_THREADS: int | None = None


class PyTorchPredictor(Predictor):
    name = "pytorch"

    def __init__(self, config: PredictorConfig):
        super().__init__(config)
        self.module: Any = None
        self.device: Any = None
        self.dtype: Any = None
        self.kind = ""
        self._exported: Any = None  # a torch.export program, whose input shapes are checked
        self._out_names = [n for n in config.output_names if n is not None]  # keys of a dict output
        self.threads: int | None = config.threads
        self.threads_reason = ""

    def framework_version(self) -> str:
        import torch

        return torch.__version__

    def load(self) -> None:
        import torch

        opts = dict(self.config.options)
        unknown_options(self.config, "pytorch", _OPTIONS)
        dtype_name = str(opts.get("dtype", "float32"))
        if dtype_name not in _DTYPES:
            raise option_error(self.config, "dtype", f"pytorch dtype '{dtype_name}': expected one of "
                                                     f"{', '.join(_DTYPES)}")
        if not isinstance(opts.get("factory_args", {}), dict):
            raise option_error(self.config, "factory_args", f"expected a mapping of keyword arguments, got "
                                                            f"{opts['factory_args']!r}")
        self.dtype = getattr(torch, dtype_name)
        device = self.config.device
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise PredictorError(f"device '{device}' requested but torch sees no CUDA device")
        try:
            self.device = torch.device(device)
        except RuntimeError as e:
            raise PredictorError(f"bad device '{device}': {e}") from e
        global _DEFAULT_THREADS
        if _DEFAULT_THREADS is None:  # torch's own default (physical cores), before any run of this process set it
            _DEFAULT_THREADS = torch.get_num_threads()
        # process-wide; each thread that runs the model picks it up on its first parallel section
        self.threads, self.threads_reason = intra_op_threads(self.config.threads, _DEFAULT_THREADS)
        torch.set_num_threads(self.threads)
        try:
            module = self._build(torch, opts)
        except PredictorError:
            raise
        except Exception as e:
            raise PredictorError(f"pytorch cannot load the model ({self.kind}): {type(e).__name__}: {e}") from e
        exported = self.kind.startswith("torch.export")
        if exported:  # an exported program knows its input shapes: check the declared ones
            check_inputs(self.config.input_specs, exported_inputs(self._exported), str(self.config.model_path),
                         self.config.manifest_path)
        if exported and (self.dtype != torch.float32 or self.device.type != "cpu"):
            # an exported program is fixed to the dtype and device it was traced with
            log.warning("torch.export programs run as exported; dtype/device options are ignored")
        if isinstance(module, torch.nn.Module) and not exported:
            module.eval()
            module = module.to(self.device)
            if self.dtype != torch.float32:
                module = module.to(self.dtype)
            if opts.get("channels_last"):
                module = module.to(memory_format=torch.channels_last)
        self.module = module
        log.info("pytorch %s model on %s (%s)", self.kind, self.device, dtype_name)

    def _build(self, torch: Any, opts: dict[str, Any]) -> Any:
        if self.config.factory:
            self.kind = f"factory {self.config.factory}"
            module_name, _, fn_name = self.config.factory.partition(":")
            try:
                factory = getattr(importlib.import_module(module_name), fn_name)
            except (ImportError, AttributeError) as e:
                raise PredictorError(f"cannot import model factory '{self.config.factory}': {e}") from e
            module = factory(**dict(opts.get("factory_args", {})))
            if not isinstance(module, torch.nn.Module):
                raise PredictorError(f"factory '{self.config.factory}' returned {type(module).__name__}, "
                                     "not a torch.nn.Module")
            if self.config.weights_path:
                state = torch_load(Path(self.config.weights_path), "weights file", error=PredictorError)
                if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
                    state = state["state_dict"]
                missing, unexpected = module.load_state_dict(state, strict=bool(opts.get("strict_load", True)))
                if missing or unexpected:
                    log.warning("state dict: missing %s, unexpected %s", missing, unexpected)
            return module
        path = self.config.model_path
        if not path:
            raise PredictorError("the pytorch predictor needs model.graph_path or model.factory")
        check_regular_file(Path(path), "model file", error=PredictorError)  # torch reads it by path
        if Path(path).suffix == ".pt2":
            self.kind = "torch.export program"
            self._exported = torch.export.load(path)
            return self._exported.module()
        self.kind = "TorchScript"
        return torch.jit.load(path, map_location=self.device)

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            tensors = []
            for x in inputs:
                t = torch.from_numpy(np.ascontiguousarray(x))
                if t.is_floating_point() and t.dtype != self.dtype:
                    t = t.to(self.dtype)
                tensors.append(t.to(self.device, non_blocking=True))
            out = self.module(*tensors)
            return self._outputs(out)

    def _outputs(self, out: Any) -> list[np.ndarray]:
        import torch

        if isinstance(out, torch.Tensor):
            items = [out]
        elif isinstance(out, dict):
            names = self._out_names
            try:
                items = [out[n] for n in names] if names else list(out.values())
            except KeyError as e:
                raise PredictorError(f"model output dict has keys {list(out)}; manifest asks for {names}") from e
        elif isinstance(out, tuple | list):
            items = list(out)
        elif hasattr(out, "to_tuple"):  # transformers ModelOutput
            items = list(out.to_tuple())
        else:
            raise PredictorError(f"unsupported model output type {type(out).__name__}")
        result = []
        for t in items:
            t = t.detach()
            if t.dtype in (torch.float16, torch.bfloat16):
                t = t.float()
            result.append(t.cpu().numpy())
        return result

    def profile_start(self, tracer: Any) -> None:
        _PROFILER.start(self._begin_profile)

    def _begin_profile(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.device is not None and self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        kwargs: dict[str, Any] = {}
        try:  # predict runs on the SUT's worker threads, not the thread that starts the profiler
            from torch._C._profiler import _ExperimentalConfig

            kwargs["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
        except (ImportError, TypeError):
            log.warning("this torch cannot profile every thread; the framework trace may miss operators")
        prof = profile(activities=activities, record_shapes=True, **kwargs)
        prof.start()
        return prof

    def profile_stop(self, tracer: Any) -> None:
        from mlharness.telemetry.framework_profile import thread_names, torch_events

        def end(prof: Any, align: Any) -> list[dict[str, Any]]:
            prof.stop()
            return torch_events(prof.profiler.kineto_results.events(), align, tracer.t0_ns, tracer.pid)

        events = _PROFILER.stop(end)
        names = thread_names(events, "pytorch", tracer.pid, tracer.native_ids.values())
        tracer.extra_events.extend(names + events)

    def close(self) -> None:
        self.module = None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update({"kind": self.kind, "device": str(self.device), "dtype": str(self.dtype), "threads": self.threads,
                  "threads_reason": self.threads_reason})
        return d
