"""Dialling a broker: TCP (every resolved address in turn), socket buffer sizes, TLS.

``BrokerConnection.open`` takes the dialler as a parameter (``TransportConnector``) so tests
can hand it a scripted transport and run without sockets.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable

__all__ = ["TransportConnector", "tcp_connect"]


#: Opens a transport to (host, port) whose protocol comes from the factory, with the socket's
#: send and receive buffer sizes (-1: the OS default). Tests pass a scripted one (no sockets).
TransportConnector = Callable[[str, int, Callable[[], asyncio.Protocol], int, int],
                              Awaitable[None]]


async def tcp_connect(host: str, port: int, protocol_factory: Callable[[], asyncio.Protocol],
                      send_buffer_bytes: int = -1, receive_buffer_bytes: int = -1, *,
                      ssl_context: ssl.SSLContext | None = None) -> None:
    """Connect over TCP, trying each resolved address in turn (``use_all_dns_ips``).

    The buffer sizes are set before connecting, as the Java client does: the receive buffer
    decides the TCP window scale, which is fixed during the handshake. With ``ssl_context`` the
    TLS handshake follows, verifying the certificate against ``host`` (the name or address the
    client dialled) when the context checks host names.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    last: OSError | None = None
    for family, type_, proto, _, address in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            if send_buffer_bytes >= 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
            if receive_buffer_bytes >= 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        if ssl_context is None:
            await loop.create_connection(protocol_factory, sock=sock)
        else:
            await loop.create_connection(protocol_factory, sock=sock, ssl=ssl_context,
                                         server_hostname=host)
        return
    raise last if last is not None else OSError(f"no address found for {host}:{port}")
