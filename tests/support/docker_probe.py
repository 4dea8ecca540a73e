"""A bounded check that a Docker engine answers, before testcontainers is even imported.

testcontainers (through docker-py) can spend many seconds retrying when there is no engine;
the Kafka-container fixture must skip in well under two seconds on machines without one.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

__all__ = ["docker_unavailable_reason"]

_DEFAULT_SOCKET = "/var/run/docker.sock"


def _ping(sock: socket.socket) -> bool:
    sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    reply = sock.recv(64)
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply


def docker_unavailable_reason(timeout: float = 1.0) -> str | None:
    """None if an engine answered ``/_ping`` within ``timeout``; otherwise why not."""
    host = os.environ.get("DOCKER_HOST", f"unix://{_DEFAULT_SOCKET}")
    url = urlparse(host)
    try:
        if url.scheme == "unix":
            path = url.path or _DEFAULT_SOCKET
            if not os.path.exists(path):
                return f"no Docker engine: socket {path} does not exist"
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(path)
                ok = _ping(sock)
        elif url.scheme in ("tcp", "http"):
            if url.hostname is None:
                return f"no Docker engine: cannot parse DOCKER_HOST={host!r}"
            with socket.create_connection((url.hostname, url.port or 2375), timeout) as sock:
                sock.settimeout(timeout)
                ok = _ping(sock)
        else:
            return f"no Docker engine: unsupported DOCKER_HOST scheme in {host!r}"
    except OSError as exc:
        return f"no Docker engine at {host}: {exc}"
    return None if ok else f"Docker engine at {host} did not answer /_ping with 200"
