"""The fault plan a test configures for the Kafka-aware proxy (``support.proxy``): no I/O here.

Why a separate, pure module: which request or response gets hit is a decision about counts
and random draws, and tests must be able to reason about it ("the 3rd Produce response after
I configured the rule is dropped") without sockets in the way. The proxy asks the plan one
question per event and performs whatever the answer says.

Determinism. Every rule has its own ``random.Random`` derived from the plan's seed and the
rule's position in the plan, so the same seed and the same sequence of events give the same
hits, and adding a rule never shifts another rule's random draws. Ordinals (``nth``,
``every``) count the events a rule has observed *since it was added*, so a test can warm a
connection up first and then say "drop the next Produce response".

Thread safety. The proxy usually runs in its own thread (``ProxyThread``) while the test
configures the plan from the main thread, so every public method takes the plan's lock.

Precedence for one response: drop rules first (a dropped response is seen by no other rule),
then rewrite rules, then stall rules; the plan's ``rtt_ms`` applies to every response that is
forwarded (and to the moment a dropped response's connection is closed).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "PRODUCE_API_KEY",
    "FaultKind",
    "FaultPlan",
    "FaultRule",
    "ProduceRewrite",
    "RequestDecision",
    "ResponseDecision",
    "Schedule",
]

#: Kafka API key of Produce; the only API most faults target.
PRODUCE_API_KEY = 0

#: A rewrite hook: edits the decoded ``ProduceResponse`` in place (return None) or returns a
#: replacement; the second argument is the response version. Typed ``Any`` so this module
#: does not import the generated protocol classes.
ProduceRewrite = Callable[[Any, int], Any]


class FaultKind(Enum):
    """What a rule does when it hits; the proxy maps each to one action."""

    # Forward the Produce request, discard the broker's response, close the client side.
    DROP_PRODUCE_RESPONSE = "drop_produce_response"
    # Hold a response for a while before forwarding it (later responses wait behind it).
    STALL_RESPONSE = "stall_response"
    # Do not forward the Produce request; abort both sides of the connection with RST.
    RESET_ON_PRODUCE_REQUEST = "reset_on_produce_request"
    # Decode the Produce response, let a callback edit it, re-encode it.
    REWRITE_PRODUCE_RESPONSE = "rewrite_produce_response"
    # Do not let the broker see the Produce request; answer every partition in it with an
    # error code, in order with the connection's other responses.
    REFUSE_PRODUCE_REQUEST = "refuse_produce_request"


@dataclass(frozen=True)
class Schedule:
    """Which of the events a rule observes it hits; a pure, immutable description.

    An event hits if its ordinal (1-based, counted from the rule's creation) is in ``nth``,
    or is a multiple of ``every``, or a random draw is below ``probability``. With none of
    the three given, every event hits. ``times`` caps the total number of hits.
    """

    nth: frozenset[int] = frozenset()
    every: int | None = None
    probability: float = 0.0
    times: int | None = None

    def __post_init__(self) -> None:
        if any(n < 1 for n in self.nth):
            raise ValueError(f"nth ordinals are 1-based, got {sorted(self.nth)}")
        if self.every is not None and self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {self.probability}")
        if self.times is not None and self.times < 0:
            raise ValueError(f"times must be >= 0, got {self.times}")

    @property
    def unconditional(self) -> bool:
        """True when no selector was given, so every observed event is a hit."""
        return not self.nth and self.every is None and self.probability == 0.0

    def selects(self, ordinal: int, draw: float | None) -> bool:
        """Whether the event with this ordinal (and random draw) is selected, ignoring times."""
        if self.unconditional:
            return True
        if ordinal in self.nth:
            return True
        if self.every is not None and ordinal % self.every == 0:
            return True
        return draw is not None and draw < self.probability


class FaultRule:
    """One configured fault with its own counters, returned to the test for assertions.

    Mutated only by ``FaultPlan`` under the plan's lock; read ``seen``/``hits`` freely.
    """

    def __init__(
        self,
        kind: FaultKind,
        schedule: Schedule,
        rng: random.Random,
        *,
        api_key: int | None = PRODUCE_API_KEY,
        stall_seconds: float = 0.0,
        abort: bool = False,
        rewrite: ProduceRewrite | None = None,
        error_code: int = 0,
    ) -> None:
        self.kind = kind
        self.schedule = schedule
        # Private to this rule so that other rules' draws never shift this rule's hits.
        self._rng = rng
        # Which responses a stall rule targets (None: every API); Produce for the others.
        self.api_key = api_key
        # How long a stall rule holds a response, on top of the plan's rtt.
        self.stall_seconds = stall_seconds
        # Drop rules: close the client side with RST (True) or a graceful FIN (False).
        self.abort = abort
        # Rewrite rules: the callback that edits the decoded ProduceResponse.
        self.rewrite = rewrite
        # Refuse rules: the error code every partition of the refused request is answered with.
        self.error_code = error_code
        # Events this rule has observed (the ordinal of the latest one).
        self.seen = 0
        # Events this rule has hit; never exceeds schedule.times.
        self.hits = 0

    @property
    def exhausted(self) -> bool:
        """No further event can hit: ``times`` reached, or past the last ``nth`` ordinal."""
        schedule = self.schedule
        if schedule.times is not None and self.hits >= schedule.times:
            return True
        only_nth = schedule.nth and schedule.every is None and schedule.probability == 0.0
        return bool(only_nth) and self.seen >= max(schedule.nth)

    def observe(self) -> bool:
        """Count one event and say whether it is a hit (always draws if a probability is set)."""
        if self.exhausted:
            return False
        self.seen += 1
        draw = self._rng.random() if self.schedule.probability > 0.0 else None
        if not self.schedule.selects(self.seen, draw):
            return False
        self.hits += 1
        return True

    def __repr__(self) -> str:
        s = self.schedule
        selectors = []
        if s.nth:
            selectors.append(f"nth={sorted(s.nth)}")
        if s.every is not None:
            selectors.append(f"every={s.every}")
        if s.probability:
            selectors.append(f"p={s.probability}")
        if s.times is not None:
            selectors.append(f"times={s.times}")
        if self.kind is FaultKind.STALL_RESPONSE:
            selectors.append(f"seconds={self.stall_seconds} api_key={self.api_key}")
        return (
            f"<FaultRule {self.kind.value} {' '.join(selectors)} seen={self.seen} hits={self.hits}>"
        )


@dataclass(frozen=True)
class ResponseDecision:
    """What the proxy does with one response from the broker."""

    # Discard the response and close the client connection.
    drop: bool = False
    # With drop: close with RST instead of FIN.
    abort: bool = False
    # Extra seconds to hold the response (sum of the stall rules that hit).
    stall_seconds: float = 0.0
    # Rewrite callbacks to apply, in rule order (Produce responses only).
    rewrites: tuple[ProduceRewrite, ...] = ()
    # The plan's added latency at decision time.
    delay_seconds: float = 0.0


@dataclass(frozen=True)
class RequestDecision:
    """What the proxy does with one request from the client."""

    # Abort both sides instead of forwarding the request.
    reset: bool = False
    # Not 0: keep the request from the broker and answer it with this error code instead.
    refuse_with: int = 0


_FORWARD = RequestDecision()


class FaultPlan:
    """The one object a test configures: rules, latency, seed. Shared with the proxy thread."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._lock = threading.Lock()
        # Rules in the order they were added; their index seeds their generator.
        self._rules: list[FaultRule] = []
        # Added to every response's delivery time (ms), preserving order per connection.
        self._rtt_ms = 0.0
        # Total rules ever created, so a rule added after clear() gets a fresh generator.
        self._created = 0

    # -- configuration (any thread) ------------------------------------------------------

    @property
    def rtt_ms(self) -> float:
        return self._rtt_ms

    @rtt_ms.setter
    def rtt_ms(self, value: float) -> None:
        if value < 0:
            raise ValueError(f"rtt_ms must be >= 0, got {value}")
        with self._lock:
            self._rtt_ms = float(value)

    def drop_produce_response(
        self,
        *,
        times: int | None = None,
        nth: Iterable[int] = (),
        every: int | None = None,
        probability: float = 0.0,
        abort: bool = False,
    ) -> FaultRule:
        """After the broker appended a batch, lose its response and close the client side.

        The classic duplicate maker: the client cannot tell "not appended" from "appended,
        answer lost" and retries. ``abort=True`` closes with RST instead of FIN.
        """
        return self._add(
            FaultKind.DROP_PRODUCE_RESPONSE, times, nth, every, probability, abort=abort
        )

    def stall_responses(
        self,
        seconds: float,
        *,
        api_key: int | None = PRODUCE_API_KEY,
        times: int | None = None,
        nth: Iterable[int] = (),
        every: int | None = None,
        probability: float = 0.0,
    ) -> FaultRule:
        """Hold responses (of ``api_key``; None = any API) ``seconds`` before forwarding.

        Longer than the client's request.timeout.ms, this makes the client time out while the
        broker has already acted. Responses behind a held one on the same connection wait too,
        as they would behind a slow broker.
        """
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        return self._add(
            FaultKind.STALL_RESPONSE,
            times,
            nth,
            every,
            probability,
            api_key=api_key,
            stall_seconds=float(seconds),
        )

    def reset_on_produce_request(
        self,
        *,
        times: int | None = None,
        nth: Iterable[int] = (),
        every: int | None = None,
        probability: float = 0.0,
    ) -> FaultRule:
        """On a selected Produce request, do not forward it and abort both sides with RST.

        The request is lost before the broker sees it, so a retry cannot duplicate it; use
        ``drop_produce_response`` for the after-append case.
        """
        return self._add(FaultKind.RESET_ON_PRODUCE_REQUEST, times, nth, every, probability)

    def refuse_produce_request(
        self,
        error_code: int,
        *,
        times: int | None = None,
        nth: Iterable[int] = (),
        every: int | None = None,
        probability: float = 0.0,
    ) -> FaultRule:
        """Keep a selected Produce request from the broker and answer it with ``error_code``
        for every partition it carries (e.g. NOT_LEADER_OR_FOLLOWER, as a leader that is not
        ready yet answers).

        A definite refusal: the broker never saw the records, so nothing of them is written,
        while the requests after it on the same connection reach the broker as usual.
        """
        if error_code == 0:
            raise ValueError("refuse_produce_request needs a non-zero error code")
        return self._add(FaultKind.REFUSE_PRODUCE_REQUEST, times, nth, every, probability,
                         error_code=error_code)

    def rewrite_produce_responses(
        self,
        callback: ProduceRewrite,
        *,
        times: int | None = None,
        nth: Iterable[int] = (),
        every: int | None = None,
        probability: float = 0.0,
    ) -> FaultRule:
        """Let ``callback(response, version)`` edit selected decoded Produce responses.

        Lets tests feed the client fields no released broker sends (KIP-1269's
        ``producer_state_batches_to_retain``) or error codes a broker is hard to coax into.
        """
        return self._add(
            FaultKind.REWRITE_PRODUCE_RESPONSE, times, nth, every, probability, rewrite=callback
        )

    def remove(self, rule: FaultRule) -> None:
        """Stop applying ``rule`` (its counters stay readable)."""
        with self._lock:
            self._rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule and the added latency: the proxy becomes a plain pipe again."""
        with self._lock:
            self._rules.clear()
            self._rtt_ms = 0.0

    @property
    def rules(self) -> tuple[FaultRule, ...]:
        with self._lock:
            return tuple(self._rules)

    def _add(
        self,
        kind: FaultKind,
        times: int | None,
        nth: Iterable[int],
        every: int | None,
        probability: float,
        **options: Any,
    ) -> FaultRule:
        schedule = Schedule(frozenset(nth), every, probability, times)
        with self._lock:
            # A string seed is hashed stably (unlike hash()), so runs are reproducible.
            rng = random.Random(f"{self.seed}:{self._created}")
            self._created += 1
            rule = FaultRule(kind, schedule, rng, **options)
            self._rules.append(rule)
        return rule

    # -- decisions (proxy thread) --------------------------------------------------------

    def on_request(self, api_key: int) -> RequestDecision:
        """Called by the proxy for each request before forwarding it."""
        if api_key != PRODUCE_API_KEY:
            return _FORWARD
        with self._lock:
            for rule in self._rules:
                if rule.kind is FaultKind.RESET_ON_PRODUCE_REQUEST and rule.observe():
                    return RequestDecision(reset=True)
                if rule.kind is FaultKind.REFUSE_PRODUCE_REQUEST and rule.observe():
                    return RequestDecision(refuse_with=rule.error_code)
        return _FORWARD

    def on_response(self, api_key: int) -> ResponseDecision:
        """Called by the proxy for each response that answers a tracked request."""
        with self._lock:
            delay = self._rtt_ms / 1000.0
            if api_key == PRODUCE_API_KEY:
                for rule in self._rules:
                    if rule.kind is FaultKind.DROP_PRODUCE_RESPONSE and rule.observe():
                        return ResponseDecision(drop=True, abort=rule.abort, delay_seconds=delay)
            rewrites: list[ProduceRewrite] = []
            stall = 0.0
            for rule in self._rules:
                if rule.kind is FaultKind.REWRITE_PRODUCE_RESPONSE:
                    if api_key == PRODUCE_API_KEY and rule.observe() and rule.rewrite:
                        rewrites.append(rule.rewrite)
                elif rule.kind is FaultKind.STALL_RESPONSE:
                    matches = rule.api_key is None or rule.api_key == api_key
                    if matches and rule.observe():
                        stall += rule.stall_seconds
            return ResponseDecision(
                stall_seconds=stall, rewrites=tuple(rewrites), delay_seconds=delay
            )

    def __repr__(self) -> str:
        with self._lock:
            rules = ", ".join(repr(rule) for rule in self._rules) or "no rules"
            return f"<FaultPlan seed={self.seed} rtt_ms={self._rtt_ms:g} [{rules}]>"
