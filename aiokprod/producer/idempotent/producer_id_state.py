"""The producer id and epoch's state machine (docs/idempotence.md, "Producer id and epoch").

:class:`ProducerIdState` and the table :data:`TRANSITIONS` from (state, event) to the next
state, each row naming the rule it implements; an event the table does not list raises
:class:`~aiokprod.errors.IllegalStateError`. :class:`ProducerIdHolder` holds the id, the
epoch and the count of assignments (the *generation*) and fires the events: when an
InitProducerId is needed and with which pair, what an answer, a refused bump or an exhausted
epoch does. ``IdempotenceManager`` creates and owns one, and does what each partition does
about it; the holder reads the partitions only to know whether a batch is still on the wire.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokprod.errors import IllegalStateError
from aiokprod.producer.partition import Partitions
from aiokprod.producer.sequences import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
)

__all__ = [
    "TRANSITIONS",
    "Event",
    "ProducerIdHolder",
    "ProducerIdState",
    "Transition",
    "next_state",
]

log = logging.getLogger(__name__)


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


class ProducerIdHolder:
    """The producer id, epoch and generation, and the events that move them.

    One per idempotent producer, created and owned by its ``IdempotenceManager``. The facts
    are plain attributes, read by the manager on every drained batch (a property there
    would be a call per batch); only this class sets them.
    """

    __slots__ = ("_bump_supported", "_bump_via_broker", "_client_id", "_clock", "_last_pair",
                 "_partitions", "epoch_bumps", "fatal_error", "fresh_producer_ids",
                 "generation", "last_bump_at", "producer_epoch", "producer_id", "state")

    def __init__(self, partitions: Partitions[Any], *, clock: Callable[[], float] = time.monotonic,
                 bump_via_init_producer_id: bool = False, client_id: str = "") -> None:
        # the producer's partitions: a fresh id waits until none has a batch on the wire
        self._partitions = partitions
        self._clock = clock
        self._bump_via_broker = bump_via_init_producer_id  # KIP-360 instead of a local bump
        self._bump_supported = True  # cleared by on_bump_unsupported: later bumps get new ids
        self._client_id = client_id
        self.state = ProducerIdState.UNINITIALIZED
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        # Counts producer id/epoch assignments (InitProducerId answers, local bumps). A
        # partition whose generation differs is stale and restarts at sequence 0, even when
        # the new pair equals the old one (a broker that lost its state hands it out again).
        self.generation = 0
        # The last pair we held, kept when it is dropped for a fresh id: an InitProducerId
        # answer equal to it proves the broker forgot us, so no old sequence means anything.
        self._last_pair: tuple[int, int] | None = None
        # Why the producer stopped (FATAL), else None; the first cause is kept.
        self.fatal_error: BaseException | None = None
        self.epoch_bumps = 0  # local or KIP-360 bumps
        self.fresh_producer_ids = 0  # InitProducerId answers with a new id
        self.last_bump_at: float | None = None  # clock time of the last epoch bump or new id

    def _any_on_wire(self) -> bool:
        """A batch of the producer is on the wire (a fresh id waits for none to be)."""
        return any(p.wire for p in self._partitions)

    def fire(self, event: Event) -> None:
        """Move along the table; an event it does not list raises IllegalStateError."""
        target = next_state(self.state, event)
        if target is not self.state:
            log.debug("[client %s] producer id state %s -> %s on %s", self._client_id,
                      self.state.name, target.name, event.name)
        self.state = target

    def fail_fatally(self, error: BaseException) -> None:
        """Stop for good: nothing is sent any more. The first cause is kept."""
        if self.fatal_error is None:
            self.fatal_error = error
            log.error("[client %s] idempotent producer failed fatally: %s", self._client_id,
                      error)
        self.fire(Event.FATAL_ERROR)

    # ---- producer id ----------------------------------------------------------------------

    def needs_producer_id(self) -> bool:
        """The sender must (keep trying to) send InitProducerId before anything else.

        A fresh id replacing one we held waits until no batch is on the wire (librdkafka's
        drain-before-reset): a broker that lost our state may hand out the same id and epoch
        again, and a batch still travelling under the old pair would then land as if it were
        the new numbering's — written twice, or ahead of batches appended before it. The wait
        is bounded: every request on the wire is answered or fails by request.timeout.ms.
        """
        state = self.state
        if state in (ProducerIdState.UNINITIALIZED, ProducerIdState.INITIALIZING):
            fresh_id = True
        elif self._bump_via_broker and state is ProducerIdState.BUMPING:
            return True
        elif self._bump_via_broker and state is ProducerIdState.BUMP_REQUIRED:
            # init_producer_id_params turns this into a fresh-id request in these two cases
            fresh_id = not self._bump_supported or self.producer_epoch >= MAX_PRODUCER_EPOCH
        else:
            return False
        return not fresh_id or self._last_pair is None or not self._any_on_wire()

    def init_producer_id_params(self) -> tuple[int, int]:
        """(producer id, epoch) for the InitProducerId the sender is about to send.

        Call it right before each attempt: it records that a request is under way. (-1, -1)
        asks for a fresh id; the current pair asks the broker to bump the epoch (KIP-360).
        """
        if self.state is ProducerIdState.BUMP_REQUIRED and self._bump_via_broker:
            if self.producer_epoch >= MAX_PRODUCER_EPOCH:
                self._forget_producer_id(Event.EPOCH_EXHAUSTED)
            elif not self._bump_supported:
                self._forget_producer_id(Event.BUMP_UNSUPPORTED)
            else:
                self.fire(Event.BUMP_REQUEST_SENT)
                return self.producer_id, self.producer_epoch
        if self.state is ProducerIdState.UNINITIALIZED:
            self.fire(Event.INIT_REQUEST_SENT)
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if self.state is ProducerIdState.INITIALIZING:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if self.state is ProducerIdState.BUMPING:
            return self.producer_id, self.producer_epoch
        raise IllegalStateError(
            f"idempotent producer: no InitProducerId is needed in state {self.state.name}")

    def take_pair(self, producer_id: int, producer_epoch: int) -> bool:
        """Take the id and epoch an InitProducerId answer (or an EndTxn, KIP-890) brought.
        True when it repeats the pair held last: the broker lost our state (what the
        partitions do about that is the manager's)."""
        if producer_id < 0 or not 0 <= producer_epoch <= MAX_PRODUCER_EPOCH:
            raise ValueError(f"invalid producer id/epoch from the broker: {producer_id}/"
                             f"{producer_epoch}")
        self.fire(Event.PRODUCER_ID_RECEIVED)
        if producer_id == self.producer_id:
            self.epoch_bumps += 1
        else:
            self.fresh_producer_ids += 1
        state_lost = self._last_pair == (producer_id, producer_epoch)
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._last_pair = (producer_id, producer_epoch)
        self.generation += 1
        self.last_bump_at = self._clock()
        log.info("[client %s] producer id %d epoch %d", self._client_id, producer_id,
                 producer_epoch)
        return state_lost

    def take_broker_bump(self, producer_id: int, producer_epoch: int) -> bool:
        """Transaction version 2 (KIP-890): every EndTxn answer carries a new epoch (or id)
        the coordinator bumped itself. Taken like a KIP-360 bump; returns what ``take_pair``
        does."""
        if self.state is ProducerIdState.READY:
            self.fire(Event.BUMP_REQUESTED)
        self.init_producer_id_params()  # BUMP_REQUIRED -> BUMPING (or a fresh id's state)
        return self.take_pair(producer_id, producer_epoch)

    def on_init_producer_id_failed(self, error: BaseException) -> None:
        """InitProducerId failed: retriable errors are tried again, others are fatal."""
        if getattr(error, "retriable", False):
            self.fire(Event.INIT_FAILED)
        else:
            self.fail_fatally(error)

    def on_bump_unsupported(self) -> None:
        """The broker cannot bump an epoch (InitProducerId < v3): take a fresh id instead,
        now and for every later bump. Every partition then restarts at sequence 0."""
        self._bump_supported = False
        self._forget_producer_id(Event.BUMP_UNSUPPORTED)

    def _forget_producer_id(self, event: Event) -> None:
        self.fire(event)
        log.info("[client %s] dropping producer id %d epoch %d (%s): a new one is needed",
                 self._client_id, self.producer_id, self.producer_epoch, event.name)
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH

    def bump_locally(self, now: float | None) -> None:
        """A pending bump in local mode: the idempotent producer keeps its epoch itself."""
        if self.state is not ProducerIdState.BUMP_REQUIRED or self._bump_via_broker:
            return
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            self._forget_producer_id(Event.EPOCH_EXHAUSTED)
            return
        self.fire(Event.EPOCH_BUMPED_LOCALLY)
        self.producer_epoch += 1
        self.generation += 1
        self._last_pair = (self.producer_id, self.producer_epoch)
        self.epoch_bumps += 1
        self.last_bump_at = self._clock() if now is None else now
        log.info("[client %s] producer id %d: epoch bumped to %d", self._client_id,
                 self.producer_id, self.producer_epoch)
