"""The environment of a Python child process a test starts: what it imports first.

A child runs this checkout's package (``ROOT``) or the suite's ``support`` modules (``tests/``)
ahead of whatever ``PYTHONPATH`` the run already has, which it keeps after them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["python_path_first"]


def python_path_first(env: Mapping[str, str], *paths: str | Path) -> dict[str, str]:
    """A copy of ``env`` with ``paths`` at the front of ``PYTHONPATH``."""
    kept = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (*map(str, paths), kept) if p)}
