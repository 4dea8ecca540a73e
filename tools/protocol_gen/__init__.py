"""Generate aiokprod's wire-protocol classes from Kafka's JSON message specs.

Reads the vendored ``tools/kafka-specs/*.json`` (``--specs DIR``) and
``tools/kafka-specs/kafka-error-codes.tsv`` (``--error-codes FILE``), merges the overlays in
``tools/protocol_overlays/`` and writes:

* ``aiokprod/protocol/_generated/<api>.py``: one versionless class per message, its structs
  nested as attributes, with straight-line encoders/decoders per group of versions sharing a
  wire layout (no per-field interpreter at run time);
* ``aiokprod/protocol/_generated/__init__.py``: re-exports and ``API_BY_KEY``;
* ``aiokprod/_error_codes.py``: the ``ErrorCode`` enum;
* ``aiokprod/_broker_errors.py``: one exception class per error code (``aiokprod.errors``
  re-exports them).

``--check`` regenerates in memory and exits 1 listing every file that would change (and stale
files in ``_generated/``).

The package, in the order data flows through it:

* :mod:`.model` — version ranges, types, fields, structs, messages; the spec vocabulary;
* :mod:`.specs` — reading the JSON specs and overlays into the model (strict);
* :mod:`.layout`, :mod:`.codecs`, :mod:`.messages` — emitting the message modules;
* :mod:`.error_codes`, :mod:`.error_classes` — emitting the error-code enum and classes;
* :mod:`.cli` — ``generate_all`` and ``main`` (``tools/gen_protocol.py`` calls it).
"""

from __future__ import annotations

from .cli import generate_all, main, stale_files
from .model import SpecError, Versions
from .specs import load_message, load_overlays, strip_comments

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
