"""Connections to one or more Open Inference Protocol servers, shared by the remote predictor and the network QDL.

Requests go to the live agent with the fewest outstanding requests. A request that fails because its agent
went away (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED) marks that agent dead and is sent once more to another
live agent; any other failure, or a second one, is an :class:`AgentError` naming the gRPC status. Both a
blocking (:meth:`AgentPool.infer`) and a callback (:meth:`AgentPool.infer_async`) path are offered; either is
safe to call from many threads at once.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from mlharness.agent.facts import (
    EXTENSION_FACTS,
    FACTS_PARAMETER,
    MAX_FACTS_BYTES,
    describe_agent,
    parse_facts,
)
from mlharness.agent.protos import grpc_predict_v2_pb2 as pb
from mlharness.agent.protos import grpc_predict_v2_pb2_grpc as pb_grpc
from mlharness.errors import AgentError
from mlharness.fileguard import read_bytes_bounded

PEM_LIMIT = 16 << 20  # a key, a certificate chain or a CA bundle: the system bundle is a few hundred KiB

log = logging.getLogger(__name__)

TOKEN_ENV = "MLHARNESS_AGENT_TOKEN"
TLS_CA_ENV = "MLHARNESS_AGENT_TLS_CA"
RETRIABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})


@dataclass
class ConnectOptions:
    token: str | None = None  # sent as "authorization: Bearer <token>"
    tls_ca: str | None = None  # PEM bundle that signs the agents' certificates; enables TLS
    tls_cert: str | None = None  # client certificate and key, for agents that verify clients
    tls_key: str | None = None
    tls_server_name: str | None = None  # the name to check in the agent's certificate, if not the host
    deadline_s: float = 60.0  # per request
    connect_timeout_s: float = 10.0

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ConnectOptions:
        known = {"token", "tls_ca", "tls_cert", "tls_key", "tls_server_name", "deadline_s", "connect_timeout_s"}
        kw = {k: options[k] for k in known if options.get(k) is not None}
        kw.setdefault("token", os.environ.get(TOKEN_ENV) or None)
        kw.setdefault("tls_ca", os.environ.get(TLS_CA_ENV) or None)
        for k in ("deadline_s", "connect_timeout_s"):
            if k in kw:
                kw[k] = float(kw[k])
        return cls(**kw)

    @functools.cached_property  # sent with every request: built once
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def _read(path: str | None, what: str) -> bytes | None:
    if not path:
        return None
    return read_bytes_bounded(Path(path).expanduser(), what, PEM_LIMIT, error=AgentError)


def make_channel(address: str, opts: ConnectOptions, max_receive: int = -1) -> grpc.Channel:
    # the agent bounds message sizes; the client accepts whatever the agent accepted to send (except where the
    # caller bounds an answer it does not trust to be small: the agent's facts)
    options: list[tuple[str, Any]] = [("grpc.max_send_message_length", -1),
                                      ("grpc.max_receive_message_length", max_receive)]
    if opts.tls_ca or opts.tls_cert:
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(opts.tls_ca, "TLS CA bundle"),
            private_key=_read(opts.tls_key, "TLS client key"),
            certificate_chain=_read(opts.tls_cert, "TLS client certificate"),
        )
        if opts.tls_server_name:
            options.append(("grpc.ssl_target_name_override", opts.tls_server_name))
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


def rpc_error(e: grpc.RpcError, address: str, what: str, opts: ConnectOptions | None = None) -> AgentError:
    """The error to report for a failed RPC; with ``opts`` (set-up calls), a connection failure is checked for a
    TLS/plaintext mismatch and named as such."""
    code = e.code() if hasattr(e, "code") else None
    detail = e.details() if hasattr(e, "details") else str(e)
    name = code.name if code is not None else "UNKNOWN"
    hint = ""
    if code == grpc.StatusCode.UNAUTHENTICATED:
        hint = f" (pass the agent's token: --token, framework option 'token' or ${TOKEN_ENV})"
    elif code == grpc.StatusCode.UNAVAILABLE:
        mismatch = tls_mismatch(address, opts) if opts is not None else None
        if mismatch:
            return AgentError(f"agent {address}: {what} failed: {mismatch} (gRPC said: {detail})", name)
        hint = " (is the agent running, and is it the right host:port?)"
    return AgentError(f"agent {address}: {what} failed: {detail}{hint}", name)


def tls_mismatch(address: str, opts: ConnectOptions) -> str | None:
    """A sentence naming a TLS/plaintext mismatch with the agent at ``address``, or None if there is none (or the
    agent cannot be reached at all)."""
    from mlharness.agent.tls_probe import speaks_tls

    tls = speaks_tls(address, timeout_s=min(opts.connect_timeout_s, 3.0))
    client_tls = bool(opts.tls_ca or opts.tls_cert)
    if tls is True and not client_tls:
        return (f"the agent at {address} speaks TLS and this client does not; pass --tls-ca CA.pem (the CA bundle "
                f"that signed the agent's certificate; also framework option 'tls_ca' or ${TLS_CA_ENV})")
    if tls is False and client_tls:
        return (f"the agent at {address} does not speak TLS (plaintext) and this client does; drop --tls-ca "
                f"(and 'tls_ca', ${TLS_CA_ENV}), or start the agent with --tls-cert/--tls-key")
    return None


class Agent:
    """One endpoint: its channel, stub and load."""

    def __init__(self, address: str, opts: ConnectOptions):
        self.address = address
        self.channel = make_channel(address, opts)
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        self.outstanding = 0
        self.alive = True
        self.served = 0
        self.server: pb.ServerMetadataResponse | None = None
        self.model: pb.ModelMetadataResponse | None = None
        self.facts: dict[str, Any] | None = None  # what the agent says about itself (mlharness.agent.facts)
        self.facts_error: str | None = None

    def fetch_facts(self, opts: ConnectOptions, model_name: str) -> None:
        """Ask an mlharness agent what it is, over a channel that refuses a large answer; never raises."""
        if self.server is None or EXTENSION_FACTS not in self.server.extensions:
            self.facts_error = f"the server does not announce '{EXTENSION_FACTS}' (not an mlharness agent)"
            log.info("agent %s: %s; the run records no facts of its host", self.address, self.facts_error)
            return
        channel = make_channel(self.address, opts, max_receive=MAX_FACTS_BYTES + 4096)
        try:
            request = pb.ModelInferRequest(model_name=model_name)
            request.parameters[FACTS_PARAMETER].bool_param = True
            response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
                request, timeout=opts.connect_timeout_s, metadata=opts.metadata)
            if FACTS_PARAMETER not in response.parameters:
                raise ValueError(f"the answer has no '{FACTS_PARAMETER}' parameter")
            self.facts = parse_facts(response.parameters[FACTS_PARAMETER].string_param)
        except grpc.RpcError as e:
            self.facts_error = f"{e.code().name}: {e.details()}"
        except ValueError as e:
            self.facts_error = str(e)
        finally:
            channel.close()
        if self.facts_error:
            log.warning("agent %s: its facts are left out of the run's metadata: %s", self.address,
                        self.facts_error)

    def described(self) -> dict[str, Any]:
        return describe_agent(self.address, self.facts, self.facts_error)


class AgentPool:
    def __init__(self, addresses: list[str], opts: ConnectOptions):
        if not addresses:
            raise AgentError("no agents given (host:port)")
        self.opts = opts
        self.agents = [Agent(a, opts) for a in addresses]
        self._lock = threading.Lock()
        self._turn = 0
        # called with (agent, response, sent ns, received ns) after each answered request (a traced run)
        self.on_reply: Callable[[Agent, pb.ModelInferResponse, int, int], None] | None = None

    # -- set-up ------------------------------------------------------------------------------------------------
    def connect(self, model_name: str, model_version: str = "") -> list[pb.ModelMetadataResponse]:
        """ServerReady, ModelReady and ModelMetadata on every agent; an unreachable agent, or a model (or a
        version of it) that is not served, fails the run here, before LoadGen starts."""
        md, timeout = self.opts.metadata, self.opts.connect_timeout_s
        model = f"'{model_name}'" + (f" version '{model_version}'" if model_version else "")
        named = "model name and version" if model_version else "model name"
        for agent in self.agents:
            what = "ServerReady"
            try:
                if not agent.stub.ServerReady(pb.ServerReadyRequest(), timeout=timeout, metadata=md).ready:
                    raise AgentError(f"agent {agent.address} is not ready", "UNAVAILABLE")
                what = "ServerMetadata"
                agent.server = agent.stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=timeout, metadata=md)
                what = f"ModelReady({model})"
                ready = agent.stub.ModelReady(pb.ModelReadyRequest(name=model_name, version=model_version),
                                              timeout=timeout, metadata=md)
                if not ready.ready:
                    raise AgentError(f"agent {agent.address}: model {model} is not ready there (is it the "
                                     f"{named} the agent serves?)", "UNAVAILABLE")
                what = f"ModelMetadata({model})"
                request = pb.ModelMetadataRequest(name=model_name, version=model_version)
                agent.model = agent.stub.ModelMetadata(request, timeout=timeout, metadata=md)
            except grpc.RpcError as e:
                raise rpc_error(e, agent.address, what, self.opts) from e
            agent.fetch_facts(self.opts, model_name)
        return [a.model for a in self.agents]  # type: ignore[misc]

    def close(self) -> None:
        for agent in self.agents:
            agent.channel.close()

    def describe(self) -> list[dict[str, Any]]:
        return [{"address": a.address, "alive": a.alive, "requests": a.served,
                 "server": f"{a.server.name} {a.server.version}" if a.server else None} for a in self.agents]

    # -- load balancing ----------------------------------------------------------------------------------------
    def _pick(self, exclude: Agent | None) -> Agent | None:
        with self._lock:
            live = [a for a in self.agents if a.alive and a is not exclude]
            if not live:
                return None
            self._turn += 1
            start = self._turn % len(live)
            best = min(live[start:] + live[:start], key=lambda a: a.outstanding)
            best.outstanding += 1
            return best

    def _done(self, agent: Agent, error: grpc.RpcError | None) -> bool:
        """Book a finished request; True when it failed in a way another agent may fix."""
        with self._lock:
            agent.outstanding -= 1
            agent.served += 1
            if error is None or error.code() not in RETRIABLE:
                return False
            if agent.alive:
                agent.alive = False
                others = any(a.alive for a in self.agents)
                log.warning("agent %s failed (%s: %s); %s", agent.address, error.code().name, error.details(),
                            "sending its requests to the other agents" if others else "no other agent is left")
            return True

    def _none_left(self, last: AgentError | None) -> AgentError:
        dead = ", ".join(a.address for a in self.agents if not a.alive)
        msg = f"no live agent left to send the request to (failed: {dead})"
        if last is not None:
            msg += f"; last error: {str(last).removesuffix(f' (status {last.status})')}"
        return AgentError(msg, "UNAVAILABLE")

    # -- requests ----------------------------------------------------------------------------------------------
    def infer(self, request: pb.ModelInferRequest, deadline_s: float | None = None) -> pb.ModelInferResponse:
        """Blocking ModelInfer with one retry on another agent."""
        timeout = deadline_s or self.opts.deadline_s
        exclude: Agent | None = None
        last: AgentError | None = None
        for _attempt in range(2):
            agent = self._pick(exclude)
            if agent is None:
                raise self._none_left(last)
            sent = time.perf_counter_ns()
            try:
                response = agent.stub.ModelInfer(request, timeout=timeout, metadata=self.opts.metadata)
            except grpc.RpcError as e:
                last = rpc_error(e, agent.address, "ModelInfer")
                if not self._done(agent, e):
                    raise last from e
                exclude = agent
                continue
            self._done(agent, None)
            if self.on_reply is not None:
                self.on_reply(agent, response, sent, time.perf_counter_ns())
            return response
        raise last  # type: ignore[misc]

    def infer_async(self, request: pb.ModelInferRequest,
                    done: Callable[[pb.ModelInferResponse | None, AgentError | None], None],
                    deadline_s: float | None = None) -> None:
        """Non-blocking ModelInfer: ``done(response, None)`` or ``done(None, error)`` is called exactly once, on a
        gRPC thread (or on this one when no agent is left)."""
        self._send_async(request, done, deadline_s or self.opts.deadline_s, None, 0, None)

    def _send_async(self, request: pb.ModelInferRequest, done: Callable[..., None], timeout: float,
                    exclude: Agent | None, attempt: int, last: AgentError | None) -> None:
        agent = self._pick(exclude)
        if agent is None:
            done(None, self._none_left(last))
            return
        sent = time.perf_counter_ns()
        future = agent.stub.ModelInfer.future(request, timeout=timeout, metadata=self.opts.metadata)

        def finished(f: grpc.Future) -> None:
            try:
                response = f.result()
            except grpc.RpcError as e:
                error = rpc_error(e, agent.address, "ModelInfer")
                if self._done(agent, e) and attempt == 0:
                    self._send_async(request, done, timeout, agent, 1, error)
                else:
                    done(None, error)
                return
            except BaseException as e:  # noqa: BLE001 - a callback must always report back
                self._done(agent, None)
                done(None, AgentError(f"agent {agent.address}: ModelInfer failed: {e}"))
                return
            self._done(agent, None)
            if self.on_reply is not None:
                self.on_reply(agent, response, sent, time.perf_counter_ns())
            done(response, None)

        future.add_done_callback(finished)
