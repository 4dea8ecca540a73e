"""The KIP-714 telemetry state machine with a hand-driven clock: the transition table, push
intervals, the first push's jitter, the re-subscribe rules and the terminating push."""

from __future__ import annotations

import math
import uuid

import pytest

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import IllegalStateError
from aiokprod.records import CompressionType
from aiokprod.telemetry.subscription import (
    DEFAULT_PUSH_INTERVAL_MS,
    TRANSITIONS,
    Subscription,
    TelemetrySchedule,
    TelemetryState,
    accepted_types,
    error_interval_ms,
)

S = TelemetryState
ID = uuid.UUID(int=7)


def _sub(metrics: tuple[str, ...] = ("org.apache.kafka.producer.",), interval: int = 1000
         ) -> Subscription:
    return Subscription(ID, 99, interval, (CompressionType.ZSTD,), 1 << 20, True, metrics)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _schedule(jitter: float = 1.0) -> tuple[TelemetrySchedule, Clock]:
    clock = Clock()
    return TelemetrySchedule(clock=clock, uniform=lambda a, b: jitter), clock


def _subscribed(jitter: float = 1.0, interval: int = 1000) -> tuple[TelemetrySchedule, Clock]:
    sched, clock = _schedule(jitter)
    sched.begin_request()
    sched.on_subscription(0, _sub(interval=interval))
    return sched, clock


def test_transition_table_is_javas() -> None:
    assert TRANSITIONS[S.TERMINATED] == frozenset()
    assert TRANSITIONS[S.TERMINATING_PUSH_IN_PROGRESS] == {S.TERMINATED}
    for state, targets in TRANSITIONS.items():
        for target in S:
            sched, _ = _schedule()
            sched.state = state
            if target in targets:
                sched._move(target)
                assert sched.state is target
            else:
                with pytest.raises(IllegalStateError, match="invalid transition"):
                    sched._move(target)


def test_first_request_is_due_at_once_with_the_zero_id() -> None:
    sched, _ = _schedule()
    assert sched.time_to_next() == 0.0
    assert sched.begin_request() is S.SUBSCRIPTION_IN_PROGRESS
    assert sched.time_to_next() == math.inf  # in progress: nothing else is due
    with pytest.raises(IllegalStateError):
        sched.begin_request()


@pytest.mark.parametrize(("jitter", "due"), [(0.5, 0.5), (1.0, 1.0), (1.5, 1.5)])
def test_first_push_after_a_subscription_is_jittered(jitter: float, due: float) -> None:
    sched, clock = _subscribed(jitter, interval=1000)
    assert sched.state is S.PUSH_NEEDED
    assert sched.time_to_next() == pytest.approx(due)
    clock.now += due
    assert sched.time_to_next() == 0.0
    assert sched.begin_request() is S.PUSH_IN_PROGRESS
    sched.on_push(0)
    # later pushes wait exactly the interval, whatever the jitter was
    assert sched.state is S.PUSH_NEEDED and sched.time_to_next() == pytest.approx(1.0)
    assert sched.pushes == 1


def test_jitter_bounds_are_javas() -> None:
    bounds: list[tuple[float, float]] = []
    sched = TelemetrySchedule(clock=lambda: 0.0,
                              uniform=lambda a, b: bounds.append((a, b)) or a)
    sched.begin_request()
    sched.on_subscription(0, _sub())
    assert bounds == [(0.5, 1.5)]


def test_no_metrics_requested_backs_off_for_the_interval() -> None:
    sched, clock = _schedule()
    sched.begin_request()
    sched.on_subscription(0, _sub(metrics=(), interval=300_000))
    assert sched.state is S.SUBSCRIPTION_NEEDED
    assert sched.time_to_next() == pytest.approx(300.0)
    clock.now += 300
    assert sched.time_to_next() == 0.0
    # closing without a subscription that wants metrics: no terminating push
    assert sched.initiate_close() is False
    assert sched.state is S.TERMINATED


def test_subscription_selects_by_prefix() -> None:
    sub = _sub(metrics=("org.apache.kafka.producer.node.", "org.apache.kafka.producer.record"))
    assert sub.selects("org.apache.kafka.producer.node.request.latency.avg")
    assert sub.selects("org.apache.kafka.producer.record.queue.time.max")
    assert not sub.selects("org.apache.kafka.producer.batch.size.avg")
    assert _sub(metrics=("*",)).selects("anything")
    assert _sub(metrics=("",)).selects("anything")
    assert not _sub(metrics=()).selects("anything")


@pytest.mark.parametrize(("code", "wait"), [
    (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, 0.0),
    (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, 0.0),
    (ErrorCode.TELEMETRY_TOO_LARGE, 1.0),
    (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 1.0),
    (ErrorCode.INVALID_REQUEST, math.inf),
    (ErrorCode.INVALID_RECORD, math.inf),
    (ErrorCode.UNSUPPORTED_VERSION, math.inf),
    (ErrorCode.UNKNOWN_SERVER_ERROR, math.inf),
])
def test_push_errors_resubscribe_or_disable(code: ErrorCode, wait: float) -> None:
    sched, clock = _subscribed()
    clock.now += 1
    sched.begin_request()
    sched.on_push(int(code))
    assert sched.state is S.SUBSCRIPTION_NEEDED
    assert sched.time_to_next() == wait
    assert sched.enabled is (wait != math.inf)
    if wait == 0.0:
        # the re-fetch keeps the client instance id the broker assigned
        assert sched.begin_request() is S.SUBSCRIPTION_IN_PROGRESS
        assert sched.client_instance_id == ID


def test_error_interval_without_a_subscription_uses_the_default() -> None:
    assert error_interval_ms(ErrorCode.THROTTLING_QUOTA_EXCEEDED, None) == \
        DEFAULT_PUSH_INTERVAL_MS
    assert error_interval_ms(0, 5) is None


def test_subscription_error_retries_later() -> None:
    sched, _ = _schedule()
    sched.begin_request()
    sched.on_subscription(int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), None)
    assert sched.state is S.SUBSCRIPTION_NEEDED
    assert sched.time_to_next() == pytest.approx(DEFAULT_PUSH_INTERVAL_MS / 1000)


def test_a_failed_request_waits_the_default_interval() -> None:
    sched, clock = _subscribed()
    clock.now += 1
    sched.begin_request()
    sched.on_request_failed()
    assert sched.state is S.SUBSCRIPTION_NEEDED
    assert sched.time_to_next() == pytest.approx(DEFAULT_PUSH_INTERVAL_MS / 1000)


def test_terminating_push_once_then_terminated() -> None:
    sched, _ = _subscribed()
    assert sched.initiate_close() is True
    assert sched.state is S.TERMINATING_PUSH_NEEDED and sched.time_to_next() == 0.0
    assert sched.initiate_close() is True  # a second close changes nothing
    assert sched.begin_request() is S.TERMINATING_PUSH_IN_PROGRESS
    sched.on_push(0)
    assert sched.state is S.TERMINATED and sched.time_to_next() == math.inf
    assert sched.initiate_close() is False


def test_close_during_a_push_still_sends_the_terminating_one() -> None:
    sched, clock = _subscribed()
    clock.now += 1
    sched.begin_request()  # the task was cancelled with this push in flight
    assert sched.initiate_close() is True
    sched.on_push(0)  # a late answer to the cancelled push changes nothing
    assert sched.state is S.TERMINATING_PUSH_NEEDED


def test_close_before_any_subscription_sends_nothing() -> None:
    sched, _ = _schedule()
    assert sched.initiate_close() is False
    assert sched.state is S.TERMINATED


def test_disabled_telemetry_has_no_terminating_push() -> None:
    sched, _ = _subscribed()
    sched.disable()
    assert sched.time_to_next() == math.inf
    assert sched.initiate_close() is False


def test_accepted_types_skip_unknown_codes() -> None:
    assert accepted_types([4, 3, 1, 2, 0, 9]) == (
        CompressionType.ZSTD, CompressionType.LZ4, CompressionType.GZIP, CompressionType.SNAPPY,
        CompressionType.NONE)
