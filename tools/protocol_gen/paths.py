"""Where the generator reads from, and where it writes to (relative to ``--root``)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Apache Kafka's own message definitions, vendored (tools/kafka-specs/README.md says from where)
DEFAULT_SPECS = REPO / "tools" / "kafka-specs"
DEFAULT_ERROR_CODES = DEFAULT_SPECS / "kafka-error-codes.tsv"
OVERLAY_DIR = REPO / "tools" / "protocol_overlays"
# our KIP-1050 category per error name where the default (the broker's retriable flag:
# retriable, else abortable) is not the answer
DEFAULT_ERROR_CATEGORIES = OVERLAY_DIR / "error-categories.tsv"
GENERATED_DIR = Path("aiokprod/protocol/_generated")
ERROR_CODES_FILE = Path("aiokprod/_error_codes.py")
BROKER_ERRORS_FILE = Path("aiokprod/_broker_errors.py")
# where the hand-written exception classes live; generated class names must not collide with them
HAND_WRITTEN_ERROR_FILES = (Path("aiokprod/_error_base.py"), Path("aiokprod/errors.py"))
