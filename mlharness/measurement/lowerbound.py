"""``mlharness analyze lower-bound``: how fast an ONNX model could run on this host, layer by layer, and where
its measured latency goes beyond that (the Benanza method, on ONNX Runtime's CPU provider).

- Each unique layer configuration (operator, attributes, input shapes and types, the values of small inputs such
  as shapes; weights do not matter) runs alone as a one-node model fed the tensors one real inference gave it,
  and its kernel time is read from ONNX Runtime's profiler (median of ``runs``). Timings are kept in the
  evaluation database per host and runtime: a configuration measured once, by any model, is not measured again.
- Sequential lower bound: the sum of every node's standalone time. Parallel lower bound: the critical path of the
  graph with those times. Fused lower bound: the sequential one with each chain ORT could fuse (a Conv, MatMul or
  Gemm followed by element-wise nodes, each intermediate read by the next alone) timed as one model with ORT's
  optimisations on (fusion and its faster layouts together).
- Measured: the model's median latency with ORT's graph optimisations off (the graph the bounds are of) and on,
  and each node's kernel time in the model (optimisations off, so the nodes keep their names).
- Advice: the layers whose time in the model most exceeds their standalone time, by node and by operator, the
  framework's overhead (latency not spent in kernels) and the fusion candidates, each with its share of the gap
  between the unoptimised latency and the sequential bound (the gap is exactly the nodes' excess plus the
  overhead)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlharness.errors import MLHarnessError
from mlharness.measurement import lowerbound_onnx as lbo
from mlharness.results_db.layers import Timing, cached, host_key, store

FUSE_HEADS = {"Conv", "MatMul", "Gemm", "ConvTranspose"}
FUSE_FOLLOWERS = {"BatchNormalization", "Relu", "Clip", "Add", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid",
                  "Mul", "Gelu", "FastGelu", "Erf", "Div"}


@dataclass
class LowerBoundConfig:
    model: Path
    db: str  # the evaluation database's URL: the layer timings' cache
    batch: int = 1
    dims: dict[str, int] = field(default_factory=dict)
    runs: int = 20
    threads: int | None = None
    top: int = 10
    progress: Callable[[str], None] | None = None


def fusible_chains(nodes: list[Any], graph_outputs: set[str]) -> list[list[Any]]:
    """Maximal chains head -> follower -> ... in which each intermediate is read by the next node alone."""
    consumers: dict[str, list[Any]] = defaultdict(list)
    for n in nodes:
        for name in n.input:
            consumers[name].append(n)
    chains, taken = [], set()
    for n in nodes:
        if n.op_type not in FUSE_HEADS or n.name in taken:
            continue
        chain = [n]
        while len(chain[-1].output) == 1 and chain[-1].output[0] not in graph_outputs:
            readers = consumers.get(chain[-1].output[0], [])
            if len(readers) != 1 or readers[0].op_type not in FUSE_FOLLOWERS or readers[0].name in taken:
                break
            chain.append(readers[0])
        if len(chain) > 1:
            chains.append(chain)
            taken.update(m.name for m in chain)  # a node is fused once: the savings of two chains never overlap
    return chains


def _stats(runs: list[float]) -> Timing:
    q1, med, q3 = np.percentile(runs, [25, 50, 75])
    return Timing(float(med), float(q1), float(q3), len(runs))


def _measure(model: Any, nodes: list[Any], values: dict, inits: set[str], cfg: LowerBoundConfig,
             fuse: bool) -> Timing | None:
    """The kernel time of ``nodes`` run alone (summed over their kernels in each run); None where the layer
    cannot run alone (a subgraph, a sequence type)."""
    try:
        sub, feeds = lbo.sub_model(model, nodes, values, inits)
        per_node = lbo.profiled(sub, feeds, cfg.threads, cfg.runs, optimize=fuse)
    except Exception:  # noqa: BLE001 - any ONNX or ORT refusal: the layer is reported as not measured alone
        return None
    if not per_node:
        return None
    per_node.pop(lbo.MODEL_RUN, None)
    if not per_node:  # no kernel ran: ONNX Runtime made the node an initializer (Constant) or folded it away
        return Timing(0.0, 0.0, 0.0, cfg.runs)
    n = min(len(v) for v in per_node.values())
    return _stats([sum(v[i] for v in per_node.values()) for i in range(n)])


def analyze(cfg: LowerBoundConfig) -> dict[str, Any]:
    import onnxruntime as ort

    from mlharness.results_db.db import open_db

    say = cfg.progress or (lambda text: None)
    model = lbo.prepared(cfg.model, cfg.batch, cfg.dims)
    inputs = lbo.feeds(model)
    say("one inference for every intermediate tensor")
    values = lbo.intermediates(model, inputs, cfg.threads)
    inits = {i.name for i in model.graph.initializer}
    nodes = list(model.graph.node)
    layer_of, members = {}, {}
    for n in nodes:
        key, config = lbo.layer_key([n], values, inits)
        layer_of[n.name] = key
        members.setdefault(key, ([n], config))
    chains = fusible_chains(nodes, {o.name for o in model.graph.output})
    chain_keys = []
    for ch in chains:
        key, config = lbo.layer_key(ch, values, inits)
        chain_keys.append(key)
        members.setdefault(key, (ch, config))
    engine = open_db(cfg.db)
    try:
        host, host_text = host_key(f"onnxruntime {ort.__version__}", cfg.threads)
        timings = cached(engine, host, list(members))
        todo = [k for k in members if k not in timings]
        say(f"{len(members)} layer configurations ({len(nodes)} nodes, {len(chains)} fusible chains): "
            f"{len(members) - len(todo)} from the database, {len(todo)} to measure")
        fresh = []
        for i, key in enumerate(todo):
            group, config = members[key]
            t = _measure(model, group, values, inits, cfg, fuse=len(group) > 1)
            if t is not None:
                timings[key] = t
                fresh.append((key, "+".join(n.op_type for n in group), config, t))
            if (i + 1) % 20 == 0:
                say(f"measured {i + 1}/{len(todo)}")
        store(engine, host, host_text, fresh)
    finally:
        engine.dispose()
    say("the whole model, optimised and not, and its nodes' kernel times")
    measured = float(np.median(lbo.wall_times(model, inputs, cfg.threads, cfg.runs, optimize=True)))
    # the unoptimised graph's latency and its nodes' kernel times from the same profiled runs (the profiler's own
    # cost is then in both, as in the layers' standalone times)
    in_model = {k: float(np.median(v)) for k, v in
                lbo.profiled(model, inputs, cfg.threads, cfg.runs, optimize=False).items()}
    measured_plain = in_model.pop(lbo.MODEL_RUN, 0.0)
    return _figures(cfg, nodes, chains, chain_keys, layer_of, timings, measured, measured_plain, in_model,
                    host_text, len(members), len(members) - len(todo))


def _figures(cfg: LowerBoundConfig, nodes: list[Any], chains: list[list[Any]], chain_keys: list[str],
             layer_of: dict[str, str], timings: dict[str, Timing], measured: float, measured_plain: float,
             in_model: dict[str, float], host_text: str, configs: int, from_db: int) -> dict[str, Any]:
    alone = {n.name: timings[layer_of[n.name]].median_s if layer_of[n.name] in timings else 0.0 for n in nodes}
    unmeasured = sorted(n.name for n in nodes if layer_of[n.name] not in timings)
    sequential = sum(alone.values())
    producer = {o: n.name for n in nodes for o in n.output}
    finish: dict[str, float] = {}
    for n in nodes:  # ONNX graphs are topologically sorted
        finish[n.name] = alone[n.name] + max((finish[producer[i]] for i in n.input if i in producer), default=0.0)
    parallel = max(finish.values(), default=0.0)
    fusions = []
    for ch, key in zip(chains, chain_keys, strict=True):
        if key in timings:
            apart = sum(alone[n.name] for n in ch)
            fusions.append({"nodes": [n.name for n in ch], "ops": "+".join(n.op_type for n in ch),
                            "apart_s": apart, "fused_s": timings[key].median_s,
                            "saving_s": max(0.0, apart - timings[key].median_s)})
    fused = sequential - sum(f["saving_s"] for f in fusions)
    kernels = sum(in_model.get(n.name, 0.0) for n in nodes)
    gap = measured_plain - sequential

    def share(x: float) -> float | None:
        return x / gap if gap > 0 else None

    rows = [{"node": n.name, "op": n.op_type, "in_model_s": in_model.get(n.name, 0.0), "alone_s": alone[n.name],
             "excess_s": in_model.get(n.name, 0.0) - alone[n.name]} for n in nodes]
    by_op: dict[str, dict[str, Any]] = {}
    for r in rows:
        e = by_op.setdefault(r["op"], {"op": r["op"], "nodes": 0, "in_model_s": 0.0, "alone_s": 0.0, "excess_s": 0.0})
        e["nodes"] += 1
        for k in ("in_model_s", "alone_s", "excess_s"):
            e[k] += r[k]
    top = sorted(rows, key=lambda r: -r["excess_s"])[: cfg.top]
    ops = sorted(by_op.values(), key=lambda e: -e["excess_s"])
    for r in top + ops:
        r["share_of_gap"] = share(r["excess_s"]) if r["excess_s"] > 0 else 0.0
    fusions.sort(key=lambda f: -f["saving_s"])
    overhead = measured_plain - kernels
    return {
        "model": str(cfg.model), "batch": cfg.batch, "runs": cfg.runs, "threads": cfg.threads, "host": host_text,
        "nodes": len(nodes), "configurations": configs, "configurations_from_db": from_db,
        "not_measured_alone": unmeasured,
        "bounds_s": {"sequential": sequential, "parallel": parallel, "fused": fused},
        "measured_s": {"unoptimised": measured_plain, "optimised": measured, "kernels_unoptimised": kernels},
        "gap_s": gap,
        "advice": {"layers": top, "operators": ops[: cfg.top],
                   "framework_overhead": {"seconds": overhead, "share_of_gap": share(overhead) if overhead > 0 else 0.0},
                   "fusions": fusions[: cfg.top]},
        "layers": rows,
    }


def check_inputs(model: Path) -> Path:
    if model.suffix.lower() != ".onnx":
        raise MLHarnessError(f"{model}: analyze lower-bound reads ONNX models (.onnx); export a PyTorch model with "
                             "torch.onnx.export first")
    return model
