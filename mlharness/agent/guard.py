"""What an agent does with requests it cannot use: answer with the right gRPC status, log one short line.

Anyone who reaches the port can send anything, so a bad request must cost the agent's log one line at most:
:class:`RateLimit` lets ``burst`` lines through per ``interval_s`` and then counts, and the next line that gets
through says how many similar ones were suppressed. Requests that do not even decode as protocol buffers are
caught in the deserializer (:func:`add_servicer`), so they are answered INVALID_ARGUMENT by the servicer like
any other bad request, not logged with a traceback by gRPC. gRPC's own Python loggers get the same treatment
(:func:`tame_grpc_loggers`): one line per record, no traceback, rate-limited.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from mlharness.agent.protos import grpc_predict_v2_pb2 as pb

SERVICE = "inference.GRPCInferenceService"
METHODS = {  # method -> (request class, response class)
    "ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
    "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
    "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
    "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
    "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
    "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
}
MAX_LINE = 300  # characters of a request's error message that reach the log


class Undecodable:
    """Stands in for a request whose bytes are not a valid message of the method's type."""

    def __init__(self, method: str, size: int, error: BaseException):
        self.method, self.size, self.error = method, size, error

    def message(self) -> str:
        return f"the {self.method} request ({self.size} bytes) is not a valid protocol buffer message: {self.error}"


class RateLimit(logging.Filter):
    """At most ``burst`` records per ``interval_s``; the first record let through after a suppression carries a
    "(suppressed K similar messages)" suffix, and :meth:`flush` logs what is still pending."""

    def __init__(self, burst: int = 10, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.burst, self.interval_s, self.clock = burst, interval_s, clock
        self._lock = threading.Lock()
        self._window_start = -float("inf")
        self._in_window = 0
        self.suppressed = 0  # pending: not yet reported
        self.suppressed_total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            now = self.clock()
            if now - self._window_start >= self.interval_s:
                self._window_start, self._in_window = now, 0
            if self._in_window >= self.burst:
                self.suppressed += 1
                self.suppressed_total += 1
                return False
            self._in_window += 1
            pending, self.suppressed = self.suppressed, 0
        one_line(record)
        if pending:
            record.msg = f"{record.msg} (suppressed {pending} similar messages)"
        return True

    def flush(self, logger: logging.Logger) -> None:
        """Log the pending count on ``logger`` (one this filter is not attached to)."""
        with self._lock:
            pending, self.suppressed = self.suppressed, 0
        if pending:
            logger.warning("suppressed %d similar messages", pending)


def one_line(record: logging.LogRecord) -> None:
    """Fold a record into one bounded line, dropping any traceback."""
    text = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        e = record.exc_info[1]
        text = f"{text}: {type(e).__name__}: {e}"
    text = " ".join(text.split())
    if len(text) > MAX_LINE:
        text = text[:MAX_LINE] + "..."
    record.msg, record.args, record.exc_info, record.exc_text, record.stack_info = text, None, None, None, None


def _deserializer(method: str, cls: Any) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as e:  # protobuf raises DecodeError; upb may raise others
            return Undecodable(method, len(data), e)

    return deserialize


def add_servicer(servicer: Any, server: grpc.Server) -> None:
    """Register ``servicer``'s methods like the generated ``add_...Servicer_to_server``, with deserializers that
    hand an :class:`Undecodable` to the method instead of failing inside gRPC."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(getattr(servicer, name), request_deserializer=_deserializer(
            name, req), response_serializer=resp.SerializeToString)
        for name, (req, resp) in METHODS.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


GRPC_LOGGERS = ("grpc._server", "grpc._common", "grpc._channel")


def tame_grpc_loggers(limit: RateLimit) -> None:
    """gRPC's Python side logs failures it catches with full tracebacks: one rate-limited line each instead."""
    for name in GRPC_LOGGERS:
        logger = logging.getLogger(name)
        if limit not in logger.filters:
            logger.addFilter(limit)
