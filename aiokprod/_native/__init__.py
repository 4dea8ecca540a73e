"""Selects the native (Cython) per-record path or the pure-Python one, once, at import.

``speedups`` is the compiled ``aiokprod._native._speedups`` module, or None when it was not
built (no compiler at install time: the install warns once) or when ``AIOKPROD_NO_EXTENSIONS``
is set to anything but ``0`` (the pure-Python path, which the test suite runs as well).
Modules with a native twin bind one implementation when they are imported; nothing branches
per record.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["NATIVE", "speedups"]

speedups: ModuleType | None = None
if os.environ.get("AIOKPROD_NO_EXTENSIONS", "") in ("", "0"):
    try:
        from aiokprod._native import _speedups as speedups
    except ImportError:  # not built here: the pure-Python path works the same, slower
        speedups = None

#: True when the native path is in use.
NATIVE = speedups is not None
