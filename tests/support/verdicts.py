"""A partition's verdict as a drain reaches it, for tests that drive idempotence alone.

The sender asks through ``SendRules`` and the accumulator's drain; a unit test of the
idempotence rules has no accumulator, so this runs the same steps around the same question:
``maintain`` and the facts before it, the F3 give-up between two askings, then the partition's
own ``sequence_verdict``.
"""

from __future__ import annotations

from typing import Any

from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.partition import GIVE_UP_FIRST, SEND, SendFacts

__all__ = ["may_send", "take"]


def may_send(m: IdempotenceManager, target: Any, now: float | None = None) -> bool:
    """Would a drain let ``target`` go? ``target``: a batch at its partition's head, or a
    partition (``topic``, ``partition``), asking about a new batch not made yet."""
    if now is None:
        now = m._clock()
    m.maintain(now)
    facts = SendFacts()
    m.fill(facts)
    p = m.partition_state(target)
    batch = target if hasattr(target, "base_sequence") else None
    verdict = p.sequence_verdict(batch, now, facts)
    if verdict == GIVE_UP_FIRST:
        m.give_up_unrenumberable(p)
        verdict = p.sequence_verdict(batch, now, facts)
    return verdict == SEND


def take(m: IdempotenceManager, batch: Any) -> None:
    """What a drain does with a batch its verdict let go: numbered (``SendRules.taken``),
    then on the wire (``PartitionProducer.take_head``; the stand-in is in no queue)."""
    m.assign_sequence(batch)
    batch.owner.wire.append(batch)
