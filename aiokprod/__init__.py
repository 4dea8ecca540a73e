"""aiokprod: an asyncio-native Apache Kafka producer.

The public API is what this module exports; everything else is internal and may change.
Names are imported on first use (PEP 562), so ``import aiokprod.protocol`` or the CLI does not
pay for the whole producer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiokprod.errors import KafkaError
    from aiokprod.producer.batch import RecordMetadata
    from aiokprod.producer.producer import Producer

__all__ = ["KafkaError", "Producer", "RecordMetadata", "__version__"]

__version__ = "0.1.0"

_LAZY = {
    "KafkaError": "aiokprod.errors",
    "Producer": "aiokprod.producer.producer",
    "RecordMetadata": "aiokprod.producer.batch",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aiokprod' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
