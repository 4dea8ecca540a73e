"""OffsetFetch: a group's committed offsets, read the way a transactional writer needs them.

A writer that commits a consumer group's offsets inside its transactions
(``send_offsets_to_transaction``) uses those offsets as a record of what it finished. Reading
that record back must not see a commit that is still pending in an open transaction, nor miss
one whose transaction committed a moment ago: OffsetFetch v7+ with ``require_stable``
(KIP-447) answers UNSTABLE_OFFSET_COMMIT for a partition while a transaction holds a pending
offset for it, and this module retries until the answer is stable, within the caller's
deadline. docs/transactions.md ("Reading committed offsets") has the rules.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import UnsupportedVersionError, error_for_code
from aiokprod.network.connection import BrokerConnection
from aiokprod.producer.transactional.coordinator import CoordinatorClient
from aiokprod.protocol import OffsetFetchRequest, OffsetFetchResponse

__all__ = ["fetch_committed_offsets"]

# the transactions' logger
log = logging.getLogger("aiokprod.producer.transactional.transaction_manager")

# require_stable arrived with v7 (KIP-447, Kafka 2.5); without it a pending transactional
# offset would read as absent, which a writer checking its own record cannot tell apart from
# "never committed".
_MIN_VERSION = 7
# v8 moved the request to a list of groups (KIP-709)
_GROUPS_VERSION = 8
# v10 names topics by id only (KIP-848); we name them, so v9 is the highest we send
_MAX_VERSION = 9
# a group or partition the coordinator has no offset for answers -1
_NO_OFFSET = -1


async def fetch_committed_offsets(
        coordinators: CoordinatorClient, group_id: str,
        partitions: Iterable[tuple[str, int]], deadline: float,
) -> dict[tuple[str, int], int | None]:
    """The committed offset of each ``(topic, partition)`` for ``group_id`` (None: none).

    Waits while a transaction holds a pending offset for one of them (UNSTABLE_OFFSET_COMMIT),
    retrying with the coordinator client's backoff until ``deadline`` (KafkaTimeoutError).
    """
    wanted = sorted(set(partitions))
    by_topic: dict[str, list[int]] = {}
    for topic, partition in wanted:
        by_topic.setdefault(topic, []).append(partition)

    def build(conn: BrokerConnection) -> tuple[OffsetFetchRequest, int]:
        version = conn.version_for(OffsetFetchRequest, max_version=_MAX_VERSION)
        if version < _MIN_VERSION:
            raise UnsupportedVersionError(
                f"OffsetFetch v{version} has no require_stable (KIP-447): reading committed "
                f"offsets needs a broker that serves v{_MIN_VERSION}+ (Kafka 2.5+)")
        if version >= _GROUPS_VERSION:
            request = OffsetFetchRequest(require_stable=True, groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                    for t, p in by_topic.items()])])
        else:
            request = OffsetFetchRequest(group_id=group_id, require_stable=True, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                for t, p in by_topic.items()])
        return request, version

    what = f"OffsetFetch(group {group_id!r}, {len(wanted)} partitions)"
    attempt = 0
    while True:
        answer = await coordinators.call(build, _codes, deadline, what, group=group_id)
        response, code, version = answer
        if code is ErrorCode.NONE and response is not None:
            return _offsets(response, version, wanted)
        if code is not ErrorCode.UNSTABLE_OFFSET_COMMIT:
            err = error_for_code(int(code))
            raise err(f"{what}: {code.name}: {err.message}")
        # a transaction holds a pending offset: wait for its markers
        log.debug("%s: UNSTABLE_OFFSET_COMMIT; retrying", what)
        attempt += 1
        await coordinators.sleep_backoff(attempt, deadline, what)


def _codes(response: OffsetFetchResponse) -> list[int]:
    """Every error code of the answer; GROUP_ID_NOT_FOUND means no offsets, not a failure."""
    if response.groups:
        groups = response.groups
        found = [g.error_code for g in groups]
        found += [p.error_code for g in groups for t in g.topics for p in t.partitions]
    else:
        found = [response.error_code]
        found += [p.error_code for t in response.topics for p in t.partitions]
    return [c for c in found if c != ErrorCode.GROUP_ID_NOT_FOUND]


def _offsets(response: OffsetFetchResponse, version: int,
             wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    result: dict[tuple[str, int], int | None] = dict.fromkeys(wanted)
    if version >= _GROUPS_VERSION:
        pairs = [(t.name, p.partition_index, p.committed_offset)
                 for g in response.groups for t in g.topics for p in t.partitions]
    else:
        pairs = [(t.name, p.partition_index, p.committed_offset)
                 for t in response.topics for p in t.partitions]
    for topic, partition, offset in pairs:
        if (topic, partition) in result and offset != _NO_OFFSET:
            result[(topic, partition)] = offset
    return result
