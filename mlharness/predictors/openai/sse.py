"""Server-Sent Events parsed from the bytes a network read returns, as cheaply as Python allows.

A read may hold part of an event, one event or many: :class:`SSEParser.feed` splits what has arrived on the blank
line that ends an event (``b"\\n\\n"``) and returns the ``data`` of every complete event in one pass, as bytes,
which the JSON parser takes as they are. The common event of a completion stream, one ``data: {...}`` line, is
cut out without a per-line loop; anything else (comments such as ``: ping``, other fields, multi-line data,
``\\r\\n`` or ``\\r`` line ends) follows the SSE specification's rules line by line. A line or event longer than
the limit is refused (:class:`~mlharness.predictors.openai.http.LineTooLong`): a server streaming without line
ends is not buffered without end.
"""

from __future__ import annotations

from mlharness.predictors.openai.http import MAX_LINE, LineTooLong

MAX_EVENT = 16 * MAX_LINE  # one event's bytes, however many lines it has


class SSEParser:
    """Incremental: bytes in (:meth:`feed`, then :meth:`end` at the end of the body), each event's data out."""

    __slots__ = ("_pending", "_limit", "_cr")

    def __init__(self, limit: int = MAX_LINE):
        self._pending = b""
        self._limit = limit
        self._cr = False  # the server ends lines with \r: normalise every read

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event that ``chunk`` completes (comments and empty events give none)."""
        if not self._cr and b"\r" in chunk:
            self._cr = True
        buf = self._pending + chunk if self._pending else chunk
        if self._cr:
            buf, hold = _newlines(buf)
        else:
            hold = b""
        events = buf.split(b"\n\n")
        rest = events.pop()
        self._pending = rest + hold
        if len(self._pending) > self._limit:
            self._check_pending()
        out: list[bytes] = []
        for event in events:
            if event.startswith(b"data: ") and b"\n" not in event:
                out.append(event[6:])
            elif event:
                data = _event_data(event)
                if data is not None:
                    out.append(data)
        return out

    def end(self) -> list[bytes]:
        """The body ended: an event without its final blank line still counts (as the line reader did)."""
        rest, self._pending = self._pending.rstrip(b"\r"), b""
        if self._cr:
            rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        data = _event_data(rest.rstrip(b"\n")) if rest.strip() else None
        return [data] if data is not None else []

    def _check_pending(self) -> None:
        last_line = self._pending.rsplit(b"\n", 1)[-1]
        if len(last_line) > self._limit:
            raise LineTooLong(f"a line of more than {self._limit} bytes")
        if len(self._pending) > MAX_EVENT:
            raise LineTooLong(f"an event of more than {MAX_EVENT} bytes")


def _newlines(buf: bytes) -> tuple[bytes, bytes]:
    """``\\r\\n`` and ``\\r`` made ``\\n``; a final ``\\r`` (maybe half of ``\\r\\n``) is held back for the next read."""
    hold = b""
    if buf.endswith(b"\r"):
        buf, hold = buf[:-1], b"\r"
    return buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), hold


def _event_data(event: bytes) -> bytes | None:
    """The data of one event's lines by the specification's rules: ``data`` lines joined with ``\\n``, comments
    and other fields skipped, one space after the colon dropped; None when it has no data line."""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        field, colon, value = line.partition(b":")
        if field == b"data":
            data.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(data) if data else None
