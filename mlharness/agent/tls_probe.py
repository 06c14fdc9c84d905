"""Does the server at host:port speak TLS? A TLS handshake without verifying anything tells."""

from __future__ import annotations

import socket
import ssl


def split_address(address: str) -> tuple[str, int]:
    """host:port, [v6]:port, or a gRPC target such as ipv4:host:port / dns:///host:port."""
    target = address.split("///", 1)[-1]
    for scheme in ("ipv4:", "ipv6:", "dns:"):
        target = target.removeprefix(scheme)
    host, _, port = target.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def speaks_tls(address: str, timeout_s: float = 3.0) -> bool | None:
    """True when a TLS handshake with the server succeeds (or fails only for want of a client certificate),
    False when it connects but the handshake fails, None when it cannot be reached (or the address is odd)."""
    try:
        host, port = split_address(address)
    except ValueError:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None
    try:
        with context.wrap_socket(raw, server_hostname=None, do_handshake_on_connect=False) as tls:
            tls.do_handshake()
        return True
    except ssl.SSLError as e:
        # a server that requires client certificates speaks TLS all the same
        return "CERTIFICATE_REQUIRED" in str(e).upper() or "HANDSHAKE_FAILURE" in str(e).upper()
    except OSError:
        return False
    finally:
        raw.close()
