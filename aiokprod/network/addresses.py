"""``bootstrap.servers``: reading the list of brokers to dial first, and resolving it.

Lives in the network layer, which dials these addresses; ``aiokprod.config`` validates the
setting with the same function, so both accept exactly the same inputs (a bad entry is a
``ConfigError`` naming the setting, whichever of them read it).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Sequence

from aiokprod.errors import ConfigError, KafkaConnectionError
from aiokprod.network.errors import map_exceptions

__all__ = ["canonical_names", "parse_bootstrap", "parse_bootstrap_servers"]


def _fail(value: object, allowed: str) -> ConfigError:
    return ConfigError(
        f"Invalid value {value!r} for configuration bootstrap.servers (bootstrap_servers): "
        f"{allowed}")


def _parse_address(entry: str, given: object) -> str:
    if entry.startswith("["):
        host, sep, port = entry[1:].partition("]:")
    else:
        host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise _fail(given, f'entry {entry!r} is not "host:port"')
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_bootstrap_servers(value: object) -> tuple[str, ...]:
    """``bootstrap.servers`` as a string or a list → normalised ``"host:port"`` entries."""
    if isinstance(value, str):
        entries: list[object] = list(value.split(","))
    elif isinstance(value, Sequence):
        entries = list(value)
    else:
        raise _fail(value, 'expected "host:port[,host:port...]" or a list')
    servers: list[str] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise _fail(value, f"entry {entry!r} is not a string")
        if entry.strip():
            servers.append(_parse_address(entry.strip(), value))
    if not servers:
        raise _fail(value, "at least one host:port is required")
    return tuple(servers)


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """'h1:9092,h2:9093' or ['h1:9092'] → [(host, port)] (a ``ConfigError``, i.e. a
    ``ValueError``, naming bootstrap.servers on junk)."""
    result: list[tuple[str, int]] = []
    for entry in parse_bootstrap_servers(servers):
        host, _, port = entry.rpartition(":")
        result.append((host.strip("[]"), int(port)))
    return result


async def canonical_names(servers: Sequence[tuple[str, int]], who: str) -> list[tuple[str, int]]:
    """Each host replaced by the canonical names of all its addresses (Java resolves every
    address and takes ``getCanonicalHostName()``), e.g. so a Kerberos principal matches the
    broker's name; an address without a reverse name is kept as an address. A host that does
    not resolve is a ``KafkaConnectionError`` (``who`` names the client)."""
    loop = asyncio.get_running_loop()
    resolved: list[tuple[str, int]] = []
    for host, port in servers:
        where = f"{who} cannot resolve bootstrap server {host}:{port} " \
                "(client.dns.lookup=resolve_canonical_bootstrap_servers_only)"
        with map_exceptions({OSError: functools.partial(_unresolvable, where)}):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for *_, address in infos:
            try:
                name, _ = await loop.getnameinfo((str(address[0]), port), socket.NI_NAMEREQD)
            except OSError:  # no reverse name: the address stands for itself
                name = str(address[0])
            if (name, port) not in resolved:
                resolved.append((name, port))
    return resolved


def _unresolvable(where: str, exc: BaseException) -> KafkaConnectionError:
    return KafkaConnectionError(f"{where}: {exc}")
