"""How long mlharness waits for a server it connects to (a Ray cluster's client server or GCS, a PostgreSQL
database) before it gives up naming the address: ``MLHARNESS_CONNECT_TIMEOUT`` seconds, 10 by default.

A server that accepts the TCP connection and never answers (a stuck process, a port forwarded to nothing) would
otherwise hold the command for ever: neither Ray nor libpq bounds that wait by default.

Once connected, a driver watches the Ray head (:class:`HeadWatch`): a head that stops answering for
``MLHARNESS_HEAD_LOST_AFTER`` seconds (10 by default) is lost, and the driver stops waiting on it. Ray's own driver
waits 60 s for a lost GCS and then aborts the process, so nothing the driver held would be recorded.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time

from mlharness.errors import MLHarnessError, SettingsError

ENV = "MLHARNESS_CONNECT_TIMEOUT"
DEFAULT_S = 10.0


class ConnectTimeout(MLHarnessError):
    """A server did not answer within the connect timeout; exit 2."""


HEAD_LOST_ENV = "MLHARNESS_HEAD_LOST_AFTER"
HEAD_LOST_DEFAULT_S = 10.0
PROBE_EVERY_S = 1.0  # how often the head is probed while work runs on the cluster


def _seconds(env: str, default: float, what: str) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise SettingsError(f"{env}={text!r}: give the seconds {what}, a finite number greater than 0 "
                            f"(default {default:g})")
    return value


def connect_timeout() -> float:
    """The connect timeout in seconds: ``MLHARNESS_CONNECT_TIMEOUT`` (finite, > 0) or 10."""
    return _seconds(ENV, DEFAULT_S, "to wait for a server to answer")


def head_lost_after() -> float:
    """How long the Ray head may stay unreachable before the driver gives it up: ``MLHARNESS_HEAD_LOST_AFTER``
    (finite, > 0) or 10 seconds. Ray's driver aborts itself after 60 s without its GCS, so the bound is kept
    well below that."""
    return _seconds(HEAD_LOST_ENV, HEAD_LOST_DEFAULT_S, "the Ray head may stay unreachable before it is lost")


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


def split_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``ray://HOST:PORT/...`` -> (host, port); ValueError naming it otherwise."""
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class HeadWatch:
    """A thread that opens a TCP connection to the Ray head (its GCS, or its client server for ``ray://``) every
    second, while the driver's work runs. Once no connection has succeeded for ``after`` seconds, :attr:`lost`
    is set and :attr:`reason` names the address; the watch then ends.

    A TCP connect answers both ways a head is lost: a killed GCS on a live machine refuses at once, a machine that
    is gone (powered off, cut off the network) lets the connect time out. Ray's own calls would instead wait (60 s
    for the GCS), holding the driver."""

    def __init__(self, address: str, after: float, what: str = "the Ray head"):
        self.host, self.port = split_host_port(address)
        self.address, self.after, self.what = address.split("://", 1)[-1].split("/", 1)[0], after, what
        self.lost = threading.Event()
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mlharness-head-watch", daemon=True)
        self._thread.start()

    def answers(self) -> bool:
        """One probe: does the head accept a TCP connection within a second (or ``after``, if shorter)?"""
        try:
            with socket.create_connection((self.host, self.port), timeout=min(PROBE_EVERY_S, self.after)):
                return True
        except OSError:
            return False

    def _watch(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(min(PROBE_EVERY_S, self.after / 2)):
            if self.answers():
                last = time.monotonic()
            elif time.monotonic() - last >= self.after:
                self.reason = (f"{self.what} at {self.address} stopped answering (no connection for "
                               f"{self.after:g} s, {HEAD_LOST_ENV})")
                self.lost.set()
                return

    def stop(self) -> None:
        self._stop.set()
