"""nodes.py: reconnect backoff, KIP-601 set-up timeouts and least-loaded node choice, no I/O.

Jitter is pinned (``rand=lambda: 0.5`` gives a factor of exactly 1) so every bound is exact.
"""

from __future__ import annotations

import itertools

import pytest

from aiokprod._backoff import ExponentialBackoff
from aiokprod.network.nodes import (
    Candidate,
    ConnectionState,
    NodeConnectionStates,
    least_loaded_node,
    should_dial_another,
)


def states(reconnect: tuple[int, int] = (50, 1000),
           setup: tuple[int, int] = (10_000, 30_000)) -> NodeConnectionStates:
    return NodeConnectionStates(
        ExponentialBackoff(*reconnect, rand=lambda: 0.5),
        ExponentialBackoff(*setup, rand=lambda: 0.5))


def cand(node: int, *, ready: bool = False, in_flight: int = 0, connecting: bool = False,
         can_connect: bool = False, last: float = float("-inf")) -> Candidate:
    return Candidate(node, ready, in_flight, connecting, can_connect, last)


# ---- NodeConnectionStates ---------------------------------------------------------------------


def test_unknown_node_may_connect_at_once() -> None:
    s = states()
    assert s.state(7) is ConnectionState.DISCONNECTED
    assert s.can_connect(7, 0.0)
    assert s.delay(7, 0.0) == 0.0
    assert s.last_attempt_at(7) == float("-inf")


def test_reconnect_backoff_grows_to_its_maximum() -> None:
    s = states(reconnect=(50, 1000))
    now = 100.0
    delays = []
    for _ in range(8):
        s.connecting(1, now)
        assert s.state(1) is ConnectionState.CONNECTING
        assert not s.can_connect(1, now)  # an attempt under way is never doubled
        assert s.delay(1, now) == 0.0
        s.disconnected(1, now)
        delays.append(round(s.delay(1, now), 6))
        assert not s.can_connect(1, now)
        now = s.next_attempt_at(1)
        assert s.can_connect(1, now)
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert s.failed_attempts(1) == 8


def test_setup_timeout_doubles_per_failed_setup_up_to_the_maximum() -> None:
    s = states(setup=(10_000, 30_000))
    bounds = []
    now = 0.0
    for _ in range(4):
        bounds.append(s.connecting(1, now))
        s.disconnected(1, now)
        now = s.next_attempt_at(1)
    bounds.append(s.connecting(1, now))
    assert bounds == pytest.approx([10_000, 20_000, 30_000, 30_000, 30_000])


def test_ready_resets_backoff_and_setup_timeout() -> None:
    s = states(setup=(100, 800))
    for _ in range(3):
        s.connecting(1, 0.0)
        s.disconnected(1, 0.0)
    assert s.connecting(1, 10.0) == 800
    s.ready(1)
    assert s.state(1) is ConnectionState.READY
    assert s.failed_attempts(1) == 0
    assert s.next_attempt_at(1) == float("-inf")
    # losing a ready connection backs off from the start, and does not grow the set-up bound
    s.disconnected(1, 20.0)
    assert s.delay(1, 20.0) == pytest.approx(0.05)
    assert s.connecting(1, 30.0) == 100


def test_losing_a_ready_connection_does_not_grow_the_setup_timeout() -> None:
    s = states(setup=(100, 800))
    for _ in range(3):
        s.connecting(1, 0.0)
        s.ready(1)
        s.disconnected(1, 0.0)
    assert s.connecting(1, 100.0) == 100


def test_closed_idle_reconnects_without_backoff() -> None:
    s = states()
    s.connecting(1, 0.0)
    s.ready(1)
    s.closed_idle(1)
    assert s.state(1) is ConnectionState.DISCONNECTED
    assert s.can_connect(1, 0.0)
    assert s.delay(1, 0.0) == 0.0


def test_remove_forgets_the_node() -> None:
    s = states()
    for node in (1, 2, 3):
        s.connecting(node, 0.0)
        s.disconnected(node, 0.0)
    s.remove(1)
    assert s.can_connect(1, 0.0) and s.failed_attempts(1) == 0
    assert s.failed_attempts(2) == 1 and s.failed_attempts(3) == 1


# ---- least_loaded_node ------------------------------------------------------------------------


def test_empty_and_all_backing_off_give_none() -> None:
    assert least_loaded_node([]) is None
    assert least_loaded_node([cand(1), cand(2)]) is None


def test_ready_idle_node_wins_over_everything() -> None:
    cs = [cand(1, connecting=True), cand(2, can_connect=True), cand(3, ready=True, in_flight=2),
          cand(4, ready=True)]
    assert least_loaded_node(cs).node_id == 4  # type: ignore[union-attr]


def test_fewest_in_flight_among_ready_nodes() -> None:
    cs = [cand(1, ready=True, in_flight=5), cand(2, ready=True, in_flight=1),
          cand(3, ready=True, in_flight=3), cand(4, connecting=True)]
    assert least_loaded_node(cs).node_id == 2  # type: ignore[union-attr]


def test_connecting_preferred_to_a_new_dial() -> None:
    cs = [cand(1, can_connect=True), cand(2, connecting=True), cand(3, can_connect=True)]
    assert least_loaded_node(cs).node_id == 2  # type: ignore[union-attr]


def test_least_recently_tried_node_is_dialled() -> None:
    cs = [cand(1, can_connect=True, last=5.0), cand(2, can_connect=True, last=1.0),
          cand(3, last=0.0),  # backing off: never chosen
          cand(4, can_connect=True, last=3.0)]
    assert least_loaded_node(cs).node_id == 2  # type: ignore[union-attr]


def test_offset_rotates_ties() -> None:
    cs = [cand(n, ready=True) for n in (1, 2, 3)]
    chosen = [least_loaded_node(cs, offset).node_id for offset in range(6)]  # type: ignore[union-attr]
    assert chosen == [1, 2, 3, 1, 2, 3]
    # equally loaded busy nodes rotate too: the scan keeps the first of equals it meets
    busy = [cand(n, ready=True, in_flight=1) for n in (1, 2, 3)]
    assert {least_loaded_node(busy, o).node_id for o in range(3)} == {1, 2, 3}  # type: ignore[union-attr]
    dialable = [cand(n, can_connect=True) for n in (1, 2, 3)]
    assert {least_loaded_node(dialable, o).node_id for o in range(3)} == {1, 2, 3}  # type: ignore[union-attr]


def test_a_failing_node_takes_turns_with_the_others() -> None:
    """Driving the pair as the cluster does: a refusing node is never picked twice in a row
    while another node's backoff has elapsed."""
    s = states(reconnect=(50, 1000))
    nodes = [1, 2, 3]
    now = 0.0
    picks = []
    for step in range(9):
        cs = [cand(n, can_connect=s.can_connect(n, now), last=s.last_attempt_at(n))
              for n in nodes]
        choice = least_loaded_node(cs, step)
        assert choice is not None
        picks.append(choice.node_id)
        s.connecting(choice.node_id, now)
        s.disconnected(choice.node_id, now)  # every node refuses
        now += 0.001
        while all(not s.can_connect(n, now) for n in nodes):
            now = min(s.next_attempt_at(n) for n in nodes)
    assert sorted(picks[:3]) == [1, 2, 3]
    assert all(a != b for a, b in itertools.pairwise(picks))


# ---- should_dial_another ----------------------------------------------------------------------


def test_dial_another_only_after_the_stagger() -> None:
    cs = [cand(1, connecting=True, last=10.0), cand(2, can_connect=True)]
    assert not should_dial_another(cs, 10.1, 0.25)
    assert should_dial_another(cs, 10.25, 0.25)


def test_no_extra_dial_when_a_node_is_ready_or_nothing_connects() -> None:
    assert not should_dial_another(
        [cand(1, connecting=True, last=0.0), cand(2, ready=True), cand(3, can_connect=True)],
        10.0, 0.25)
    assert not should_dial_another([cand(1, can_connect=True), cand(2, can_connect=True)],
                                   10.0, 0.25)


def test_no_extra_dial_while_the_newest_attempt_is_young_or_nobody_can_be_dialled() -> None:
    old_and_new = [cand(1, connecting=True, last=0.0), cand(2, connecting=True, last=9.9),
                   cand(3, can_connect=True)]
    assert not should_dial_another(old_and_new, 10.0, 0.25)
    assert should_dial_another(old_and_new, 10.2, 0.25)
    backing_off = [cand(1, connecting=True, last=0.0), cand(2)]
    assert not should_dial_another(backing_off, 10.0, 0.25)
