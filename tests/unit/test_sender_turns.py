"""SenderTurns: how often a tight send loop hands the event loop to the sender."""

from __future__ import annotations

import pytest

from aiokprod.producer.front.sender_turns import MAX_SPACING_S, SenderTurns


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_linger_zero_gives_a_turn_at_every_batch_event() -> None:
    clock = Clock()
    turns = SenderTurns(0, clock)
    assert all(turns.take() for _ in range(10))


@pytest.mark.parametrize("linger_ms, spacing", [(5, MAX_SPACING_S), (1000, MAX_SPACING_S),
                                                (0.2, 0.0002)])
def test_turns_are_at_least_the_spacing_apart(linger_ms: float, spacing: float) -> None:
    clock = Clock()
    turns = SenderTurns(linger_ms, clock)
    assert turns.take()  # the first batch event always gets one
    clock.now += spacing * 0.99
    assert not turns.take()
    assert not turns.take()
    clock.now += spacing * 0.02  # now past the spacing since the last turn
    assert turns.take()
    assert not turns.take()


def test_refused_events_do_not_push_the_next_turn_back() -> None:
    clock = Clock()
    turns = SenderTurns(5, clock)
    assert turns.take()
    for _ in range(4):  # events inside the spacing are refused but start nothing
        clock.now += MAX_SPACING_S / 5
        assert not turns.take()
    clock.now += MAX_SPACING_S / 5
    assert turns.take()
