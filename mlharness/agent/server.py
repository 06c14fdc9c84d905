"""The agent: a gRPC server speaking the Open Inference Protocol for one model.

Every RPC goes through one error mapping (:func:`status_of`): an :class:`AgentError` carries its gRPC status,
other mlharness errors are INTERNAL with their message, anything else is INTERNAL. Each failed request is logged
as one rate-limited line (:mod:`mlharness.agent.guard`), never with a traceback (at -vv an unexpected error's
traceback follows at DEBUG level); requests that are not valid protocol buffers are answered INVALID_ARGUMENT.
A bearer token, when set, is checked for every RPC by an interceptor; TLS uses the given server certificate and,
with a client CA, requires client certificates. ``stop`` is graceful: ServerReady turns false,
new RPCs are refused (UNAVAILABLE), in-flight ones finish within the grace period.
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from mlharness import __version__
from mlharness.agent.backend import QSL_PARAMETER, SAMPLE_INDEX, ModelBackend, TensorMeta
from mlharness.agent.batching import Batcher
from mlharness.agent.client import PEM_LIMIT
from mlharness.agent.facts import EXTENSION_FACTS, FACTS_PARAMETER, agent_facts, facts_text
from mlharness.agent.guard import RateLimit, Undecodable, add_servicer, tame_grpc_loggers
from mlharness.agent.protos import grpc_predict_v2_pb2 as pb
from mlharness.agent.protos import grpc_predict_v2_pb2_grpc as pb_grpc
from mlharness.agent.spans import EXTENSION_TRACE, TRACE_PARAMETER, request_spans
from mlharness.agent.tensors import dims_match, from_contents, from_raw, to_raw
from mlharness.errors import AgentError, DatasetError, MLHarnessError
from mlharness.fileguard import read_bytes_bounded

log = logging.getLogger(__name__)
# one line per failed request, at most REQUEST_LOG_BURST lines per REQUEST_LOG_INTERVAL_S
request_log = logging.getLogger("mlharness.agent.requests")
REQUEST_LOG_BURST = int(os.environ.get("MLHARNESS_AGENT_LOG_BURST", "10"))
REQUEST_LOG_INTERVAL_S = float(os.environ.get("MLHARNESS_AGENT_LOG_INTERVAL_S", "10"))
REQUEST_LIMIT = RateLimit(REQUEST_LOG_BURST, REQUEST_LOG_INTERVAL_S)
request_log.addFilter(REQUEST_LIMIT)
tame_grpc_loggers(REQUEST_LIMIT)

SERVER_NAME = "mlharness-agent"
EXTENSION_QSL = "mlharness_qsl"  # announced by agents that run the hooks and accept QSL load/unload requests


@dataclass
class AgentConfig:
    manifest: str = "demo"
    framework: str | None = None
    host: str = "127.0.0.1"
    port: int = 8001
    hooks: str = "harness"
    max_batchsize: int | None = None
    max_wait_ms: float = 0.0
    workers: int = 1
    model_name: str | None = None
    scenario: str = "Offline"
    dataset_path: str | None = None
    count: int | None = None
    device: str = "cpu"
    threads: int | None = None
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    rpc_threads: int = 64
    grace_s: float = 30.0


def status_of(e: BaseException) -> tuple[grpc.StatusCode, str]:
    """The one place where failures become gRPC statuses."""
    if isinstance(e, AgentError):
        message = str(e)
        if e.status:
            message = message.removesuffix(f" (status {e.status})")
            return getattr(grpc.StatusCode, e.status, grpc.StatusCode.UNKNOWN), message
        return grpc.StatusCode.INTERNAL, message
    if isinstance(e, DatasetError):
        return grpc.StatusCode.FAILED_PRECONDITION, str(e)
    if isinstance(e, MLHarnessError):
        return grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}"
    return grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}"


def _log_failure(method: str, context: grpc.ServicerContext, code: grpc.StatusCode, message: str,
                 e: BaseException | None) -> None:
    peer = context.peer() if hasattr(context, "peer") else "?"
    if code == grpc.StatusCode.INTERNAL and not isinstance(e, MLHarnessError):
        request_log.error("%s from %s failed with an unexpected error: %s", method, peer, message)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("traceback of the unexpected error", exc_info=e)
    else:
        request_log.warning("%s from %s refused: %s: %s", method, peer, code.name, message)


def _guarded(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Servicer, request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            code, message, error = grpc.StatusCode.INVALID_ARGUMENT, request.message(), None
        else:
            try:
                return method(self, request, context)
            except Exception as e:  # noqa: BLE001 - mapped to a status for the client
                (code, message), error = status_of(e), e
        _log_failure(method.__name__, context, code, message, error)
        context.abort(code, message)


    return wrapper


class _TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

        def deny(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token (metadata 'authorization')")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        got = next((v for k, v in details.invocation_metadata or () if k == "authorization"), "")
        got_bytes = got.encode() if isinstance(got, str) else bytes(got)
        if hmac.compare_digest(got_bytes, self._expected):
            return continuation(details)
        return self._deny


class Servicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, backend: ModelBackend, batcher: Batcher):
        self.backend = backend
        self.batcher = batcher
        self.draining = False
        # what the agent says about itself (mlharness.agent.facts): measured once, here, on the agent's host
        self.facts_text = facts_text(agent_facts(backend.framework, backend.framework_version, backend.platform))
        self._output_names = [t.name for t in backend.outputs]
        self._output_index: dict[str, int] = {}  # output name -> its first position
        for k, t in enumerate(backend.outputs):
            self._output_index.setdefault(t.name, k)

    def _check_model(self, name: str, version: str = "") -> None:
        # an empty name means the one model this agent serves (handy for `mlharness agent info`)
        if name not in ("", self.backend.name):
            raise AgentError(f"model '{name}' is not served here; this agent serves '{self.backend.name}'",
                             "NOT_FOUND")
        if version and version != self.backend.version:
            raise AgentError(f"model '{name}' version '{version}' is not served here (version "
                             f"{self.backend.version})", "NOT_FOUND")

    @_guarded
    def ServerLive(self, request: pb.ServerLiveRequest, context: grpc.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @_guarded
    def ServerReady(self, request: pb.ServerReadyRequest, context: grpc.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=not self.draining)

    @_guarded
    def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.ServicerContext) -> pb.ModelReadyResponse:
        known = request.name in ("", self.backend.name) and request.version in ("", self.backend.version)
        return pb.ModelReadyResponse(ready=known and not self.draining)

    @_guarded
    def ServerMetadata(self, request: pb.ServerMetadataRequest,
                       context: grpc.ServicerContext) -> pb.ServerMetadataResponse:
        extensions = [EXTENSION_FACTS, EXTENSION_TRACE] + ([EXTENSION_QSL] if self.backend.hooks_mode == "agent"
                                                           else [])
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=__version__, extensions=extensions)

    @_guarded
    def ModelMetadata(self, request: pb.ModelMetadataRequest,
                      context: grpc.ServicerContext) -> pb.ModelMetadataResponse:
        self._check_model(request.name, request.version)
        b = self.backend

        def tensors(metas: list[TensorMeta]) -> list[pb.ModelMetadataResponse.TensorMetadata]:
            return [pb.ModelMetadataResponse.TensorMetadata(name=t.name, datatype=t.datatype, shape=t.shape)
                    for t in metas]

        return pb.ModelMetadataResponse(name=b.name, versions=[b.version], platform=b.platform,
                                        inputs=tensors(b.inputs), outputs=tensors(b.outputs))

    @_guarded
    def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.ServicerContext) -> pb.ModelInferResponse:
        arrived = time.perf_counter_ns()
        self._check_model(request.model_name, request.model_version)
        if FACTS_PARAMETER in request.parameters:
            response = pb.ModelInferResponse(model_name=self.backend.name, model_version=self.backend.version,
                                             id=request.id)
            response.parameters[FACTS_PARAMETER].string_param = self.facts_text
            return response
        inputs = self._inputs(request)
        if QSL_PARAMETER in request.parameters:
            self.backend.qsl(request.parameters[QSL_PARAMETER].string_param, inputs[0])
            return pb.ModelInferResponse(model_name=self.backend.name, model_version=self.backend.version,
                                         id=request.id)
        if self.backend.hooks_mode == "agent":
            inputs = [self.backend.check_indices(inputs[0])]
        log.debug("ModelInfer: %d samples", len(inputs[0]))
        if TRACE_PARAMETER not in request.parameters:
            return self._response(request, self.batcher.submit(inputs))
        timings: list[Any] = []
        response = self._response(request, self.batcher.submit(inputs, timings))
        response.parameters[TRACE_PARAMETER].string_param = request_spans(arrived, time.perf_counter_ns(), timings)
        return response

    def _inputs(self, request: pb.ModelInferRequest) -> list[np.ndarray]:
        expected = self.backend.inputs
        got = list(request.inputs)
        if len(got) != len(expected):
            raise AgentError(f"the model takes {len(expected)} input(s) ({', '.join(t.name for t in expected)}), "
                             f"the request has {len(got)}", "INVALID_ARGUMENT")
        raw = request.raw_input_contents
        if raw and len(raw) != len(got):
            raise AgentError(f"{len(raw)} raw_input_contents for {len(got)} inputs", "INVALID_ARGUMENT")
        position = {t.name: i for i, t in enumerate(got)}
        arrays: list[np.ndarray] = []
        for meta in expected:
            j = position.get(meta.name)
            if j is None:
                raise AgentError(f"the request has no input '{meta.name}' (got: {', '.join(position)})",
                                 "INVALID_ARGUMENT")
            t = got[j]
            shape = list(t.shape)
            if meta.name == SAMPLE_INDEX and len(shape) == 2 and shape[1] == 1:
                shape = shape[:1]
            if t.datatype != meta.datatype:
                raise AgentError(f"input '{meta.name}' is {meta.datatype}, the request sends {t.datatype}",
                                 "INVALID_ARGUMENT")
            if meta.dims is not None and not dims_match(meta.shape, shape):
                raise AgentError(f"input '{meta.name}' has shape {meta.shape} (batch first), the request sends "
                                 f"{shape}", "INVALID_ARGUMENT")
            what = f"input '{meta.name}'"
            if not shape or shape[0] == 0:
                raise AgentError(f"{what}: a request needs a batch axis with at least one sample (shape {shape})",
                                 "INVALID_ARGUMENT")
            arr = from_raw(t.datatype, shape, raw[j], what) if raw else from_contents(t.datatype, shape,
                                                                                        t.contents, what)
            if arrays and len(arr) != len(arrays[0]):
                raise AgentError("the inputs of one request must have the same batch size", "INVALID_ARGUMENT")
            arrays.append(arr)
        return arrays

    def _response(self, request: pb.ModelInferRequest, outputs: list[Any]) -> pb.ModelInferResponse:
        index = self._output_index
        wanted = [o.name for o in request.outputs] or self._output_names
        response = pb.ModelInferResponse(model_name=self.backend.name, model_version=self.backend.version,
                                         id=request.id)
        for name in wanted:
            k = index.get(name)
            if k is None:
                raise AgentError(f"the model has no output '{name}' (outputs: {', '.join(self._output_names)})",
                                 "INVALID_ARGUMENT")
            datatype, shape, raw = to_raw(outputs[k])
            response.outputs.add(name=name, datatype=datatype, shape=shape)
            response.raw_output_contents.append(raw)
        return response


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _read(path: str, what: str) -> bytes:
    return read_bytes_bounded(Path(path).expanduser(), what, PEM_LIMIT, error=AgentError)


class AgentServer:
    """Build with a config, then ``start()``; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, config: AgentConfig):
        self.config = config
        if (config.tls_cert is None) != (config.tls_key is None):
            raise AgentError("TLS needs both --tls-cert and --tls-key")
        if config.tls_client_ca and not config.tls_cert:
            raise AgentError("--tls-client-ca needs --tls-cert and --tls-key")
        self.backend = ModelBackend(
            config.manifest, config.framework, config.hooks, config.dataset_path, config.count, config.device,
            config.threads, config.max_batchsize, config.scenario, config.model_name)
        self.batcher = Batcher(self.backend.run, self.backend.max_batchsize, config.max_wait_ms / 1000.0,
                               config.workers, stages=self.backend.stages.take if self.backend.stages else None)
        self.servicer = Servicer(self.backend, self.batcher)
        self.port = 0
        self._server: grpc.Server | None = None
        self._stopped = threading.Event()

    def start(self) -> int:
        c = self.config
        receive, send = self.backend.message_limits()
        options = [("grpc.max_receive_message_length", receive), ("grpc.max_send_message_length", send),
                   ("grpc.so_reuseport", 0)]
        interceptors = [_TokenInterceptor(c.token)] if c.token else []
        server = grpc.server(ThreadPoolExecutor(max_workers=c.rpc_threads, thread_name_prefix="mlharness-agent-rpc"),
                             interceptors=interceptors, options=options)
        add_servicer(self.servicer, server)
        address = _address(c.host, c.port)
        try:
            if c.tls_cert:
                creds = grpc.ssl_server_credentials(
                    [(_read(c.tls_key, "TLS key"), _read(c.tls_cert, "TLS certificate"))],  # type: ignore[arg-type]
                    root_certificates=_read(c.tls_client_ca, "client CA") if c.tls_client_ca else None,
                    require_client_auth=bool(c.tls_client_ca))
                port = server.add_secure_port(address, creds)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as e:
            raise AgentError(f"cannot listen on {address}: {e}") from e
        if not port:
            raise AgentError(f"cannot listen on {address} (in use?)")
        if c.token and not c.tls_cert and c.host not in ("127.0.0.1", "localhost", "::1"):
            log.warning("the bearer token travels in clear text: use --tls-cert/--tls-key off the local host")
        server.start()
        self._server, self.port = server, port
        log.info("serving %s", self.backend.describe())
        return port

    def stop(self, grace_s: float | None = None) -> None:
        """Graceful: refuse new requests, let in-flight ones finish (at most ``grace_s``), release the model."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.servicer.draining = True
        if self._server is not None:
            self._server.stop(self.config.grace_s if grace_s is None else grace_s).wait()
        self.batcher.close()
        REQUEST_LIMIT.flush(log)  # not through request_log: its filter would count the summary too
        log.info("stopped after %d batches (%d samples, largest batch %d)", self.batcher.batches,
                 self.batcher.samples, self.batcher.largest)
        self.backend.close()
