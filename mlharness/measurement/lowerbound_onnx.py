"""ONNX and ONNX Runtime mechanics of ``mlharness analyze lower-bound``: a model with concrete input shapes, every
intermediate tensor of one inference, a layer (or a chain of layers) as a model of its own, and kernel times read
from ONNX Runtime's profiler (what the layer's kernel took, without the session's call overhead)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError
from mlharness.fileguard import DATA_FILE_LIMIT, read_json

MODEL_RUN = "(model run)"  # a profile's whole-run times, beside its nodes'
SMALL_VALUES = 64  # an input of at most this many elements is part of a layer's configuration (a shape, axes)


def prepared(path: Path, batch: int, dims: dict[str, int]) -> Any:
    """The model with every input dimension concrete (``batch`` for the first symbolic one, ``dims`` by name) and
    every node named; an error names a dimension left symbolic."""
    import onnx

    from mlharness.fileguard import read_bytes_bounded

    model = onnx.load_from_string(read_bytes_bounded(path, "ONNX model", 2 << 30))  # protobuf's own limit
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        for k, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.dim_value > 0:
                continue
            if d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
            elif k == 0:
                d.dim_value = batch
            else:
                raise MLHarnessError(f"input '{inp.name}' of {path} has the symbolic dimension "
                                     f"'{d.dim_param or k}': give its size with --dim {d.dim_param or 'NAME'}=N")
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
    return model


def feeds(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for one inference: floats uniform in [0, 1), integers and booleans zero (valid indices, masks)."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        out[inp.name] = (rng.random(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                         else np.zeros(shape, dtype=dtype))
    return out


def session(model: Any, threads: int | None, optimize: bool = True, profile: str | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if threads:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def intermediates(model: Any, inputs: dict[str, np.ndarray], threads: int | None) -> dict[str, np.ndarray]:
    """Every tensor of one inference by name: the inputs, the initializers and each node's outputs."""
    import onnx
    from onnx import numpy_helper

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    for node in probe.graph.node:
        for name in node.output:
            if name and name not in known:
                probe.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    sess = session(probe, threads, optimize=False)
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(names, inputs), strict=True))
    values.update(inputs)
    values.update({i.name: numpy_helper.to_array(i) for i in model.graph.initializer})
    return values


def layer_key(nodes: Sequence[Any], values: dict[str, np.ndarray], inits: set[str]) -> tuple[str, dict[str, Any]]:
    """A layer's (or chain's) configuration and its hash: op types, attributes, the shapes and types of its
    inputs, and the values of small ones (shapes, axes); weights are the same configuration whatever they hold."""
    from onnx import helper

    inside = {o for n in nodes for o in n.output}
    ops = []
    for n in nodes:
        ins = []
        for name in n.input:
            if not name:
                ins.append(None)
                continue
            if name in inside:
                ins.append({"from": [o for m in nodes for o in m.output].index(name)})
                continue
            v = values[name]
            entry: dict[str, Any] = {"shape": list(v.shape), "dtype": str(v.dtype), "weight": name in inits}
            if v.size <= SMALL_VALUES and v.dtype.kind in "iub":
                entry["values"] = v.reshape(-1).tolist()
            ins.append(entry)
        attrs = {a.name: _attr(helper.get_attribute_value(a)) for a in n.attribute}
        ops.append({"op": n.op_type, "domain": n.domain, "inputs": ins, "attributes": attrs})
    config = {"ops": ops}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(), config


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_attr(v) for v in value]
    if hasattr(value, "SerializeToString"):
        return hashlib.sha256(value.SerializeToString()).hexdigest()  # a tensor or graph attribute
    return value


def sub_model(model: Any, nodes: Sequence[Any], values: dict[str, np.ndarray], inits: set[str]) -> tuple[Any, dict]:
    """``nodes`` as a model of their own (weights as initializers, the rest as inputs) and its feeds."""
    import onnx
    from onnx import helper, numpy_helper

    inside = {o for n in nodes for o in n.output}
    ins, feeds_, initializers, seen = [], {}, [], set()
    for n in nodes:
        for name in n.input:
            if not name or name in inside or name in seen:
                continue
            seen.add(name)
            v = values[name]
            if name in inits:
                initializers.append(numpy_helper.from_array(v, name))
            else:
                ins.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape))
                feeds_[name] = v
    consumed = {i for n in nodes for i in n.input}
    last = [o for o in nodes[-1].output if o] + [o for n in nodes[:-1] for o in n.output if o and o not in consumed]
    outs = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(values[o].dtype), values[o].shape)
            if o in values else onnx.ValueInfoProto(name=o) for o in last]
    graph = helper.make_graph(list(nodes), "layer", ins, outs, initializers)
    sub = helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return sub, feeds_


def kernel_times(sess: Any, inputs: dict[str, np.ndarray], runs: int, warmup: int = 2) -> dict[str, list[float]]:
    """Each node's kernel time (seconds) in each of ``runs`` profiled runs, from ONNX Runtime's profile; the
    whole run's under :data:`MODEL_RUN`."""
    for _ in range(warmup + runs):
        sess.run(None, inputs)
    path = Path(sess.end_profiling())
    try:
        events = read_json(path, "ONNX Runtime profile", DATA_FILE_LIMIT)
    finally:
        path.unlink(missing_ok=True)
    out: dict[str, list[float]] = defaultdict(list)
    for ev in events if isinstance(events, list) else []:
        if ev.get("cat") == "Node" and str(ev.get("name", "")).endswith("_kernel_time"):
            out[ev["name"][: -len("_kernel_time")]].append(float(ev.get("dur", 0)) / 1e6)
        elif ev.get("cat") == "Session" and ev.get("name") == "model_run":
            out[MODEL_RUN].append(float(ev.get("dur", 0)) / 1e6)
    return {name: times[warmup:] or times for name, times in out.items()}  # the warm-up runs' events dropped


def profiled(model: Any, inputs: dict[str, np.ndarray], threads: int | None, runs: int,
             optimize: bool) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="mlharness-lb-") as work:
        sess = session(model, threads, optimize=optimize, profile=os.path.join(work, "ort"))
        return kernel_times(sess, inputs, runs)


def wall_times(model: Any, inputs: dict[str, np.ndarray], threads: int | None, runs: int,
               optimize: bool = True) -> list[float]:
    import time

    sess = session(model, threads, optimize=optimize)
    for _ in range(3):
        sess.run(None, inputs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, inputs)
        times.append(time.perf_counter() - t0)
    return times
