"""Metadata merge rules (stale epochs, unknown topics, KIP-951 hints) and the backoff formula."""

from __future__ import annotations

import pytest

from aiokprod._backoff import ExponentialBackoff
from aiokprod.network.addresses import parse_bootstrap
from aiokprod.network.metadata import (
    BrokerNode,
    ClusterView,
    TopicPartition,
    merge_metadata_response,
)
from aiokprod.protocol import MetadataResponse

Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition


def response(partitions: list[tuple[int, int, int]], *, error: int = 0,
             brokers: tuple[int, ...] = (1, 2, 3)) -> MetadataResponse:
    return MetadataResponse(
        brokers=[Broker(node_id=b, host="127.0.0.1", port=9000 + b) for b in brokers],
        topics=[Topic(error_code=error, name="t", partitions=[
            Partition(error_code=0, partition_index=p, leader_id=leader, leader_epoch=epoch,
                      replica_nodes=[leader], isr_nodes=[leader])
            for p, leader, epoch in partitions])])


def test_merge_builds_partitions_and_available_set() -> None:
    view, moved = merge_metadata_response(ClusterView({}, {}),
                                          response([(0, 1, 5), (1, -1, 5), (2, 3, 1)]))
    topic = view.topics["t"]
    assert topic.partition_ids == (0, 1, 2)
    assert topic.available_partitions == (0, 2)
    assert topic.leader(2) == 3
    assert set(view.brokers) == {1, 2, 3}
    assert moved == []


def test_older_leader_epoch_is_ignored_and_newer_moves_leader() -> None:
    view, _ = merge_metadata_response(ClusterView({}, {}), response([(0, 1, 5)]))
    stale, moved = merge_metadata_response(view, response([(0, 2, 4)]))
    assert stale.topics["t"].leader(0) == 1 and moved == []
    newer, moved = merge_metadata_response(view, response([(0, 2, 6)]))
    assert newer.topics["t"].leader(0) == 2 and moved == ["t"]


def test_a_new_leader_epoch_on_the_same_broker_counts_as_a_leader_change() -> None:
    """KIP-1269: a new term of leadership restarts the partition's window at 5, even when the
    same broker won it again (it may have lost its producer state meanwhile)."""
    view, _ = merge_metadata_response(ClusterView({}, {}), response([(0, 1, 5)]))
    _, moved = merge_metadata_response(view, response([(0, 1, 5)]))
    assert moved == []
    again, moved = merge_metadata_response(view, response([(0, 1, 6)]))
    assert again.topics["t"].leader(0) == 1 and moved == ["t"]


def test_unknown_topic_is_dropped_and_recorded() -> None:
    view, _ = merge_metadata_response(ClusterView({}, {}), response([(0, 1, 5)]))
    gone, _ = merge_metadata_response(view, response([], error=3))
    assert "t" not in gone.topics
    assert gone.topic_errors == {"t": 3}


def test_retriable_topic_error_keeps_previous_metadata() -> None:
    view, _ = merge_metadata_response(ClusterView({}, {}), response([(0, 1, 5)]))
    kept, _ = merge_metadata_response(view, response([], error=5))
    assert kept.topics["t"].leader(0) == 1


def test_leader_hint_applies_only_when_newer() -> None:
    view, _ = merge_metadata_response(ClusterView({}, {}), response([(0, 1, 5)]))
    tp = TopicPartition("t", 0)
    assert view.with_leader(tp, 2, 5) is None  # same epoch: not newer
    moved = view.with_leader(tp, 2, 6)
    assert moved is not None and moved.topics["t"].leader(0) == 2
    assert view.with_leader(tp, 9, 7) is None  # unknown broker and no endpoint given
    with_endpoint = view.with_leader(tp, 9, 7, [BrokerNode(9, "127.0.0.1", 9999)])
    assert with_endpoint is not None and with_endpoint.brokers[9].port == 9999


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["[::1]:9092"]) == [("::1", 9092)]
    for bad in ("nohost", "h:0", "h:x", ""):
        with pytest.raises(ValueError, match="bootstrap.servers"):
            parse_bootstrap(bad)


def test_backoff_grows_caps_and_jitters() -> None:
    fixed = ExponentialBackoff(100, 1000, jitter=0.0)
    assert [fixed.backoff_ms(a) for a in range(6)] == [100, 200, 400, 800, 1000, 1000]
    low = ExponentialBackoff(100, 1000, rand=lambda: 0.0)
    high = ExponentialBackoff(100, 1000, rand=lambda: 1.0)
    assert low.backoff_ms(0) == pytest.approx(80)
    assert high.backoff_ms(0) == pytest.approx(120)
    assert ExponentialBackoff(0, 0).backoff_ms(10) == 0
