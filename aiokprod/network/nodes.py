"""Which node to talk to when any node will do, and how long a connection set-up may take.

Pure bookkeeping with an injected clock, no I/O: ``cluster.py`` feeds it connection events and
asks it for decisions, and tests drive it deterministically.

Two ideas, both from the Java client:

* ``NodeConnectionStates`` (Java's ``ClusterConnectionStates``) keeps, per node, the reconnect
  backoff (``reconnect.backoff.ms`` growing to ``reconnect.backoff.max.ms``) and the bound of the
  next connection set-up — TCP connect plus the ApiVersions handshake — which starts at
  ``socket.connection.setup.timeout.ms`` and doubles after every set-up that failed, up to
  ``socket.connection.setup.timeout.max.ms`` (KIP-601). A successful set-up resets both.
* ``least_loaded_node`` (Java's ``NetworkClient.leastLoadedNode``) picks a node for a request any
  broker can answer (Metadata, InitProducerId): a ready connection with the fewest requests in
  flight, else a node already connecting, else the node whose backoff has elapsed and which was
  tried longest ago. A node that refuses or hangs therefore never holds up the others: it is
  tried once per backoff, and every other node gets its turn in between.

One addition to Java's rule, ``should_dial_another``: while the only candidates are still
connecting and each attempt has run longer than a short stagger, one more node may be dialled in
parallel (the "connection attempt delay" of Happy Eyeballs, RFC 8305), so a bootstrap server that
accepts TCP and never answers costs the stagger, not the whole set-up timeout.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from aiokprod._backoff import ExponentialBackoff

__all__ = [
    "Candidate",
    "ConnectionState",
    "NodeConnectionStates",
    "least_loaded_node",
    "should_dial_another",
]


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"  # no connection and no attempt under way
    CONNECTING = "connecting"  # TCP connect or ApiVersions under way
    READY = "ready"  # connected and versions negotiated


@dataclass(slots=True)
class _NodeState:
    state: ConnectionState = ConnectionState.DISCONNECTED
    # consecutive failures (set-up or disconnect) since the last ready connection: the exponent
    # of the reconnect backoff
    failed_attempts: int = 0
    # consecutive failed set-ups: the exponent of the set-up timeout (KIP-601)
    failed_setups: int = 0
    # when the last attempt started; the least recently tried node goes first
    last_attempt_at: float = float("-inf")
    # no new attempt before this time (the reconnect backoff)
    next_attempt_at: float = float("-inf")
    # the bound of the attempt under way, or of the next one, in milliseconds
    setup_timeout_ms: float = 0.0


class NodeConnectionStates:
    """Per-node reconnect backoff and set-up timeout (Java's ``ClusterConnectionStates``)."""

    def __init__(self, reconnect_backoff: ExponentialBackoff,
                 setup_timeout: ExponentialBackoff) -> None:
        self._reconnect = reconnect_backoff
        self._setup = setup_timeout
        self._nodes: dict[int, _NodeState] = {}

    def _get(self, node: int) -> _NodeState:
        st = self._nodes.get(node)
        if st is None:
            st = self._nodes[node] = _NodeState(setup_timeout_ms=self._setup.backoff_ms(0))
        return st

    def state(self, node: int) -> ConnectionState:
        st = self._nodes.get(node)
        return ConnectionState.DISCONNECTED if st is None else st.state

    def can_connect(self, node: int, now: float) -> bool:
        """True when no attempt is under way and the node's backoff has elapsed."""
        st = self._nodes.get(node)
        return st is None or (st.state is ConnectionState.DISCONNECTED
                              and now >= st.next_attempt_at)

    def delay(self, node: int, now: float) -> float:
        """Seconds until an attempt may start (0 if now, or if one is under way)."""
        st = self._nodes.get(node)
        if st is None or st.state is not ConnectionState.DISCONNECTED:
            return 0.0
        return max(0.0, st.next_attempt_at - now)

    def last_attempt_at(self, node: int) -> float:
        st = self._nodes.get(node)
        return float("-inf") if st is None else st.last_attempt_at

    def next_attempt_at(self, node: int) -> float:
        st = self._nodes.get(node)
        return float("-inf") if st is None else st.next_attempt_at

    def failed_attempts(self, node: int) -> int:
        st = self._nodes.get(node)
        return 0 if st is None else st.failed_attempts

    def connecting(self, node: int, now: float) -> float:
        """An attempt starts now; returns its bound in milliseconds."""
        st = self._get(node)
        st.state = ConnectionState.CONNECTING
        st.last_attempt_at = now
        return st.setup_timeout_ms

    def ready(self, node: int) -> None:
        """Set-up finished: the backoff and the set-up timeout start over."""
        st = self._get(node)
        st.state = ConnectionState.READY
        st.failed_attempts = 0
        st.failed_setups = 0
        st.next_attempt_at = float("-inf")
        st.setup_timeout_ms = self._setup.backoff_ms(0)

    def disconnected(self, node: int, now: float) -> None:
        """The attempt failed or the connection was lost: back off before the next one.

        A failed set-up also doubles the next set-up's bound (Java's
        ``updateConnectionSetupTimeout``); losing a ready connection does not.
        """
        st = self._get(node)
        if st.state is ConnectionState.CONNECTING:
            st.failed_setups += 1
            st.setup_timeout_ms = self._setup.backoff_ms(st.failed_setups)
        st.state = ConnectionState.DISCONNECTED
        st.next_attempt_at = now + self._reconnect.backoff_ms(st.failed_attempts) / 1000
        st.failed_attempts += 1

    def closed_idle(self, node: int) -> None:
        """We closed a healthy connection on purpose (idle, or its broker left): no backoff."""
        st = self._get(node)
        st.state = ConnectionState.DISCONNECTED
        st.next_attempt_at = float("-inf")

    def remove(self, node: int) -> None:
        self._nodes.pop(node, None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """What ``least_loaded_node`` needs to know about one node, at one instant."""

    node_id: int
    ready: bool  # a live connection that can take a request now (not write-paused)
    in_flight: int  # requests on that connection awaiting answers
    connecting: bool  # a set-up is under way
    can_connect: bool  # no attempt under way and the reconnect backoff has elapsed
    last_attempt_at: float = float("-inf")  # when an attempt last started


def least_loaded_node(candidates: Sequence[Candidate], offset: int = 0) -> Candidate | None:
    """The node to send a request any broker can answer to (Java's ``leastLoadedNode``).

    Scans from ``offset`` (the caller rotates it, so ties do not always go to the same node):
    a ready node with nothing in flight wins at once; else the ready node with the fewest
    requests in flight; else a node already connecting; else, among nodes whose backoff has
    elapsed, the one tried longest ago. None when every node is backing off.
    """
    n = len(candidates)
    best_ready: Candidate | None = None
    connecting: Candidate | None = None
    can_connect: Candidate | None = None
    for i in range(n):
        c = candidates[(offset + i) % n]
        if c.ready:
            if c.in_flight == 0:
                return c
            if best_ready is None or c.in_flight < best_ready.in_flight:
                best_ready = c
        elif c.connecting:
            if connecting is None:
                connecting = c
        elif c.can_connect and (can_connect is None
                                or c.last_attempt_at < can_connect.last_attempt_at):
            can_connect = c
    return best_ready or connecting or can_connect


def should_dial_another(candidates: Sequence[Candidate], now: float, stagger: float) -> bool:
    """Whether to start one more attempt beside those under way.

    Yes when no node is ready, at least one is connecting, every attempt under way started more
    than ``stagger`` seconds ago, and some other node may be dialled now.
    """
    if any(c.ready for c in candidates):
        return False
    under_way = [c for c in candidates if c.connecting]
    if not under_way:
        return False
    if any(now - c.last_attempt_at < stagger for c in under_way):
        return False
    return any(c.can_connect for c in candidates)
