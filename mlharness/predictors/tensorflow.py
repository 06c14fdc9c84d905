"""TensorFlow predictor: SavedModel directories (a signature, inputs by name) and frozen graphs (``.pb``, tensors
named in the manifest, e.g. ``input_tensor:0``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError, PredictorError
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.predictors.checks import check_inputs, tf_tensor
from mlharness.predictors.options import int_option, option_error, unknown_options
from mlharness.telemetry.framework_profile import SharedProfiler

log = logging.getLogger(__name__)

_OPTIONS = {"signature", "inter_op_threads"}
# TensorFlow's profiler is process-wide: one session serves every instance of a run
_PROFILER = SharedProfiler()


class TensorFlowPredictor(Predictor):
    name = "tensorflow"

    def __init__(self, config: PredictorConfig):
        super().__init__(config)
        self.kind = ""
        self._fn: Any = None
        self._session: Any = None
        self._feeds: list[Any] = []
        self._fetches: list[Any] = []
        self._device = "/CPU:0"

    def framework_version(self) -> str:
        import tensorflow as tf

        return tf.__version__

    def load(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        opts = dict(self.config.options)
        unknown_options(self.config, "tensorflow", _OPTIONS)
        if "inter_op_threads" in opts:
            int_option(self.config, "inter_op_threads")
        if not isinstance(opts.get("signature", ""), str):
            raise option_error(self.config, "signature", f"expected a signature name, got {opts['signature']!r}")
        try:
            if self.config.threads:
                tf.config.threading.set_intra_op_parallelism_threads(self.config.threads)
            if opts.get("inter_op_threads"):
                tf.config.threading.set_inter_op_parallelism_threads(int(opts["inter_op_threads"]))
        except RuntimeError as e:  # TF refuses once it has initialised; a second run in one process
            log.warning("tensorflow thread settings not applied: %s", e)
        device = self.config.device
        if device.startswith("cuda"):
            index = device.partition(":")[2] or "0"
            if not tf.config.list_physical_devices("GPU"):
                raise PredictorError(f"device '{device}' requested but tensorflow sees no GPU")
            self._device = f"/GPU:{index}"
        path = self.config.model_path
        if not path:
            raise PredictorError("the tensorflow predictor needs model.graph_path (a SavedModel folder or a .pb)")
        try:
            if Path(path).is_dir():
                self._load_saved_model(tf, path, opts.get("signature", "serving_default"))
            else:
                self._load_frozen_graph(tf, path)
        except MLHarnessError:  # PredictorError, or a ManifestError from the declared inputs' check
            raise
        except Exception as e:
            raise PredictorError(f"tensorflow cannot load {path}: {type(e).__name__}: {e}") from e

    def _load_saved_model(self, tf: Any, path: str, signature: str) -> None:
        self.kind = f"SavedModel ({signature})"
        with tf.device(self._device):
            self._model = tf.saved_model.load(path)
        sigs = getattr(self._model, "signatures", {})
        if signature not in sigs:
            raise PredictorError(f"SavedModel {path} has no signature '{signature}'; it has {list(sigs)}")
        self._fn = sigs[signature]
        where = f"signature '{signature}' of {path}"
        signature_inputs = self._fn.structured_input_signature[1]
        self._feeds = _match("inputs", self.config.input_names, list(signature_inputs), where)
        if all(self.config.input_names) or len(self._feeds) == 1:  # the manifest's specs are in feed order
            check_inputs(self.config.input_specs,
                         [tf_tensor(n, signature_inputs[n].dtype, signature_inputs[n].shape) for n in self._feeds],
                         where, self.config.manifest_path)
        self._fetches = _match("outputs", self.config.output_names, list(self._fn.structured_outputs), where)

    def _load_frozen_graph(self, tf: Any, path: str) -> None:
        self.kind = "frozen graph"
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(Path(path).read_bytes())
        graph = tf.Graph()
        with graph.as_default(), tf.device(self._device):
            tf.compat.v1.import_graph_def(graph_def, name="")
        names = list(self.config.input_names)
        out_names = list(self.config.output_names)
        if None in names or None in out_names:
            raise PredictorError("a frozen graph needs every input and output tensor named in the manifest "
                                 "(e.g. name: input_tensor:0)")
        try:
            self._feeds = [graph.get_tensor_by_name(_tensor(n)) for n in names]
            self._fetches = [graph.get_tensor_by_name(_tensor(n)) for n in out_names]
        except (KeyError, ValueError) as e:
            raise PredictorError(f"{path}: {e}") from e
        check_inputs(self.config.input_specs, [tf_tensor(t.name, t.dtype, t.shape) for t in self._feeds], path,
                     self.config.manifest_path)
        config = tf.compat.v1.ConfigProto()
        if self.config.threads:
            config.intra_op_parallelism_threads = self.config.threads
        self._session = tf.compat.v1.Session(graph=graph, config=config)

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self._session is not None:
            return list(self._session.run(self._fetches, dict(zip(self._feeds, inputs, strict=True))))
        import tensorflow as tf

        with tf.device(self._device):
            out = self._fn(**{n: tf.constant(x) for n, x in zip(self._feeds, inputs, strict=True)})
        return [out[n].numpy() for n in self._fetches]

    def profile_start(self, tracer: Any) -> None:
        _PROFILER.start(_begin_tf_profile)

    def profile_stop(self, tracer: Any) -> None:
        from mlharness.telemetry.framework_profile import thread_names

        events = _PROFILER.stop(lambda logdir, align: _end_tf_profile(logdir, align, tracer))
        names = thread_names(events, "tensorflow", tracer.pid, tracer.native_ids.values())
        tracer.extra_events.extend(names + events)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        self._session = None
        self._fn = None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update({"kind": self.kind, "device": self._device, "threads": self.config.threads})
        return d


def _match(kind: str, names: list[str], available: list[str], where: str) -> list[str]:
    """The manifest's names (all in ``available``), or every available name sorted when the manifest names none."""
    declared = [n for n in names if n]
    if not declared:
        return sorted(available)
    missing = [n for n in declared if n not in available]
    if missing:
        raise PredictorError(f"{kind} {missing} are not in {where}: {available}")
    return declared


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def _begin_tf_profile() -> str:
    """Start TensorFlow's profiler (host TraceMe events of every thread, device activity on GPUs); its
    XSpace is written to a temporary log folder on stop and converted from there."""
    import tempfile

    import tensorflow as tf

    logdir = tempfile.mkdtemp(prefix="mlharness-tf-profile-")
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=2, python_tracer_level=0,
                                                       device_tracer_level=1)
    tf.profiler.experimental.start(logdir, options=options)
    return logdir


def _end_tf_profile(logdir: str, align: Any, tracer: Any) -> list[dict[str, Any]]:
    import shutil

    import tensorflow as tf

    from mlharness.telemetry.framework_profile import tf_events

    try:
        tf.profiler.experimental.stop()
        events: list[dict[str, Any]] = []
        for path in sorted(Path(logdir).rglob("*.xplane.pb")):
            events += tf_events(path.read_bytes(), align, tracer.t0_ns, tracer.pid,
                                tid_map=tracer.native_ids)
        return events
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
