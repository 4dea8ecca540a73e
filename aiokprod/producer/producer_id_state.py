"""Where an idempotent producer's id and epoch stand: :class:`ProducerIdState` and the table
:data:`TRANSITIONS` from (state, event) to the next state, each row naming the rule it
implements (docs/idempotence.md, "Producer id and epoch"). An event the table does not list
raises :class:`~aiokprod.errors.IllegalStateError`. ``IdempotenceManager`` fires the events.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiokprod.errors import IllegalStateError

__all__ = ["TRANSITIONS", "Event", "ProducerIdState", "Transition", "next_state"]


class ProducerIdState(enum.Enum):
    """Where the producer id and epoch stand."""

    #: No producer id: InitProducerId(-1, -1) is needed before anything is sent.
    UNINITIALIZED = "uninitialized"
    #: InitProducerId for a fresh id is under way.
    INITIALIZING = "initializing"
    #: The id and epoch are usable: new batches are stamped with them.
    READY = "ready"
    #: A partition needs a new epoch; applied before the next drain (or sent to the broker).
    BUMP_REQUIRED = "bump_required"
    #: InitProducerId(current id, epoch) is under way (KIP-360 mode only).
    BUMPING = "bumping"
    #: Unusable for good: every later send fails with ``fatal_error``.
    FATAL = "fatal"


class Event(enum.Enum):
    """What can happen to the producer id."""

    INIT_REQUEST_SENT = "init_request_sent"
    BUMP_REQUEST_SENT = "bump_request_sent"
    PRODUCER_ID_RECEIVED = "producer_id_received"
    INIT_FAILED = "init_failed"  # a retriable InitProducerId failure
    BUMP_REQUESTED = "bump_requested"
    EPOCH_BUMPED_LOCALLY = "epoch_bumped_locally"
    EPOCH_EXHAUSTED = "epoch_exhausted"
    BUMP_UNSUPPORTED = "bump_unsupported"
    FATAL_ERROR = "fatal_error"


@dataclass(frozen=True)
class Transition:
    """One row of the table: where an event leads, and the rule that says so."""

    target: ProducerIdState
    rule: str


_S = ProducerIdState
_E = Event

#: (state, event) → next state. Anything else is illegal: next_state raises IllegalStateError.
TRANSITIONS: dict[tuple[ProducerIdState, Event], Transition] = {
    (_S.UNINITIALIZED, _E.INIT_REQUEST_SENT): Transition(
        _S.INITIALIZING, "InitProducerId: the broker assigns the producer id"),
    (_S.INITIALIZING, _E.PRODUCER_ID_RECEIVED): Transition(
        _S.READY, "InitProducerId answered: producer id and epoch known, sending may start"),
    (_S.INITIALIZING, _E.INIT_FAILED): Transition(
        _S.UNINITIALIZED, "Java TransactionManager: a retriable InitProducerId error is retried"),
    (_S.READY, _E.BUMP_REQUESTED): Transition(
        _S.BUMP_REQUIRED, "docs/idempotence.md step 1b/6/8a/8b: bump epoch and reset sequences"),
    (_S.BUMP_REQUIRED, _E.BUMP_REQUESTED): Transition(
        _S.BUMP_REQUIRED, "docs/idempotence.md step 8: one bump serves every partition"),
    (_S.BUMPING, _E.BUMP_REQUESTED): Transition(
        _S.BUMPING, "docs/idempotence.md step 8: the bump under way serves this too"),
    (_S.UNINITIALIZED, _E.BUMP_REQUESTED): Transition(
        _S.UNINITIALIZED, "docs/idempotence.md: a new producer id resets every sequence anyway"),
    (_S.INITIALIZING, _E.BUMP_REQUESTED): Transition(
        _S.INITIALIZING, "docs/idempotence.md: a new producer id resets every sequence anyway"),
    (_S.BUMP_REQUIRED, _E.EPOCH_BUMPED_LOCALLY): Transition(
        _S.READY, "Java: the idempotent producer keeps its epoch itself (check B3)"),
    (_S.BUMP_REQUIRED, _E.EPOCH_EXHAUSTED): Transition(
        _S.UNINITIALIZED, "the epoch is int16: past 32767 request a new producer id"),
    (_S.BUMP_REQUIRED, _E.BUMP_REQUEST_SENT): Transition(
        _S.BUMPING, "KIP-360: InitProducerId with the current PID and epoch bumps the epoch"),
    (_S.BUMPING, _E.PRODUCER_ID_RECEIVED): Transition(
        _S.READY, "KIP-360: the broker returned the bumped epoch"),
    (_S.BUMPING, _E.INIT_FAILED): Transition(
        _S.BUMP_REQUIRED, "Java TransactionManager: a retriable InitProducerId error is retried"),
    (_S.BUMPING, _E.BUMP_UNSUPPORTED): Transition(
        _S.UNINITIALIZED, "KIP-360 fallback: a broker without the bump gives a new PID instead"),
    (_S.BUMP_REQUIRED, _E.BUMP_UNSUPPORTED): Transition(
        _S.UNINITIALIZED, "KIP-360 fallback: a broker without the bump gives a new PID instead"),
    **{
        (state, _E.FATAL_ERROR): Transition(
            _S.FATAL, "after a fatal error nothing more is sent: close and build a new producer")
        for state in ProducerIdState
    },
}


def next_state(state: ProducerIdState, event: Event) -> ProducerIdState:
    """The state ``event`` leads to from ``state``; raises IllegalStateError if none."""
    transition = TRANSITIONS.get((state, event))
    if transition is None:
        raise IllegalStateError(
            f"idempotent producer: event {event.name} is not allowed in state {state.name}")
    return transition.target
