"""TensorFlow predictor: SavedModel directories (a signature, inputs by name), Keras model files (``.keras``, the
Keras 3 format, or ``.h5``) and frozen graphs (``.pb``, tensors named in the manifest, e.g. ``input_tensor:0``)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError, PredictorError
from mlharness.fileguard import DATA_FILE_LIMIT, read_bytes_bounded
from mlharness.predictors.base import Predictor, PredictorConfig
from mlharness.predictors.checks import ModelTensor, check_inputs, tf_tensor
from mlharness.predictors.options import int_option, option_error, unknown_options
from mlharness.predictors.threads import intra_op_threads
from mlharness.telemetry.framework_profile import SharedProfiler

log = logging.getLogger(__name__)

_OPTIONS = {"signature", "inter_op_threads"}
# TensorFlow's profiler is process-wide: one session serves every instance of a run
_PROFILER = SharedProfiler()


FROZEN_GRAPH_LIMIT = 2 << 30
"""Most bytes of a frozen GraphDef: protobuf's own limit for one message."""


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
        self.threads: int | None = config.threads
        self.threads_reason = ""
        self._keras_call: Any = None
        self._keras_outputs: dict[str, ModelTensor] = {}

    def framework_version(self) -> str:
        return import_tensorflow().__version__

    def load(self) -> None:
        tf = import_tensorflow()

        opts = dict(self.config.options)
        unknown_options(self.config, "tensorflow", _OPTIONS)
        if "inter_op_threads" in opts:
            int_option(self.config, "inter_op_threads")
        if not isinstance(opts.get("signature", ""), str):
            raise option_error(self.config, "signature", f"expected a signature name, got {opts['signature']!r}")
        self.threads, self.threads_reason = intra_op_threads(self.config.threads)
        try:
            if tf.config.threading.get_intra_op_parallelism_threads() != self.threads:
                tf.config.threading.set_intra_op_parallelism_threads(self.threads)
            if opts.get("inter_op_threads"):
                tf.config.threading.set_inter_op_parallelism_threads(int(opts["inter_op_threads"]))
        except RuntimeError as e:  # TF refuses once it has initialised; a second run in one process
            log.warning("tensorflow thread settings not applied: %s", e)
            self.threads_reason += f" (not applied: tensorflow was already initialised, {e})"
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
            elif Path(path).suffix.lower() in KERAS_SUFFIXES:  # a zip (or HDF5), not a GraphDef
                with quiet_native_stderr():
                    self._load_keras(tf, path)
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

    def _load_keras(self, tf: Any, path: str) -> None:
        self.kind = "Keras model"
        with tf.device(self._device):
            model = tf.keras.models.load_model(path, compile=False)
        inputs = [ModelTensor(t.name, _keras_dtype(t.dtype), list(t.shape)) for t in model.inputs]
        in_names = [t.name for t in inputs]
        out_names = list(getattr(model, "output_names", None) or [f"output_{k}" for k in range(len(model.outputs))])
        where = f"Keras model {path}"
        # the model's own order when the manifest names none (a Keras model takes its inputs by position)
        self._feeds = _match("inputs", self.config.input_names, in_names, where) if any(
            self.config.input_names) else in_names
        by_name = {t.name: t for t in inputs}
        check_inputs(self.config.input_specs, [by_name[n] for n in self._feeds], where, self.config.manifest_path)
        self._fetches = _match("outputs", self.config.output_names, out_names, where) if any(
            self.config.output_names) else out_names
        self._keras_outputs = {n: ModelTensor(n, _keras_dtype(t.dtype), list(t.shape))
                               for n, t in zip(out_names, model.outputs, strict=True)}
        order = [self._feeds.index(n) for n in in_names]
        single = len(in_names) == 1

        def call(*xs: Any) -> dict[str, Any]:
            out = model(xs[0] if single else [xs[k] for k in order], training=False)
            if isinstance(out, dict):
                return out
            return dict(zip(out_names, out if isinstance(out, list | tuple) else [out], strict=True))

        self._model = model
        self._keras_call = tf.function(call, reduce_retracing=True)  # eager Keras calls cost milliseconds

    def output_tensors(self) -> list[ModelTensor] | None:
        """The model's outputs in the order :meth:`predict` returns them (for the declared outputs' check)."""
        if self._keras_call is not None:
            return [self._keras_outputs[n] for n in self._fetches]
        if self._session is not None:
            return [tf_tensor(t.name, t.dtype, t.shape) for t in self._fetches]
        if self._fn is not None:
            specs = self._fn.structured_outputs
            return [tf_tensor(n, specs[n].dtype, specs[n].shape) for n in self._fetches]
        return None

    def _load_frozen_graph(self, tf: Any, path: str) -> None:
        self.kind = "frozen graph"
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(read_bytes_bounded(Path(path), "frozen graph", FROZEN_GRAPH_LIMIT,
                                                     error=PredictorError))
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
        config.intra_op_parallelism_threads = self.threads
        self._session = tf.compat.v1.Session(graph=graph, config=config)

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self._session is not None:
            return list(self._session.run(self._fetches, dict(zip(self._feeds, inputs, strict=True))))
        import tensorflow as tf

        with tf.device(self._device):
            if self._keras_call is not None:
                out = self._keras_call(*[tf.constant(x) for x in inputs])
            else:
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
        self._keras_call = None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update({"kind": self.kind, "device": self._device, "threads": self.threads,
                  "threads_reason": self.threads_reason})
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


def _keras_dtype(dtype: Any) -> str | None:
    name = str(getattr(dtype, "name", dtype))
    return name if name in ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64",
                            "bool") else None


KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
LOG_ENV = "TF_CPP_MIN_LOG_LEVEL"
# TensorFlow's start-up lines (oneDNN, CPU features, absl's "before InitializeLog") are written to the process's
# stderr before its logging is set up, so TF_CPP_MIN_LOG_LEVEL alone does not hide them from every run's output
NOISE = ("oneDNN custom operations", "absl::InitializeLog()", "cpu_feature_guard", "To enable the following "
         "instructions", "rebuild TensorFlow with the appropriate compiler flags", "Unable to register cu",
         "computation placer already registered", "could not find cuda drivers")


def import_tensorflow() -> Any:
    """``import tensorflow`` without its start-up log lines, unless the user set TF_CPP_MIN_LOG_LEVEL (then TF
    logs as they asked). Python-side absl logging is kept to errors the same way."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    user_set = LOG_ENV in os.environ
    os.environ.setdefault(LOG_ENV, "2")
    with contextlib.nullcontext() if user_set else quiet_native_stderr():
        import tensorflow as tf
    if not user_set:
        with contextlib.suppress(ImportError):
            from absl import logging as absl_logging

            absl_logging.set_verbosity(absl_logging.ERROR)
    return tf


@contextlib.contextmanager
def quiet_native_stderr() -> Any:
    """File descriptor 2 into a temporary file for the block (C++ code writes there, past ``sys.stderr``); what
    is not one of TensorFlow's known start-up lines is written back to stderr afterwards, the rest logged at
    debug level. Nothing is filtered when the user set TF_CPP_MIN_LOG_LEVEL."""
    if os.environ.get(LOG_ENV) != "2" or "tensorflow-stderr" in _CAPTURING:
        yield
        return
    sys.stderr.flush()
    _CAPTURING.add("tensorflow-stderr")
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            _CAPTURING.discard("tensorflow-stderr")
            tmp.seek(0)
            for line in tmp.read().decode("utf-8", errors="replace").splitlines(keepends=True):
                if any(n in line for n in NOISE):
                    log.debug("tensorflow: %s", line.rstrip())
                else:
                    sys.stderr.write(line)
            sys.stderr.flush()


_CAPTURING: set[str] = set()


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
            events += tf_events(read_bytes_bounded(path, "TensorFlow profile", DATA_FILE_LIMIT), align, tracer.t0_ns,
                                tracer.pid,
                                tid_map=tracer.native_ids)
        return events
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
