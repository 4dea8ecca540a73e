"""Exponential backoff with jitter, shared by reconnects and produce retries.

Kafka clients use one formula for both (KIP-144 for reconnects, KIP-580 for retries):
``initial * multiplier ** attempts``, capped at ``maximum``, then spread by ±``jitter`` so
that many clients that failed together do not retry together. Pure: the random source is
injected so tests can pin it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

__all__ = ["ExponentialBackoff"]


class ExponentialBackoff:
    """Delay in milliseconds before attempt number ``attempts`` (0 = first retry)."""

    __slots__ = ("_exp_max", "_initial", "_jitter", "_maximum", "_multiplier", "_random")

    def __init__(
        self,
        initial_ms: float,
        maximum_ms: float,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial_ms < 0 or maximum_ms < 0:
            raise ValueError(f"backoff must be >= 0 ms, got initial={initial_ms} max={maximum_ms}")
        self._initial = float(initial_ms)
        # Java treats max < initial as "no growth": the cap is then the initial value.
        self._maximum = float(max(maximum_ms, initial_ms))
        self._multiplier = multiplier
        self._jitter = jitter
        self._random = rand
        # Beyond this exponent the cap always wins; computing it avoids float overflow.
        if self._initial > 0 and multiplier > 1:
            self._exp_max = math.log(self._maximum / self._initial) / math.log(multiplier)
        else:
            self._exp_max = 0.0

    def backoff_ms(self, attempts: int) -> float:
        if self._initial == 0:
            return 0.0
        exp = min(float(max(attempts, 0)), self._exp_max)
        term: float = self._initial * self._multiplier**exp
        if self._jitter > 0:
            term *= 1.0 + self._jitter * (2.0 * self._random() - 1.0)
        return min(term, self._maximum * (1.0 + self._jitter))

    def __repr__(self) -> str:
        return (
            f"ExponentialBackoff(initial={self._initial}ms, max={self._maximum}ms, "
            f"multiplier={self._multiplier}, jitter={self._jitter})"
        )
