"""retry_policy.classify: the client's decision per error code, attempts and deadline."""

from __future__ import annotations

from typing import Any

import pytest

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode
from aiokprod.producer.retry_policy import RULES, Action, classify, rule_for

E = ErrorCode


def decide(code: int, **kw: Any) -> Any:
    args: dict[str, Any] = {"attempts": 1, "idempotent": True,
                            "delivery_deadline_passed": False, "record_count": 1}
    args.update(kw)
    return classify(code, **args)


# (code, extra kwargs, action, refresh_metadata, possibly_written)
TABLE: list[tuple[ErrorCode, dict[str, Any], Action, bool, bool]] = [
    (E.NOT_LEADER_OR_FOLLOWER, {}, Action.RETRY, True, False),
    (E.LEADER_NOT_AVAILABLE, {}, Action.RETRY, True, False),
    (E.UNKNOWN_TOPIC_OR_PARTITION, {}, Action.RETRY, True, False),
    (E.FENCED_LEADER_EPOCH, {}, Action.RETRY, True, False),
    (E.KAFKA_STORAGE_ERROR, {}, Action.RETRY, True, False),
    (E.NETWORK_EXCEPTION, {}, Action.RETRY, True, True),
    (E.REQUEST_TIMED_OUT, {}, Action.RETRY, False, True),
    (E.NOT_ENOUGH_REPLICAS, {}, Action.RETRY, False, False),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, {}, Action.RETRY, False, True),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, {"idempotent": False}, Action.RETRY, False, True),
    (E.THROTTLING_QUOTA_EXCEEDED, {}, Action.RETRY, False, False),
    # the broker calls CORRUPT_MESSAGE retriable; the client does not (same bytes, same verdict)
    (E.CORRUPT_MESSAGE, {}, Action.FAIL, False, False),
    (E.INVALID_RECORD, {}, Action.FAIL, False, False),
    (E.INVALID_TIMESTAMP, {}, Action.FAIL, False, False),
    (E.UNKNOWN_SERVER_ERROR, {}, Action.FAIL, False, False),
    (E.TOPIC_AUTHORIZATION_FAILED, {}, Action.FAIL, False, False),
    (E.CLUSTER_AUTHORIZATION_FAILED, {}, Action.FATAL, False, False),
    (E.CLUSTER_AUTHORIZATION_FAILED, {"idempotent": False}, Action.FAIL, False, False),
    (E.UNSUPPORTED_VERSION, {}, Action.FATAL, False, False),
    (E.MESSAGE_TOO_LARGE, {"record_count": 2}, Action.SPLIT, False, False),
    (E.MESSAGE_TOO_LARGE, {"record_count": 1}, Action.FAIL, False, False),
    (E.OUT_OF_ORDER_SEQUENCE_NUMBER, {}, Action.RETRY, False, False),
    (E.OUT_OF_ORDER_SEQUENCE_NUMBER, {"idempotent": False}, Action.FAIL, False, False),
    (E.UNKNOWN_PRODUCER_ID, {}, Action.RETRY, False, False),
    (E.DUPLICATE_SEQUENCE_NUMBER, {}, Action.COMPLETE, False, False),
    (E.DUPLICATE_SEQUENCE_NUMBER, {"idempotent": False}, Action.FAIL, False, False),
    (E.INVALID_PRODUCER_EPOCH, {}, Action.FAIL, False, False),
    (E.INVALID_PRODUCER_EPOCH, {"transactional": True}, Action.FATAL, False, False),
    (E.PRODUCER_FENCED, {}, Action.FATAL, False, False),
    # codes without a rule follow the broker's flag
    (E.COORDINATOR_LOAD_IN_PROGRESS, {}, Action.RETRY, False, False),
    (E.OFFSET_OUT_OF_RANGE, {}, Action.FAIL, False, False),
]


@pytest.mark.parametrize(("code", "kw", "action", "refresh", "written"), TABLE,
                         ids=[f"{c.name}-{i}" for i, (c, *_r) in enumerate(TABLE)])
def test_classification_table(code: ErrorCode, kw: dict[str, Any], action: Action,
                              refresh: bool, written: bool) -> None:
    d = decide(code, **kw)
    assert d.action is action
    assert d.refresh_metadata is refresh
    assert d.possibly_written is written
    assert d.error_code is code
    assert d.reason


def test_every_rule_that_differs_from_the_broker_says_why() -> None:
    for code, rule in RULES.items():
        if rule.retriable != code.retriable and code is not ErrorCode.MESSAGE_TOO_LARGE:
            assert rule.why, f"{code.name}: client and broker disagree without a reason"


def test_unknown_code_follows_the_broker_flag() -> None:
    assert rule_for(9999).retriable is False
    assert decide(9999).action is Action.FAIL


def test_a_retriable_error_past_the_deadline_fails_as_retriable() -> None:
    d = decide(E.NOT_LEADER_OR_FOLLOWER, delivery_deadline_passed=True)
    assert (d.action, d.retriable) == (Action.FAIL, True)
    assert "delivery.timeout.ms" in d.reason


def test_retries_config_bounds_the_attempts() -> None:
    assert decide(E.NOT_ENOUGH_REPLICAS, attempts=3, retries=3).action is Action.RETRY
    d = decide(E.NOT_ENOUGH_REPLICAS, attempts=4, retries=3)
    assert (d.action, d.retriable) == (Action.FAIL, True)
    assert decide(E.NOT_ENOUGH_REPLICAS, attempts=1, retries=0).action is Action.FAIL


def test_non_retriable_errors_are_not_flagged_retriable() -> None:
    assert decide(E.INVALID_RECORD, delivery_deadline_passed=True).retriable is False


def test_backoff_grows_exponentially_with_attempts() -> None:
    backoff = ExponentialBackoff(100, 1000, jitter=0.0)
    waits = [decide(E.NOT_ENOUGH_REPLICAS, attempts=n, backoff=backoff).backoff_ms
             for n in (1, 2, 3, 4, 5)]
    assert waits == [100, 200, 400, 800, 1000]
    assert decide(E.NOT_ENOUGH_REPLICAS).backoff_ms == 0.0


def test_rejects_nonsense_input() -> None:
    with pytest.raises(ValueError):
        decide(E.NONE)
    with pytest.raises(ValueError):
        decide(E.NOT_LEADER_OR_FOLLOWER, attempts=0)
