"""Choosing a partition: murmur2 for keys, uniform sticky (KIP-480/794) for the rest.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions``, bit-for-bit the Java client's
rule, so a key lands on the same partition whichever client wrote it (librdkafka's
``murmur2_random`` partitioner agrees; the tests check against it). The hash is in ``murmur2``.

Records without a key (or all records with ``partitioner.ignore.keys``) stick to one partition
until ``batch.size`` bytes went to it and every batch queued for it is full, or twice
``batch.size`` went to it, then a new one is drawn (docs/batching.md, P2; Java's
``enableSwitch``). Sticking fills batches instead of spreading single records over every
partition; switching on a batch boundary leaves no small batch behind to be sent alone when it
lingered out; switching after a batch's worth keeps the load uniform over time. With adaptive
partitioning the draw is weighted against partitions whose queues are long, using the queue
sizes the accumulator reports; with ``partitioner.availability.timeout.ms`` partitions whose
leader has not drained data for that long are left out of the draw. The accumulator also answers
whether a partition's last batch is full (``last_batch``); without it bytes alone decide.

Partition ids are assumed to be ``0 .. n-1`` (Kafka never leaves holes), as Java assumes when it
takes ``hash % numPartitions`` as the partition id. Explicit ``partition=`` is the producer's
business and never reaches this module. No I/O and no clock: times come in as arguments and the
random source is injected.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiokprod._murmur2 import _murmur2_u32
from aiokprod.hooks import Partitioner

if TYPE_CHECKING:
    from aiokprod.config import ProducerConfig

__all__ = [
    "BuiltinPartitioner",
    "LastBatch",
    "NodeLatencyStats",
    "PartitionLoadStats",
    "PartitionerCallable",
    "QueuedBatch",
    "StickyStatistics",
]

#: A user partitioner: ``(topic, key_bytes, all_partitions, available_partitions) -> partition``
#: (the public name is :class:`aiokprod.hooks.Partitioner`).
PartitionerCallable = Partitioner


class _Filling(Protocol):
    @property
    def full(self) -> bool:
        """Set once a record like the last one appended would not fit (or one was refused)."""


class QueuedBatch(Protocol):
    """What the partitioner reads of a partition's last queued batch (a ``ProducerBatch``):
    whether another record would still go into it. Plain attributes, not ``is_full()``: the
    partitioner reads them for every record while it waits for the batch to fill, and a call
    cost several times more."""

    @property
    def sealed(self) -> object | None:
        """Set once the batch was drained (sent): nothing more goes into it."""

    @property
    def builder(self) -> _Filling:
        """The batch's record builder."""


#: ``(topic, partition) -> its last queued batch, or None when none is queued``
LastBatch = Callable[[str, int], "QueuedBatch | None"]

@dataclass(slots=True)
class NodeLatencyStats:
    """When a leader last had data ready and when it last accepted (drained) data, in ms.

    The gap ``ready - drain`` is how long a broker has had data waiting that it could not take;
    past ``partitioner.availability.timeout.ms`` its partitions leave the sticky draw.
    """

    # Last time the sender found data ready for this node.
    ready_time_ms: float
    # Last time the sender could drain data to this node.
    drain_time_ms: float


@dataclass(frozen=True, slots=True)
class PartitionLoadStats:
    """Java's cumulative frequency table (CFT) for a weighted draw over partitions.

    ``cumulative_frequency[i]`` is the running sum of ``max_queue + 1 - queue_size`` over the
    first ``i + 1`` entries, so a uniform draw in ``[0, cumulative_frequency[-1])`` lands on
    partition ``partition_ids[i]`` with probability proportional to its free room.
    """

    cumulative_frequency: tuple[int, ...]
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StickyStatistics:
    """What the partitioner does for one topic (for tests, logs and ``__repr__``)."""

    topic: str
    # The partition unkeyed records currently go to; None until one is drawn.
    sticky_partition: int | None
    # Bytes appended to the sticky partition since it was drawn.
    produced_bytes: int
    # How many times a new sticky partition was drawn.
    switches: int
    # Whether the draw is weighted by queue sizes (adaptive partitioning has data).
    weighted: bool


class _TopicState:
    """Sticky state of one topic."""

    __slots__ = ("load_stats", "num_partitions", "produced_bytes", "sticky", "switches",
                 "watched")

    def __init__(self) -> None:
        # Current sticky partition; None means "draw one at the next unkeyed record".
        self.sticky: int | None = None
        # Partition count the sticky partition was drawn for: a changed count forces a redraw.
        self.num_partitions = 0
        # Bytes appended to the sticky partition since the draw.
        self.produced_bytes = 0
        # Draw count, for statistics.
        self.switches = 0
        # Queue-size weights from the accumulator; None means "uniform over available".
        self.load_stats: PartitionLoadStats | None = None
        # A switch is due but the sticky partition's last batch was not full: that batch,
        # watched until it fills (asking the accumulator again only then).
        self.watched: QueuedBatch | None = None


def _call_custom(
    custom: PartitionerCallable,
    topic: str,
    key_bytes: bytes | None,
    cluster_partitions: Sequence[int],
    available_partitions: Sequence[int],
) -> int:
    """Run a user partitioner and refuse answers that name no partition of the topic, so a bad
    partitioner fails the send that used it instead of a batch later in the sender."""
    result = custom(topic, key_bytes, cluster_partitions, available_partitions)
    if isinstance(result, bool) or not isinstance(result, int):
        raise TypeError(
            f"partitioner returned {result!r} for topic {topic!r}: expected an int partition"
        )
    if not 0 <= result < len(cluster_partitions):
        raise ValueError(
            f"partitioner returned partition {result} for topic {topic!r}, which has "
            f"partitions 0..{len(cluster_partitions) - 1}"
        )
    return result


class BuiltinPartitioner:
    """Murmur2 for keys, uniform sticky with adaptive weighting for the rest, or a user callable.

    The accumulator drives it: :meth:`partition` for each record without an explicit partition,
    :meth:`on_append` after the record is in a batch, :meth:`update_partition_load_stats` (or
    :meth:`update_queue_sizes`) from its ready check, :meth:`update_node_latency_stats` from the
    sender's ready/drain.
    """

    def __init__(
        self,
        *,
        batch_size: int,
        ignore_keys: bool = False,
        adaptive: bool = True,
        availability_timeout_ms: int = 0,
        custom: PartitionerCallable | None = None,
        rng: random.Random | None = None,
        last_batch: LastBatch | None = None,
    ) -> None:
        if batch_size < 0 or availability_timeout_ms < 0:
            raise ValueError(
                f"batch_size and availability_timeout_ms must be >= 0, got {batch_size} and "
                f"{availability_timeout_ms}"
            )
        # batch.size=0 means "no batching", which Java treats as batches of 1 byte.
        self._sticky_bytes = max(1, batch_size)
        self._ignore_keys = ignore_keys
        self._custom = custom
        # Java: adaptive logic is pointless with a custom partitioner (it never asks for weights).
        self._adaptive = adaptive and custom is None
        # Availability exclusion is part of the adaptive logic in Java, so it needs it on.
        self._availability_timeout_ms = availability_timeout_ms if self._adaptive else 0
        self._rng = rng if rng is not None else random.Random()
        self._topics: dict[str, _TopicState] = {}
        self._nodes: dict[int, NodeLatencyStats] = {}
        # The accumulator's answer to "is the sticky partition's last batch full?"; None: no
        # accumulator to ask, a batch's worth of bytes alone decides.
        self._last_batch = last_batch

    @classmethod
    def from_config(
        cls,
        config: ProducerConfig,
        *,
        rng: random.Random | None = None,
        last_batch: LastBatch | None = None,
    ) -> BuiltinPartitioner:
        return cls(
            batch_size=config.batch_size,
            ignore_keys=config.partitioner_ignore_keys,
            adaptive=config.partitioner_adaptive_partitioning_enable,
            availability_timeout_ms=config.partitioner_availability_timeout_ms,
            custom=config.partitioner,
            rng=rng,
            last_batch=last_batch,
        )

    # -- the per-record path ------------------------------------------------------------------

    def partition(
        self,
        topic: str,
        key_bytes: bytes | None,
        value_bytes: bytes | None,
        cluster_partitions: Sequence[int],
        available_partitions: Sequence[int],
    ) -> int:
        """The partition for one record. ``value_bytes`` is unused by the built-in rules; it is
        part of the signature so that callers need not change if a rule ever reads it."""
        num_partitions = len(cluster_partitions)
        if num_partitions == 0:
            raise ValueError(f"topic {topic!r} has no partitions to choose from")
        custom = self._custom
        if custom is not None:
            return _call_custom(custom, topic, key_bytes, cluster_partitions, available_partitions)
        if key_bytes is not None and not self._ignore_keys:
            return (_murmur2_u32(key_bytes) & 0x7FFFFFFF) % num_partitions
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _TopicState()
        sticky = state.sticky
        if sticky is None or state.num_partitions != num_partitions or (
                state.produced_bytes >= self._sticky_bytes
                and self._switch_due(state, topic, sticky)):
            sticky = self._draw(state, num_partitions, available_partitions)
        return sticky

    def place(
        self,
        topic: str,
        key_bytes: bytes | None,
        value_bytes: bytes | None,
        cluster_partitions: Sequence[int],
        available_partitions: Sequence[int],
        appended_bytes: int,
    ) -> int:
        """``partition`` then ``on_append`` in one call: the producer's per-record path.

        The bytes are counted before the append instead of after it; the switch decision is
        the same, and a record that then fails to append (rare: memory or close) counts once
        too often, which only brings a switch slightly earlier. Until a batch's worth went to
        the sticky partition this costs what it did before the batch-boundary rule; after, each
        record asks whether the watched batch is full (see ``_switch_due``).
        """
        num_partitions = len(cluster_partitions)
        if key_bytes is not None and self._custom is None and not self._ignore_keys and \
                num_partitions:
            # keyed records, inline: partition() and on_append() would be two more calls
            partition = (_murmur2_u32(key_bytes) & 0x7FFFFFFF) % num_partitions
            state = self._topics.get(topic)
            if state is not None and state.sticky == partition:
                self.on_append(topic, partition, appended_bytes)
            return partition
        if self._custom is not None or (key_bytes is not None and not self._ignore_keys):
            partition = self.partition(topic, key_bytes, value_bytes, cluster_partitions,
                                       available_partitions)
            self.on_append(topic, partition, appended_bytes)
            return partition
        state = self._topics.get(topic)
        if state is None or state.sticky is None or state.num_partitions != num_partitions:
            partition = self.partition(topic, key_bytes, value_bytes, cluster_partitions,
                                       available_partitions)
            self.on_append(topic, partition, appended_bytes)
            return partition
        partition = state.sticky
        produced = state.produced_bytes
        if produced >= self._sticky_bytes:
            # a batch's worth went there: switch at the batch boundary. Inline, the check that
            # the watched batch is still filling (the common case until it fills)
            watched = state.watched
            if (watched is None or watched.sealed is not None or watched.builder.full
                    or produced >= 2 * self._sticky_bytes) and \
                    self._switch_due(state, topic, partition):
                partition = self._draw(state, num_partitions, available_partitions)
                produced = 0
        state.produced_bytes = produced + appended_bytes
        return partition

    def on_append(self, topic: str, partition: int, appended_bytes: int) -> None:
        """Count bytes that went into ``partition`` if it is the topic's sticky partition.

        Every append to the sticky partition counts, keyed or not, since all of them fill the
        same batches (Java counts only unkeyed ones). The switch itself is decided by the next
        unkeyed record (``partition``/``place``), which brings fresh availability and sees
        whether the partition's last batch filled meanwhile.
        """
        state = self._topics.get(topic)
        if state is not None and state.sticky == partition:
            state.produced_bytes += appended_bytes

    def _switch_due(self, state: _TopicState, topic: str, partition: int) -> bool:
        """A batch's worth went to ``partition``: switch now only if every batch queued for it
        is full (Java's ``enableSwitch``: the last one is, as only the last can have room), or
        twice ``batch.size`` went there (a mix of keyed and unkeyed records can keep opening
        batches that are not full).

        Without the batch rule a switch lands wherever the byte count crossed ``batch.size``,
        and the partition is left with a batch holding a few records that lingers and goes
        alone. The accumulator is asked for the last batch only when none is watched or the
        watched one filled or was sent (a new one may have opened behind it).
        """
        if state.produced_bytes >= 2 * self._sticky_bytes:
            return True
        watched = state.watched
        if watched is not None and watched.sealed is None and not watched.builder.full:
            return False
        last_batch = self._last_batch
        if last_batch is None:
            return True
        last = last_batch(topic, partition)
        if last is None or last.sealed is not None or last.builder.full:
            return True
        state.watched = last
        return False

    def _draw(
        self, state: _TopicState, num_partitions: int, available_partitions: Sequence[int]
    ) -> int:
        """Java's ``nextPartition``: weighted by load if known, else uniform over available."""
        stats = state.load_stats
        if stats is not None:
            cft = stats.cumulative_frequency
            index = bisect_right(cft, self._rng.randrange(cft[-1]))
            partition = stats.partition_ids[index]
        elif available_partitions:
            partition = available_partitions[self._rng.randrange(len(available_partitions))]
        else:
            partition = self._rng.randrange(num_partitions)
        state.sticky = partition
        state.num_partitions = num_partitions
        state.produced_bytes = 0
        state.watched = None
        state.switches += 1
        return partition

    # -- feedback from the accumulator and sender --------------------------------------------

    def update_partition_load_stats(
        self,
        topic: str,
        queue_sizes: Sequence[int] | None,
        partition_ids: Sequence[int],
        length: int,
    ) -> None:
        """Java's ``updatePartitionLoadStats``: weights from the first ``length`` queue sizes.

        ``queue_sizes`` has one entry per partition of the topic; only the first ``length`` are
        candidates (the accumulator drops partitions without a leader or with an unavailable
        one). With every partition a candidate and all queues equal the weights would be uniform,
        so they are dropped and the draw falls back to "uniform over available".
        """
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = _TopicState()
        if not self._adaptive or queue_sizes is None or length < 1 or len(queue_sizes) < 2:
            state.load_stats = None
            return
        if length > len(queue_sizes) or len(partition_ids) < length:
            raise ValueError(
                f"topic {topic!r}: length {length} exceeds {len(queue_sizes)} queue sizes or "
                f"{len(partition_ids)} partition ids"
            )
        sizes = queue_sizes[:length]
        max_plus_one = max(sizes) + 1
        if length == len(queue_sizes) and min(sizes) == max_plus_one - 1:
            state.load_stats = None
            return
        running = 0
        cft: list[int] = []
        for size in sizes:
            running += max_plus_one - size
            cft.append(running)
        state.load_stats = PartitionLoadStats(tuple(cft), tuple(partition_ids[:length]))

    def update_queue_sizes(
        self, topic: str, partitions: Iterable[tuple[int, int | None, int]]
    ) -> None:
        """Convenience over :meth:`update_partition_load_stats` for the accumulator's ready check.

        ``partitions`` holds ``(partition, leader_node_id or None, queue_size)`` for every
        partition of the topic. Partitions without a leader, or whose leader has been unable to
        take data for more than ``partitioner.availability.timeout.ms``, are left out.
        """
        entries = list(partitions)
        sizes: list[int] = []
        ids: list[int] = []
        for partition, leader, queue_size in entries:
            if leader is None or not self.is_node_available(leader):
                continue
            sizes.append(queue_size)
            ids.append(partition)
        length = len(sizes)
        # Pad to the full partition count so "some were left out" is visible to the rule above.
        sizes.extend(0 for _ in range(len(entries) - length))
        ids.extend(-1 for _ in range(len(entries) - length))
        self.update_partition_load_stats(topic, sizes, ids, length)

    def forget_topic(self, topic: str) -> None:
        """The topic expired from metadata: drop its sticky and load state."""
        self._topics.pop(topic, None)

    def update_node_latency_stats(self, node_id: int, now_ms: float, can_drain: bool) -> None:
        """Java's ``updateNodeLatencyStats``: the sender reports each ready node, and whether it
        could drain data to it. Ignored when the availability timeout is off."""
        if self._availability_timeout_ms == 0:
            return
        stats = self._nodes.get(node_id)
        if stats is None:
            stats = self._nodes[node_id] = NodeLatencyStats(now_ms, now_ms)
        if can_drain:
            stats.drain_time_ms = now_ms
        stats.ready_time_ms = now_ms

    def is_node_available(self, node_id: int) -> bool:
        """False when ``node_id`` has had data ready but undrained for longer than the timeout."""
        if self._availability_timeout_ms == 0:
            return True
        stats = self._nodes.get(node_id)
        if stats is None:
            return True
        return stats.ready_time_ms - stats.drain_time_ms <= self._availability_timeout_ms

    # -- introspection ------------------------------------------------------------------------

    def statistics(self, topic: str) -> StickyStatistics:
        state = self._topics.get(topic) or _TopicState()
        return StickyStatistics(
            topic=topic,
            sticky_partition=state.sticky,
            produced_bytes=state.produced_bytes,
            switches=state.switches,
            weighted=state.load_stats is not None,
        )

    def __repr__(self) -> str:
        kind = "custom" if self._custom is not None else "builtin"
        return (
            f"BuiltinPartitioner({kind}, sticky_bytes={self._sticky_bytes}, "
            f"ignore_keys={self._ignore_keys}, adaptive={self._adaptive}, "
            f"availability_timeout_ms={self._availability_timeout_ms}, "
            f"topics={len(self._topics)})"
        )
