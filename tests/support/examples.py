"""How many examples a property test runs, one knob for the whole suite.

The main run proves every property at its full count on the native path. The other Pythons'
tiers and the pure-Python pass run the same tests to show that the code works *there* (syntax,
the standard library, the build, the pure twins): a fraction of the examples shows that, and
the count is most of those passes' time. ``AIOKPROD_EXAMPLES_FRACTION`` (the Makefile sets it
for them) scales every count; unset, each test runs the count written beside it.
"""

from __future__ import annotations

import os

__all__ = ["FRACTION", "examples"]

FRACTION = float(os.environ.get("AIOKPROD_EXAMPLES_FRACTION", "1"))
if not 0 < FRACTION <= 1:
    raise ValueError(f"AIOKPROD_EXAMPLES_FRACTION={FRACTION}: give a fraction in (0, 1]")


def examples(count: int) -> int:
    """``count`` scaled by the fraction, never below 3 (a property run once proves little)."""
    return max(3, round(count * FRACTION)) if FRACTION < 1 else count
