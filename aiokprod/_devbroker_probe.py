"""The two blocking Kafka requests the embedded broker's owner sends it: ApiVersions and Metadata.

Apart from :mod:`aiokprod.devbroker` so that module keeps one job (owning the Tansu process)
and this one another: a request on a fresh socket and the few answer fields readiness and topic
checks need. Standard library plus aiokprod's generated protocol classes only; see
:mod:`aiokprod.devbroker` for why these probes do not go through the producer's network layer.
:class:`PartitionInfo` lives here because Metadata answers build it; import it from
:mod:`aiokprod.devbroker`, its public home.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import ProtocolError
from aiokprod.protocol import (
    ApiVersionsRequest,
    MetadataRequest,
    decode_response,
    encode_request,
)

__all__ = ["MetadataView", "PartitionInfo", "WireError", "api_versions", "metadata"]


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as the broker's Metadata reports it; tests assert on leaders."""

    partition: int
    leader: int
    error_code: int


# Its public home, for reprs and pickles; set after the class is built because @dataclass reads
# the defining module (sys.modules[cls.__module__]) while it builds the class.
PartitionInfo.__module__ = "aiokprod.devbroker"


class WireError(Exception):
    """A probe request failed at the socket or framing level (the broker is not usable yet)."""


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise WireError("connection closed by broker")
        chunks += chunk
    return bytes(chunks)


def _round_trip(host: str, port: int, request: Any, version: int, *, timeout: float) -> Any:
    """One request on a fresh blocking socket, decoded with the generated protocol classes.

    Blocking on purpose: the broker is started and probed from synchronous code (fixtures, the
    CLI) before any event loop exists.
    """
    correlation_id = 1
    frame = encode_request(request, version, correlation_id, "aiokprod-devbroker")
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(frame)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            payload = _recv_exact(sock, size)
        got, response = decode_response(payload, request.RESPONSE_TYPE, version)
    except (OSError, ProtocolError) as exc:
        raise WireError(str(exc)) from exc
    if got != correlation_id:
        raise WireError(f"correlation id {got} != {correlation_id}")
    return response


def api_versions(host: str, port: int, timeout: float) -> dict[int, tuple[int, int]]:
    response = _round_trip(host, port, ApiVersionsRequest(), 0, timeout=timeout)
    if response.error_code != ErrorCode.NONE:
        raise WireError(f"ApiVersions error code {response.error_code}")
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


@dataclass(frozen=True)
class MetadataView:
    """The parts of a Metadata response the dev broker needs."""

    cluster_id: str | None
    # (topic error code, partitions) per topic name the broker returned.
    topics: dict[str, tuple[int, list[PartitionInfo]]]


def metadata(host: str, port: int, topics: list[str], timeout: float) -> MetadataView:
    """Metadata v4 for the named topics, with auto-creation off.

    v4 is the first version that can say "do not auto-create": Tansu, like Kafka, creates a
    topic that an older Metadata request names, so merely looking would create it. v2+ also
    carries the cluster id the readiness check compares.
    """
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False)
    response = _round_trip(host, port, request, 4, timeout=timeout)
    found: dict[str, tuple[int, list[PartitionInfo]]] = {}
    for topic in response.topics:
        partitions = [PartitionInfo(p.partition_index, p.leader_id, p.error_code)
                      for p in topic.partitions]
        if topic.name is not None:
            found[topic.name] = (topic.error_code, sorted(partitions, key=lambda p: p.partition))
    return MetadataView(response.cluster_id, found)
