"""How long mlharness waits for a server it connects to (a Ray cluster's client server or GCS, a PostgreSQL
database) before it gives up naming the address: ``MLHARNESS_CONNECT_TIMEOUT`` seconds, 10 by default.

A server that accepts the TCP connection and never answers (a stuck process, a port forwarded to nothing) would
otherwise hold the command for ever: neither Ray nor libpq bounds that wait by default.
"""

from __future__ import annotations

import math
import os

from mlharness.errors import MLHarnessError, SettingsError

ENV = "MLHARNESS_CONNECT_TIMEOUT"
DEFAULT_S = 10.0


class ConnectTimeout(MLHarnessError):
    """A server did not answer within the connect timeout; exit 2."""


def connect_timeout() -> float:
    """The connect timeout in seconds: ``MLHARNESS_CONNECT_TIMEOUT`` (finite, > 0) or 10."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{ENV}={text!r}: give the seconds to wait for a server to answer, a finite number "
                            f"greater than 0 (default {DEFAULT_S:g})")
    return value


def expired(what: str, address: str, seconds: float, hint: str = "") -> ConnectTimeout:
    return ConnectTimeout(f"{what} at {address} did not answer within {seconds:g} s (the connect timeout, "
                          f"{ENV}){'; ' + hint if hint else ''}")


def probe_grpc(host_port: str, what: str, seconds: float, hint: str = "") -> None:
    """Wait until a gRPC server at ``host_port`` completes its handshake, at most ``seconds``: a TCP listener
    that never speaks (or nothing at all) is a :class:`ConnectTimeout` naming the address."""
    import grpc

    channel = grpc.insecure_channel(host_port)
    try:
        grpc.channel_ready_future(channel).result(timeout=seconds)
    except grpc.FutureTimeoutError:
        raise expired(what, host_port, seconds, hint) from None
    finally:
        channel.close()
