"""The KIP-714 client telemetry state machine: when to ask for a subscription, when to push.

No I/O and an injected clock (seconds) and random source, so the rules are tested by hand
(``tests/unit/test_telemetry_subscription.py``); ``aiokprod.telemetry.reporter`` performs the
requests it schedules. The rules follow Java's ``ClientTelemetryReporter`` (its
``ClientTelemetryState`` transition table and ``ClientTelemetryUtils`` error mapping):

* Start in SUBSCRIPTION_NEEDED with no wait: the first GetTelemetrySubscriptions carries the
  zero client instance id and the broker assigns one.
* A subscription that requests no metric means "nothing to push": ask again after its push
  interval (the broker has no subscription matching this client; this is the back-off).
* A subscription requesting metrics leads to PUSH_NEEDED; the first push after it waits a
  random 0.5-1.5 x the push interval, so clients started together do not push together, and
  later pushes wait exactly the interval.
* Errors (in a response) say what next: UNKNOWN_SUBSCRIPTION_ID and UNSUPPORTED_COMPRESSION_TYPE
  re-fetch the subscription at once; TELEMETRY_TOO_LARGE and THROTTLING_QUOTA_EXCEEDED re-fetch
  it after the push interval; INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and any error
  KIP-714 does not name disable telemetry for the producer's life (retrying cannot help).
* A request that fails without a response (timeout, lost connection, a broker without the API)
  re-fetches the subscription after 5 minutes: another broker may support it.
* ``initiate_close`` asks for one last push flagged ``terminating``, but only if a subscription
  with metrics is held; after it (or without it) the machine is TERMINATED.
"""

from __future__ import annotations

import enum
import logging
import math
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiokprod._error_codes import ErrorCode
from aiokprod.errors import IllegalStateError
from aiokprod.records import CompressionType

__all__ = [
    "DEFAULT_PUSH_INTERVAL_MS",
    "Subscription",
    "TelemetrySchedule",
    "TelemetryState",
    "error_interval_ms",
]

log = logging.getLogger(__name__)

# Java's ClientTelemetryReporter.DEFAULT_PUSH_INTERVAL_MS: the wait after a failed request and
# the interval used when the broker sends none.
DEFAULT_PUSH_INTERVAL_MS = 5 * 60 * 1000
# Bounds of the random factor applied to the first push interval after a subscription.
_JITTER_LOW, _JITTER_HIGH = 0.5, 1.5
_DISABLED = math.inf  # an interval that never elapses: telemetry is off


class TelemetryState(enum.Enum):
    SUBSCRIPTION_NEEDED = "subscription_needed"
    SUBSCRIPTION_IN_PROGRESS = "subscription_in_progress"
    PUSH_NEEDED = "push_needed"
    PUSH_IN_PROGRESS = "push_in_progress"
    TERMINATING_PUSH_NEEDED = "terminating_push_needed"
    TERMINATING_PUSH_IN_PROGRESS = "terminating_push_in_progress"
    TERMINATED = "terminated"


S = TelemetryState
# Java's ClientTelemetryState.VALID_NEXT_STATES.
TRANSITIONS: dict[TelemetryState, frozenset[TelemetryState]] = {
    # ask for a subscription, or stop before ever getting one
    S.SUBSCRIPTION_NEEDED: frozenset({S.SUBSCRIPTION_IN_PROGRESS, S.TERMINATED}),
    # got one (with metrics: push; without, or on an error: ask again later), or closing
    S.SUBSCRIPTION_IN_PROGRESS: frozenset({S.PUSH_NEEDED, S.SUBSCRIPTION_NEEDED,
                                           S.TERMINATING_PUSH_NEEDED, S.TERMINATED}),
    # push, or the subscription is stale (re-fetch), or closing
    S.PUSH_NEEDED: frozenset({S.PUSH_IN_PROGRESS, S.SUBSCRIPTION_NEEDED,
                              S.TERMINATING_PUSH_NEEDED, S.TERMINATED}),
    # pushed: push again after the interval; failed: re-fetch; or closing
    S.PUSH_IN_PROGRESS: frozenset({S.PUSH_NEEDED, S.SUBSCRIPTION_NEEDED,
                                   S.TERMINATING_PUSH_NEEDED, S.TERMINATED}),
    # the last push goes out, or closing could not wait for it
    S.TERMINATING_PUSH_NEEDED: frozenset({S.TERMINATING_PUSH_IN_PROGRESS, S.TERMINATED}),
    S.TERMINATING_PUSH_IN_PROGRESS: frozenset({S.TERMINATED}),
    S.TERMINATED: frozenset(),
}

# Response errors that make the client re-fetch its subscription at once (KIP-714).
_REFETCH_NOW = frozenset({ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                          ErrorCode.UNSUPPORTED_COMPRESSION_TYPE})
# Response errors after which the client waits one push interval before re-fetching.
_REFETCH_LATER = frozenset({ErrorCode.TELEMETRY_TOO_LARGE, ErrorCode.THROTTLING_QUOTA_EXCEEDED})


def error_interval_ms(error_code: int, push_interval_ms: int | None) -> float | None:
    """How long to wait before re-fetching the subscription after ``error_code`` (None: no
    error; ``inf``: never, telemetry is disabled). Java's ``maybeFetchErrorIntervalMs``."""
    if error_code == 0:
        return None
    if error_code in _REFETCH_NOW:
        return 0.0
    if error_code in _REFETCH_LATER:
        return float(push_interval_ms if push_interval_ms is not None
                     else DEFAULT_PUSH_INTERVAL_MS)
    # INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION, and whatever KIP-714 does not list
    return _DISABLED


@dataclass(frozen=True)
class Subscription:
    """What the broker asked for in GetTelemetrySubscriptions."""

    client_instance_id: uuid.UUID  # assigned by the broker on the first request
    subscription_id: int  # echoed in every push; a mismatch is UNKNOWN_SUBSCRIPTION_ID
    push_interval_ms: int  # wait between pushes
    # codecs the broker accepts, most preferred first; NONE is always accepted
    accepted_compression_types: tuple[CompressionType, ...]
    telemetry_max_bytes: int  # largest (compressed) payload the broker takes
    delta_temporality: bool  # sums as deltas since the last push rather than running totals
    requested_metrics: tuple[str, ...]  # name prefixes; () none; "*" or "" all

    @property
    def wants_metrics(self) -> bool:
        return bool(self.requested_metrics)

    def selects(self, name: str) -> bool:
        """Whether the metric called ``name`` was asked for (prefix match, Java's selector)."""
        return any(p in ("*", "") or name.startswith(p) for p in self.requested_metrics)


def accepted_types(codes: Sequence[int]) -> tuple[CompressionType, ...]:
    """The broker's accepted codec ids we know, in its order (unknown ids are skipped)."""
    known: list[CompressionType] = []
    for code in codes:
        try:
            known.append(CompressionType(code))
        except ValueError:
            log.debug("telemetry: broker accepts unknown compression type %d; ignored", code)
    return tuple(known)


class TelemetrySchedule:
    """The state, the subscription held and when the next request is due.

    ``clock`` is seconds (``time.monotonic``); ``uniform(a, b)`` draws the first-push jitter.
    """

    def __init__(self, *, clock: Callable[[], float],
                 uniform: Callable[[float, float], float] = random.uniform) -> None:
        self._clock = clock
        self._uniform = uniform
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        # the subscription last received (None until the first one; kept across re-fetches so
        # the client instance id stays the same)
        self.subscription: Subscription | None = None
        # when the last request was answered or failed (None: none yet), and how long after
        # it the next one is due; inf means telemetry is disabled
        self.last_request_at: float | None = None
        self.interval_ms: float = 0.0
        # pushes answered without error, for statistics and tests
        self.pushes = 0

    @property
    def enabled(self) -> bool:
        return self.interval_ms != _DISABLED and self.state is not TelemetryState.TERMINATED

    @property
    def client_instance_id(self) -> uuid.UUID | None:
        sub = self.subscription
        return None if sub is None else sub.client_instance_id

    def _move(self, new: TelemetryState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise IllegalStateError(f"telemetry: invalid transition {self.state.name} -> "
                                    f"{new.name}")
        self.state = new

    def _wait(self, interval_ms: float, now: float) -> None:
        self.interval_ms = interval_ms
        self.last_request_at = now

    def time_to_next(self, now: float | None = None) -> float:
        """Seconds until a request is due (0: now; inf: nothing to do until something changes)."""
        if not self.enabled:
            return math.inf
        state = self.state
        if state is TelemetryState.TERMINATING_PUSH_NEEDED:
            return 0.0
        if state not in (TelemetryState.SUBSCRIPTION_NEEDED, TelemetryState.PUSH_NEEDED):
            return math.inf  # a request is in progress, or terminating
        if self.last_request_at is None:
            return 0.0
        now = self._clock() if now is None else now
        return max(0.0, self.last_request_at + self.interval_ms / 1000 - now)

    def begin_request(self) -> TelemetryState:
        """A due request is being sent: SUBSCRIPTION_NEEDED / PUSH_NEEDED /
        TERMINATING_PUSH_NEEDED move to their IN_PROGRESS state, which is returned."""
        nxt = {
            TelemetryState.SUBSCRIPTION_NEEDED: TelemetryState.SUBSCRIPTION_IN_PROGRESS,
            TelemetryState.PUSH_NEEDED: TelemetryState.PUSH_IN_PROGRESS,
            TelemetryState.TERMINATING_PUSH_NEEDED: TelemetryState.TERMINATING_PUSH_IN_PROGRESS,
        }.get(self.state)
        if nxt is None:
            raise IllegalStateError(f"telemetry: no request to send in state {self.state.name}")
        self._move(nxt)
        return nxt

    def on_subscription(self, error_code: int, subscription: Subscription | None,
                        now: float | None = None) -> None:
        """The GetTelemetrySubscriptions answer (``subscription`` None when ``error_code``)."""
        now = self._clock() if now is None else now
        if self.state is not TelemetryState.SUBSCRIPTION_IN_PROGRESS:
            return  # closing began while the request was out: the answer no longer matters
        held = self.subscription
        wait = error_interval_ms(error_code, held.push_interval_ms if held else None)
        if wait is not None or subscription is None:
            self._move(TelemetryState.SUBSCRIPTION_NEEDED)
            self._wait(_DISABLED if wait is None else wait, now)
            return
        self.subscription = subscription
        if subscription.wants_metrics:
            self._move(TelemetryState.PUSH_NEEDED)
            # spread the first push over 0.5-1.5 intervals (Java: computeStaggeredIntervalMs)
            jitter = self._uniform(_JITTER_LOW, _JITTER_HIGH)
            self._wait(round(jitter * subscription.push_interval_ms), now)
        else:
            self._move(TelemetryState.SUBSCRIPTION_NEEDED)  # nothing asked for: look again later
            self._wait(subscription.push_interval_ms, now)

    def on_push(self, error_code: int, now: float | None = None) -> None:
        """The PushTelemetry answer."""
        now = self._clock() if now is None else now
        if self.state is TelemetryState.TERMINATING_PUSH_IN_PROGRESS:
            self._move(TelemetryState.TERMINATED)
            return
        if self.state is not TelemetryState.PUSH_IN_PROGRESS:
            return
        sub = self.subscription
        assert sub is not None  # a push is only sent with a subscription
        wait = error_interval_ms(error_code, sub.push_interval_ms)
        if wait is not None:
            self._move(TelemetryState.SUBSCRIPTION_NEEDED)
            self._wait(wait, now)
            return
        self.pushes += 1
        self._move(TelemetryState.PUSH_NEEDED)
        self._wait(sub.push_interval_ms, now)

    def on_request_failed(self, now: float | None = None) -> None:
        """The request got no answer (timeout, connection lost, API not supported): re-fetch
        the subscription after the default interval (Java's handleFailedRequest)."""
        now = self._clock() if now is None else now
        if self.state is TelemetryState.TERMINATING_PUSH_IN_PROGRESS:
            self._move(TelemetryState.TERMINATED)
            return
        if self.state not in (TelemetryState.SUBSCRIPTION_IN_PROGRESS,
                              TelemetryState.PUSH_IN_PROGRESS):
            return
        self._move(TelemetryState.SUBSCRIPTION_NEEDED)
        self._wait(DEFAULT_PUSH_INTERVAL_MS, now)

    def disable(self, now: float | None = None) -> None:
        """Stop for good (an unexpected error building a request): no request is due again."""
        self._wait(_DISABLED, self._clock() if now is None else now)

    def initiate_close(self) -> bool:
        """Closing: schedule the terminating push if there is anything to push it to.

        Returns whether a terminating push is now due. Without a subscription with metrics
        (never subscribed, none wanted, telemetry disabled) the machine ends in TERMINATED.
        """
        state = self.state
        sub = self.subscription
        if state in (TelemetryState.TERMINATING_PUSH_NEEDED,
                     TelemetryState.TERMINATING_PUSH_IN_PROGRESS, TelemetryState.TERMINATED):
            return state is TelemetryState.TERMINATING_PUSH_NEEDED
        if (self.enabled and sub is not None and sub.wants_metrics
                and state is not TelemetryState.SUBSCRIPTION_NEEDED):
            self._move(TelemetryState.TERMINATING_PUSH_NEEDED)
            return True
        self._move(TelemetryState.TERMINATED)
        return False

    def terminate(self) -> None:
        if self.state is not TelemetryState.TERMINATED:
            self._move(TelemetryState.TERMINATED)

    def __repr__(self) -> str:
        sub = self.subscription
        return (f"TelemetrySchedule(state={self.state.name}, interval_ms={self.interval_ms}, "
                f"instance={sub.client_instance_id if sub else None}, pushes={self.pushes})")
