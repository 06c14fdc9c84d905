"""Framework ``remote``: the model runs on agents (``mlharness agent serve``) or any Open Inference Protocol server.

Manifest use::

    framework:
      name: remote
      options: {agents: ["host:port", ...], model_name: resnet50, deadline_s: 60, token: ..., tls_ca: ca.pem}

or ``mlharness run --agent host:port`` with any manifest (its inputs and outputs, served by an agent). Each
``predict`` call is one ModelInfer request carrying the whole batch as raw tensors; calls from many SUT workers
run at once (the pool is thread-safe), spread over the agents by least outstanding requests. ``load`` checks
every agent (ServerReady, ModelReady) and compares the served model's metadata with the manifest's inputs and
outputs, so a wrong address, model name, shape or dtype fails before LoadGen starts.

Each agent's facts (host, framework, versions) are asked for at ``load`` and recorded in the run's metadata
(:meth:`RemotePredictor.remote_agents`); with ``--trace`` at any level, the agents' spans join the run's trace
(:mod:`mlharness.agent.spans`).

Mode ``sample_index`` (set by ``--network lon``) talks to agents started with ``--hooks agent``: requests carry
sample indices and responses the bytes LoadGen logs; :meth:`RemotePredictor.submit` is its non-blocking path.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from mlharness.agent.backend import RESPONSE, SAMPLE_INDEX
from mlharness.agent.spans import TRACE_PARAMETER
from mlharness.agent.tensors import from_contents, from_raw, to_raw
from mlharness.errors import AgentError, PredictorError, SettingsError
from mlharness.predictors.base import Predictor

log = logging.getLogger(__name__)

KNOWN_OPTIONS = frozenset({"agents", "model_name", "model_version", "mode", "token", "tls_ca", "tls_cert", "tls_key",
                           "tls_server_name", "deadline_s", "connect_timeout_s", "load_deadline_s",
                           "max_samples_per_request"})
MODES = ("tensors", "sample_index")


def remote_manifest(loaded: Any, agents: list[str], network: str | None,
                    connect: dict[str, Any] | None = None) -> Any:
    """The run's manifest with its framework swapped for ``remote`` (``--agent`` / ``--network lon``); ``connect``
    (``--token``, ``--tls-ca``, ``--tls-cert``, ``--tls-key``) override the manifest's options of those names.

    The hooks keep the manifest's own framework in ``ctx["framework"]`` (they were built before the swap), so
    they produce what the agents' framework expects; the model file is not needed here.
    """
    if network not in (None, "lon"):
        raise SettingsError(f"unknown --network '{network}'; the only mode is 'lon' (LoadGen over the network)")
    m = loaded.model
    options = dict(m.framework.options) if m.framework.name == "remote" else {}
    if agents:
        options["agents"] = list(agents)
    if not options.get("agents"):
        raise SettingsError("--network lon needs the agents' addresses: --sut-server host:port (repeatable)")
    if network == "lon":
        options["mode"] = "sample_index"
    options.update({k: v for k, v in (connect or {}).items() if v is not None})
    framework = m.framework.model_copy(update={"name": "remote", "version": "*", "options": options})
    return replace(loaded, model=m.model_copy(update={"framework": framework, "model": None}))


class RemotePredictor(Predictor):
    name = "remote"
    remote_spans = True  # profile_start/stop at every trace level: the agents' spans are the model's own
    _merger: Any = None

    def load(self) -> None:
        from mlharness.agent.client import AgentPool, ConnectOptions

        o = dict(self.config.options)
        unknown = set(o) - KNOWN_OPTIONS
        if unknown:
            raise PredictorError(f"unknown 'remote' framework option(s) {sorted(unknown)}; known: "
                                 f"{', '.join(sorted(KNOWN_OPTIONS))}")
        agents = o.get("agents") or []
        if isinstance(agents, str):
            agents = [a.strip() for a in agents.split(",") if a.strip()]
        if not agents:
            raise PredictorError("framework 'remote' needs options.agents: a list of host:port (or --agent)")
        self.agents = [str(a) for a in agents]
        self.model_name = str(o.get("model_name") or self.config.model_name or "")
        self.model_version = str(o.get("model_version") or "")
        self.mode = o.get("mode", "tensors")
        if self.mode not in MODES:
            raise PredictorError(f"framework option mode must be one of {MODES}, got '{self.mode}'")
        self.load_deadline_s = float(o.get("load_deadline_s", 600.0))
        self.max_samples = int(o.get("max_samples_per_request", 1024))
        self.pool = AgentPool(self.agents, ConnectOptions.from_options(o))
        try:
            metas = self.pool.connect(self.model_name, self.model_version)
            for agent, meta in zip(self.pool.agents, metas, strict=True):
                if self.mode == "sample_index":
                    self._check_sample_index(agent, meta)
                else:
                    self._check_tensors(agent.address, meta)
        except BaseException:
            self.pool.close()
            raise
        log.info("remote model '%s' on %s", self.model_name, ", ".join(self.agents))

    # -- metadata checks ---------------------------------------------------------------------------------------
    def _check_tensors(self, address: str, meta: Any) -> None:
        from mlharness.agent.tensors import datatype_of, dims_match, spec_shape

        where = f"agent {address}, model '{self.model_name}'"
        self._in_names: list[str] = []
        for kind, specs, served, names in (("input", self.config.input_specs, list(meta.inputs), self._in_names),
                                            ("output", self.config.output_specs, list(meta.outputs), None)):
            if kind == "input" and len(served) != len(specs):
                raise AgentError(f"{where}: serves {len(served)} input(s) "
                                 f"({', '.join(t.name for t in served)}), the manifest declares {len(specs)}")
            by_name = {t.name: t for t in served}
            for k, spec in enumerate(specs):
                t = by_name.get(spec.get("name")) if spec.get("name") else (served[k] if k < len(served) else None)
                if t is None:
                    if kind == "output" and not served:
                        continue  # some servers publish no outputs
                    raise AgentError(f"{where}: no {kind} '{spec.get('name') or k}' (it serves: "
                                     f"{', '.join(by_name) or 'none'})")
                want = datatype_of(spec.get("element_type", "float32"))
                if t.datatype and t.datatype != want:
                    raise AgentError(f"{where}: {kind} '{t.name}' is {t.datatype}, the manifest declares "
                                     f"{spec.get('element_type')} ({want})")
                dims = list(t.shape)
                if spec.get("shape") is not None and dims:
                    declared = [-1, *spec_shape(spec["shape"])]
                    if not dims_match(declared, dims):
                        raise AgentError(f"{where}: {kind} '{t.name}' has shape {dims}, the manifest declares "
                                         f"{spec['shape']} per sample ({declared} with the batch axis)")
                if names is not None:
                    names.append(t.name)
        self._out_names = [s.get("name") for s in self.config.output_specs] or [
            n or None for n in self.config.output_names]
        self._requested_outputs = [n for n in self._out_names if n]  # named in every request

    def _check_sample_index(self, agent: Any, meta: Any) -> None:
        from mlharness.agent.server import EXTENSION_QSL

        ins = [(t.name, t.datatype) for t in meta.inputs]
        outs = [(t.name, t.datatype) for t in meta.outputs]
        if ins != [(SAMPLE_INDEX, "INT64")] or outs != [(RESPONSE, "BYTES")] or (
                agent.server is not None and EXTENSION_QSL not in agent.server.extensions):
            raise AgentError(f"agent {agent.address}: model '{self.model_name}' takes {ins} and returns {outs}; "
                             f"LoadGen over the network needs an agent that runs the hooks (start it with "
                             f"--hooks agent)")

    # -- requests ----------------------------------------------------------------------------------------------
    def _request(self, inputs: list[np.ndarray], names: list[str]) -> Any:
        from mlharness.agent.protos import grpc_predict_v2_pb2 as pb

        request = pb.ModelInferRequest(model_name=self.model_name, model_version=self.model_version)
        if self._merger is not None:
            request.parameters[TRACE_PARAMETER].bool_param = True
        for name, arr in zip(names, inputs, strict=True):
            datatype, shape, raw = to_raw(arr)
            request.inputs.add(name=name, datatype=datatype, shape=shape)
            request.raw_input_contents.append(raw)
        return request

    def _decode(self, response: Any, names: list[str | None]) -> list[np.ndarray]:
        raw = response.raw_output_contents
        position = {t.name: i for i, t in enumerate(response.outputs)}
        arrays = []
        for k, name in enumerate(names):
            i = position.get(name) if name else (k if k < len(response.outputs) else None)
            if i is None:
                raise AgentError(f"model '{self.model_name}': the response has no output '{name or k}' (got: "
                                 f"{', '.join(position)})")
            t = response.outputs[i]
            what = f"output '{t.name}'"
            arrays.append(from_raw(t.datatype, list(t.shape), raw[i], what) if raw
                          else from_contents(t.datatype, list(t.shape), t.contents, what))
        return arrays

    def predict(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.mode == "sample_index":
            response = self.pool.infer(self._request([np.asarray(inputs[0], dtype=np.int64)], [SAMPLE_INDEX]))
            return [self._decode(response, [RESPONSE])[0]]
        request = self._request(inputs, self._in_names)
        for name in self._requested_outputs:
            request.outputs.add(name=name)
        return self._decode(self.pool.infer(request), self._out_names)

    # -- LoadGen over the network (mode sample_index) ----------------------------------------------------------
    def submit(self, indices: list[int], done: Callable[[list[bytes] | None, BaseException | None], None]) -> None:
        """Send sample indices without waiting; ``done(responses, None)`` or ``done(None, error)`` follows once."""
        request = self._request([np.asarray(indices, dtype=np.int64)], [SAMPLE_INDEX])

        def finished(response: Any, error: BaseException | None) -> None:
            if error is not None:
                done(None, error)
                return
            try:
                out = self._decode(response, [RESPONSE])[0]
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                done(None, e)
                return
            done(list(out.reshape(-1)), None)

        self.pool.infer_async(request, finished)

    def qsl(self, action: str, indices: list[int]) -> None:
        """Forward LoadGen's QSL load/unload to every live agent (untimed; they pre-process and warm up)."""
        import grpc

        from mlharness.agent.backend import QSL_PARAMETER
        from mlharness.agent.client import rpc_error

        request = self._request([np.asarray(indices, dtype=np.int64)], [SAMPLE_INDEX])
        request.parameters[QSL_PARAMETER].string_param = action
        for agent in self.pool.agents:
            if not agent.alive:
                continue
            try:
                agent.stub.ModelInfer(request, timeout=self.load_deadline_s, metadata=self.pool.opts.metadata)
            except grpc.RpcError as e:
                raise rpc_error(e, agent.address, f"QSL {action} of {len(indices)} samples") from e

    def sut_name(self) -> str:
        servers = [f"{a.server.name} {a.server.version} at {a.address}" if a.server else a.address
                   for a in self.pool.agents]
        return f"mlharness Network SUT: {self.model_name} on " + ", ".join(servers)

    # -- bookkeeping -------------------------------------------------------------------------------------------
    def close(self) -> None:
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()

    def framework_version(self) -> str:
        return importlib.metadata.version("grpcio")

    def remote_agents(self) -> list[dict[str, Any]] | None:
        pool = getattr(self, "pool", None)
        return [a.described() for a in pool.agents] if pool is not None else None

    # -- the agents' spans in the run's trace ------------------------------------------------------------------
    def profile_start(self, tracer: Any) -> None:
        from mlharness.agent.spans import EXTENSION_TRACE, SpanMerger

        silent = [a.address for a in self.pool.agents if a.server is None
                  or EXTENSION_TRACE not in a.server.extensions]
        if silent:
            log.warning("the trace has no spans from %s: only mlharness agents (which announce '%s') time their "
                        "requests; the trace shows this side's spans around each request", ", ".join(silent),
                        EXTENSION_TRACE)
        self._merger = SpanMerger([a.address for a in self.pool.agents])
        self.pool.on_reply = self._on_reply

    def _on_reply(self, agent: Any, response: Any, sent_ns: int, received_ns: int) -> None:
        # on a gRPC thread, before the request's callback: must never raise
        try:
            if TRACE_PARAMETER in response.parameters and self._merger is not None:
                self._merger.add(agent.address, sent_ns, received_ns,
                                 response.parameters[TRACE_PARAMETER].string_param)
        except Exception as e:  # noqa: BLE001 - diagnostics never fail a request
            log.debug("agent %s: its spans are left out: %s", agent.address, e)

    def profile_stop(self, tracer: Any) -> None:
        merger, self._merger = self._merger, None
        self.pool.on_reply = None
        if merger is None:
            return
        names = {}
        for a in self.pool.agents:
            host = (a.facts or {}).get("host") or {}
            pid = (a.facts or {}).get("pid")
            names[a.address] = f"agent {a.address}" + (f" ({host.get('hostname')}, pid {pid})" if pid else "")
        tracer.extra_events.extend(merger.events(tracer, names))

    def computes_off_host(self) -> bool:
        return True  # the agents compute; this process only waits on the network

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(model_name=getattr(self, "model_name", None), mode=getattr(self, "mode", None))
        if getattr(self, "pool", None) is not None:
            d["agents"] = self.pool.describe()
        return d
