"""Immutable views of cluster metadata, and the rules for merging a new response into them.

Kept apart from the I/O in ``cluster.py`` so the merge rules (stale leader epochs, unknown
topics, KIP-951 leader hints) are plain functions tests can drive without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokprod._error_codes import ErrorCode

if TYPE_CHECKING:
    from aiokprod.protocol import MetadataResponse

__all__ = [
    "BrokerNode",
    "ClusterView",
    "PartitionMetadata",
    "TopicMetadata",
    "TopicPartition",
    "merge_metadata_response",
]

UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
LEADER_NOT_AVAILABLE = ErrorCode.LEADER_NOT_AVAILABLE


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # -1 while the partition has no leader (election in progress)
    leader_epoch: int  # -1 when the broker does not report epochs (Metadata < v7)
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: Mapping[int, PartitionMetadata]
    # sorted partition ids, and those with a leader: the partitioner's two inputs
    partition_ids: tuple[int, ...] = field(default=())
    available_partitions: tuple[int, ...] = field(default=())
    topic_id: Any = None
    is_internal: bool = False

    @classmethod
    def build(cls, name: str, partitions: Iterable[PartitionMetadata], topic_id: Any = None,
              is_internal: bool = False) -> TopicMetadata:
        by_id = {p.partition: p for p in partitions}
        ids = tuple(sorted(by_id))
        available = tuple(i for i in ids if by_id[i].leader >= 0)
        return cls(name, by_id, ids, available, topic_id, is_internal)

    def leader(self, partition: int) -> int:
        p = self.partitions.get(partition)
        return -1 if p is None else p.leader


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One consistent snapshot; replaced whole on every update, never mutated."""

    brokers: Mapping[int, BrokerNode]
    topics: Mapping[str, TopicMetadata]
    cluster_id: str | None = None
    controller_id: int = -1
    # topic -> error code for topics the last response reported as failed
    topic_errors: Mapping[str, int] = field(default_factory=dict)

    def with_leader(self, tp: TopicPartition, leader: int, leader_epoch: int,
                    new_brokers: Iterable[BrokerNode] = ()) -> ClusterView | None:
        """Apply a KIP-951 leader hint from a Produce response; None if it is stale."""
        topic = self.topics.get(tp.topic)
        if topic is None:
            return None
        current = topic.partitions.get(tp.partition)
        if current is None or leader < 0:
            return None
        if 0 <= leader_epoch <= current.leader_epoch:
            return None  # not newer than what we have
        brokers = dict(self.brokers)
        for b in new_brokers:
            brokers[b.node_id] = b
        if leader not in brokers:
            return None  # we would not know where to send: wait for a full refresh
        updated = PartitionMetadata(tp.partition, leader, leader_epoch, current.replicas,
                                    current.isr, current.offline_replicas, 0)
        parts = dict(topic.partitions)
        parts[tp.partition] = updated
        topics = dict(self.topics)
        topics[tp.topic] = TopicMetadata.build(topic.name, parts.values(), topic.topic_id,
                                               topic.is_internal)
        return ClusterView(brokers, topics, self.cluster_id, self.controller_id,
                           self.topic_errors)

    def without_topics(self, names: Iterable[str]) -> ClusterView:
        """This view minus ``names`` (topics nobody used for metadata.max.idle.ms)."""
        drop = set(names)
        return ClusterView(
            self.brokers, {n: t for n, t in self.topics.items() if n not in drop},
            self.cluster_id, self.controller_id,
            {n: c for n, c in self.topic_errors.items() if n not in drop})


def merge_metadata_response(previous: ClusterView, response: MetadataResponse
                            ) -> tuple[ClusterView, list[str]]:
    """Merge a MetadataResponse into ``previous``.

    Returns the new view and the topics whose partitions changed leader. Rules:
    - brokers are replaced by the response's list (it is always complete);
    - a topic with an error keeps its previous metadata (the Java client does the same for
      retriable errors) and the error is recorded so waiters can fail fast on fatal ones;
    - a partition whose leader epoch is older than the one we know is stale (the response came
      from a broker that has not caught up) and the known partition is kept;
    - a topic whose id changed (Metadata v10+) was deleted and re-created under the same name:
      nothing of the old topic is kept (its leader epochs restart, its partition count may
      differ) and it is reported among the moved topics, as the Java client's ``Metadata``
      does when it compares topic ids;
    - a partition whose leader or leader epoch changed counts as moved: a new epoch is a new
      term of leadership even on the same broker (KIP-1269 then starts its window at 5 again).
    """
    brokers = {
        b.node_id: BrokerNode(b.node_id, b.host, b.port, b.rack)
        for b in response.brokers
    }
    topics = dict(previous.topics)
    errors: dict[str, int] = {}
    moved: list[str] = []
    for t in response.topics:
        name = t.name
        if name is None:
            continue
        if t.error_code != ErrorCode.NONE:
            errors[name] = t.error_code
            if t.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                topics.pop(name, None)  # deleted or not created yet
            continue
        old = previous.topics.get(name)
        topic_id = t.topic_id  # the zero UUID below Metadata v10
        changed = False
        if old is not None and _known_id(old.topic_id) and _known_id(topic_id) and \
                old.topic_id != topic_id:
            old = None  # re-created: a new topic that happens to have the old name
            changed = True
        parts: list[PartitionMetadata] = []
        for p in t.partitions:
            epoch = p.leader_epoch  # -1 below Metadata v7
            known = old.partitions.get(p.partition_index) if old is not None else None
            if known is not None and 0 <= epoch < known.leader_epoch:
                parts.append(known)
                continue
            leader = p.leader_id if p.error_code != LEADER_NOT_AVAILABLE else -1
            if known is not None and (known.leader != leader or 0 <= known.leader_epoch < epoch):
                changed = True
            parts.append(PartitionMetadata(
                p.partition_index, leader, epoch, tuple(p.replica_nodes), tuple(p.isr_nodes),
                tuple(p.offline_replicas), p.error_code))
        topics[name] = TopicMetadata.build(name, parts, topic_id, t.is_internal)
        if changed:
            moved.append(name)
    view = ClusterView(
        brokers, topics, response.cluster_id, response.controller_id, errors)
    return view, moved


def _known_id(topic_id: Any) -> bool:
    """A real topic id: brokers before Metadata v10 send none, and the zero UUID means unknown."""
    return topic_id is not None and getattr(topic_id, "int", 1) != 0
