#!/usr/bin/env python3
"""Generate aiokprod's wire-protocol classes from the vendored Kafka message specs.

``python tools/gen_protocol.py`` writes the generated files; ``--check`` exits 1 listing every
file that would change. The generator itself is the ``tools/protocol_gen`` package (spec
loading, model, emitters); this file is its command-line entry point, kept so that ``make gen``
and the tests have one stable path to run.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TOOLS = str(Path(__file__).resolve().parent)
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

from protocol_gen import (  # noqa: E402  (needs tools/ on sys.path, set just above)
    SpecError,
    Versions,
    generate_all,
    load_message,
    load_overlays,
    main,
    stale_files,
    strip_comments,
)

__all__ = [
    "SpecError",
    "Versions",
    "generate_all",
    "load_message",
    "load_overlays",
    "main",
    "stale_files",
    "strip_comments",
]

if __name__ == "__main__":
    sys.exit(main())
