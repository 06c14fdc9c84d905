"""`mlharness agent serve|info`. Light at import time: grpc, the stubs and the frameworks load inside handlers."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

TOKEN_ENV = "MLHARNESS_AGENT_TOKEN"  # same name as mlharness.agent.client.TOKEN_ENV (not imported: it pulls grpc)
TLS_CA_ENV = "MLHARNESS_AGENT_TLS_CA"  # same name as mlharness.agent.client.TLS_CA_ENV
CONNECT_OPTIONS = ("token", "tls_ca", "tls_cert", "tls_key", "tls_server_name")


def add_connect_args(p: Any) -> None:
    """The client's connection options, the same on `agent info` and `run --agent`."""
    p.add_argument("--token", default=None, help=f"bearer token the agents require (default: ${TOKEN_ENV})")
    p.add_argument("--tls-ca", default=None, help=f"CA bundle (PEM) that signed the agents' certificates; "
                   f"enables TLS (default: ${TLS_CA_ENV})")
    p.add_argument("--tls-cert", default=None, help="client certificate (PEM), for agents started with "
                   "--tls-client-ca")
    p.add_argument("--tls-key", default=None, help="client private key (PEM)")
    p.add_argument("--tls-server-name", default=None, help="the name to check in the agents' certificates, if "
                   "not the host")


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """The connection options given on the command line (None: the manifest's option or the environment)."""
    from mlharness.errors import SettingsError

    options = {k: getattr(args, k, None) for k in CONNECT_OPTIONS}
    if (options["tls_cert"] is None) != (options["tls_key"] is None):
        raise SettingsError("a client certificate needs both --tls-cert and --tls-key")
    given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None]
    if given and hasattr(args, "agent") and not (args.agent or args.sut_server):
        raise SettingsError(f"{', '.join(given)} apply to agents: add --agent HOST:PORT (or --network lon "
                            f"--sut-server HOST:PORT); a manifest with framework 'remote' takes them as "
                            f"framework.options")
    return options


def quiet_grpc(verbose: int) -> None:
    """gRPC's C core logs to stderr on its own (TLS handshake failures, connection resets): silence it unless -v
    (-v: its errors, -vv: its default). Must run before grpc is imported; a GRPC_VERBOSITY the user set wins."""
    if verbose < 2:
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR" if verbose else "NONE")


def register(sub: argparse._SubParsersAction) -> None:
    agent = sub.add_parser("agent", help="serve a model over the Open Inference Protocol (KServe v2 gRPC), or "
                           "query a server that speaks it").add_subparsers(dest="action", required=True)
    s = agent.add_parser("serve", help="serve a manifest's predictor (default: the demo)")
    s.add_argument("--manifest", default="demo", help="model manifest: a path or a built-in name (default: demo)")
    s.add_argument("--framework", default=None, help="one of the manifest's framework variants")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1; 0.0.0.0 for all)")
    s.add_argument("--port", type=int, default=8001, help="port (default: 8001; 0 picks a free one)")
    s.add_argument("--hooks", choices=("harness", "agent"), default="harness",
                   help="harness: requests carry pre-processed tensors, responses raw outputs; agent: requests "
                   "carry sample indices and the agent runs the manifest's hooks (LoadGen over the network)")
    s.add_argument("--max-batchsize", type=int, default=None, help="largest merged batch (default: the "
                   "manifest's batch size for --scenario)")
    s.add_argument("--max-wait-ms", type=float, default=0.0, help="how long a partial batch waits for more "
                   "concurrent requests (default: 0)")
    s.add_argument("--workers", type=int, default=1, help="batches run at once (default: 1)")
    s.add_argument("--model-name", default=None, help="name the model is served under (default: the manifest's)")
    s.add_argument("--scenario", default="Offline", help="ctx['scenario'] for the hooks and the default batch size")
    s.add_argument("--dataset-path", default=None, help="--hooks agent: folder of the dataset files")
    s.add_argument("--count", type=int, default=None, help="--hooks agent: use only the first N samples")
    s.add_argument("--device", default="cpu")
    s.add_argument("--threads", type=int, default=None, help="framework intra-op threads")
    s.add_argument("--token", default=os.environ.get(TOKEN_ENV), help=f"require 'authorization: Bearer TOKEN' "
                   f"(default: ${TOKEN_ENV})")
    s.add_argument("--tls-cert", default=None, help="server certificate (PEM); enables TLS")
    s.add_argument("--tls-key", default=None, help="server private key (PEM)")
    s.add_argument("--tls-client-ca", default=None, help="require client certificates signed by this CA (PEM)")
    s.add_argument("--grace-s", type=float, default=30.0, help="on SIGTERM/SIGINT, how long in-flight requests "
                   "may take to finish")
    s.set_defaults(func=cmd_serve)

    i = agent.add_parser("info", help="server and model metadata of an Open Inference Protocol server")
    i.add_argument("address", help="host:port")
    i.add_argument("--model", default="", help="model name (an mlharness agent answers for its model without one)")
    add_connect_args(i)
    i.add_argument("--timeout", type=float, default=10.0)
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=cmd_info)


def _need_grpc() -> None:
    import importlib.util

    from mlharness.errors import AgentError

    if importlib.util.find_spec("grpc") is None:
        raise AgentError("agents need the Python package 'grpcio' (pip install 'mlharness[remote]')")


def cmd_serve(args: argparse.Namespace, console: Any) -> int:
    import signal
    import threading

    _need_grpc()
    from mlharness.agent.server import AgentConfig, AgentServer

    config = AgentConfig(
        manifest=args.manifest, framework=args.framework, host=args.host, port=args.port, hooks=args.hooks,
        max_batchsize=args.max_batchsize, max_wait_ms=args.max_wait_ms, workers=args.workers,
        model_name=args.model_name, scenario=args.scenario, dataset_path=args.dataset_path, count=args.count,
        device=args.device, threads=args.threads, token=args.token, tls_cert=args.tls_cert, tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca, grace_s=args.grace_s,
    )
    stop = threading.Event()
    # installed before the model loads, so a SIGTERM during start-up still stops cleanly
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = AgentServer(config)
    port = server.start()
    b = server.backend
    console.print(f"mlharness agent: model '{b.name}' ({b.framework}, hooks: {b.hooks_mode}, batch "
                  f"{b.max_batchsize}, wait {config.max_wait_ms:g} ms, TLS {'on' if config.tls_cert else 'off'}, "
                  f"token {'on' if config.token else 'off'}) listening on {args.host}:{port}", highlight=False,
                  soft_wrap=True)
    sys.stdout.flush()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        console.print("mlharness agent: stopping (in-flight requests finish first)", highlight=False)
        sys.stdout.flush()
        server.stop()
    return 0


def cmd_info(args: argparse.Namespace, console: Any) -> int:
    _need_grpc()
    import grpc

    from mlharness.agent.client import Agent, ConnectOptions, rpc_error
    from mlharness.agent.protos import grpc_predict_v2_pb2 as pb

    opts = ConnectOptions.from_options({**connect_options(args), "connect_timeout_s": args.timeout})
    agent = Agent(args.address, opts)
    stub, md, t = agent.stub, opts.metadata, args.timeout
    info: dict[str, Any] = {"address": args.address}
    what = "ServerLive"
    try:
        info["live"] = stub.ServerLive(pb.ServerLiveRequest(), timeout=t, metadata=md).live
        what = "ServerReady"
        info["ready"] = stub.ServerReady(pb.ServerReadyRequest(), timeout=t, metadata=md).ready
        what = "ServerMetadata"
        sm = stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=t, metadata=md)
        info["server"] = {"name": sm.name, "version": sm.version, "extensions": list(sm.extensions)}
        what = "ModelMetadata"
        mm = stub.ModelMetadata(pb.ModelMetadataRequest(name=args.model), timeout=t, metadata=md)
        info["model"] = {
            "name": mm.name, "versions": list(mm.versions), "platform": mm.platform,
            "inputs": [{"name": x.name, "datatype": x.datatype, "shape": list(x.shape)} for x in mm.inputs],
            "outputs": [{"name": x.name, "datatype": x.datatype, "shape": list(x.shape)} for x in mm.outputs],
        }
        what = "ModelReady"
        info["model"]["ready"] = stub.ModelReady(pb.ModelReadyRequest(name=mm.name), timeout=t, metadata=md).ready
    except grpc.RpcError as e:
        error = rpc_error(e, args.address, what, opts)
        if what == "ModelMetadata" and not args.model:
            raise type(error)(f"{error.message} (servers other than mlharness agents need --model NAME)") from e
        raise error from e
    finally:
        agent.channel.close()
    if args.json:
        console.print_json(json.dumps(info))
        return 0
    s, m = info["server"], info["model"]
    console.print(f"server  {s['name']} {s['version']} at {args.address} (live: {info['live']}, ready: "
                  f"{info['ready']}){', extensions: ' + ', '.join(s['extensions']) if s['extensions'] else ''}",
                  highlight=False)
    console.print(f"model   {m['name']} versions {', '.join(m['versions']) or '-'} platform {m['platform'] or '-'} "
                  f"(ready: {m['ready']})", highlight=False)
    for kind in ("inputs", "outputs"):
        for x in m[kind]:
            console.print(f"  {kind[:-1]:<6} {x['name']:<20} {x['datatype']:<6} {x['shape']}", highlight=False)
    return 0
