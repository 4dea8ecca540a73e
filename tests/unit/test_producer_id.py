"""ProducerIdRequester: the one InitProducerId rule set of the idempotent and the
transactional producer (versions, the fresh-id fallback, what is fatal, the backoff).

The manager is the real ``IdempotenceManager``; the connection is reduced to the two things
the requester reads of it, the versions both sides serve.
"""

from __future__ import annotations

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode
from aiokprod.producer.idempotent.idempotence import IdempotenceManager
from aiokprod.producer.idempotent.producer_id import InitOutcome, ProducerIdRequester
from aiokprod.producer.idempotent.producer_id_state import ProducerIdState
from aiokprod.protocol import InitProducerIdRequest, InitProducerIdResponse
from support.batch_double import Batch, new_table
from support.verdicts import may_send, take

E = ErrorCode


class Versions:
    """A connection's negotiated InitProducerId versions."""

    def __init__(self, low: int, high: int) -> None:
        self.broker_versions = {InitProducerIdRequest.API_KEY: (low, high)}
        self._high = high

    def version_for(self, request: type[InitProducerIdRequest]) -> int:
        return self._high


def _ok(pid: int, epoch: int = 0) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=epoch)


def _ready(transactional: bool) -> tuple[IdempotenceManager, ProducerIdRequester]:
    idem = IdempotenceManager(partitions=new_table(), bump_via_init_producer_id=True,
                              transactional=transactional,
                              backoff=ExponentialBackoff(200, 800, jitter=0))
    requester = ProducerIdRequester(idem, transactional_id="tx" if transactional else None,
                                    transaction_timeout_ms=60_000)
    requester.take_params()
    assert requester.on_answer(E.NONE, _ok(5), 4) is InitOutcome.DONE
    return idem, requester


def _lose_state(idem: IdempotenceManager, partition: int = 0) -> None:
    """A batch answered UNKNOWN_PRODUCER_ID: the manager asks for a bump."""
    batch = Batch(partition=partition)
    assert may_send(idem, batch)
    take(idem, batch)
    idem.on_error(batch, E.UNKNOWN_PRODUCER_ID)
    assert idem.state is ProducerIdState.BUMP_REQUIRED


def _bump(idem: IdempotenceManager, requester: ProducerIdRequester) -> None:
    _lose_state(idem)
    assert requester.take_params() == (5, 0)


def test_a_fenced_bump_is_fatal_with_a_transactional_id() -> None:
    idem, requester = _ready(transactional=True)
    _bump(idem, requester)
    assert requester.on_answer(E.PRODUCER_FENCED, None, 4) is InitOutcome.FAIL


def test_a_fenced_bump_gets_a_fresh_id_without_one() -> None:
    idem, requester = _ready(transactional=False)
    _bump(idem, requester)
    assert requester.on_answer(E.PRODUCER_FENCED, None, 4) is InitOutcome.AGAIN
    assert requester.take_params() == (-1, -1)
    assert requester.on_answer(E.NONE, _ok(6), 4) is InitOutcome.DONE
    _lose_state(idem, partition=1)  # later bumps ask for fresh ids too
    assert requester.take_params() == (-1, -1)


def test_a_broker_without_v3_is_asked_for_a_fresh_id_instead_of_a_bump() -> None:
    for transactional in (False, True):
        idem, requester = _ready(transactional)
        _bump(idem, requester)
        request, version = requester.build(Versions(0, 2))  # type: ignore[arg-type]
        assert (request.producer_id, request.producer_epoch, version) == (-1, -1, 2)
        assert idem.state is ProducerIdState.INITIALIZING


def test_a_failing_version_is_followed_by_the_next_lower_one_then_failure() -> None:
    for transactional in (False, True):
        idem = IdempotenceManager(partitions=new_table(), bump_via_init_producer_id=True)
        requester = ProducerIdRequester(idem, transactional_id="tx" if transactional else None,
                                        transaction_timeout_ms=60_000)
        conn = Versions(2, 4)
        tried = []
        while True:
            requester.take_params()
            _request, version = requester.build(conn)  # type: ignore[arg-type]
            tried.append(version)
            outcome = requester.on_answer(E.UNKNOWN_SERVER_ERROR, None, version)
            if outcome is not InitOutcome.AGAIN:
                break
        assert tried == [4, 3, 2] and outcome is InitOutcome.FAIL


def test_retriable_errors_wait_the_configured_backoff_growing_to_its_maximum() -> None:
    idem, requester = _ready(transactional=False)
    _bump(idem, requester)
    assert requester.on_answer(E.COORDINATOR_LOAD_IN_PROGRESS, None, 4) is InitOutcome.RETRY
    assert [requester.next_delay() for _ in range(4)] == [0.2, 0.4, 0.8, 0.8]
    assert idem.state is ProducerIdState.BUMPING  # the same bump is asked again


def test_authorization_failures_are_fatal_for_both() -> None:
    for transactional in (False, True):
        idem = IdempotenceManager(partitions=new_table(), bump_via_init_producer_id=True)
        requester = ProducerIdRequester(idem, transactional_id="tx" if transactional else None,
                                        transaction_timeout_ms=60_000)
        requester.take_params()
        assert requester.on_answer(E.CLUSTER_AUTHORIZATION_FAILED, None, 4) is InitOutcome.FAIL
