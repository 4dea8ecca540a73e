"""aiokprod: an asyncio-native Apache Kafka producer.

The public API is what this module exports; everything else is internal and may change.
Names are imported on first use (PEP 562), so ``import aiokprod.protocol`` or the CLI does not
pay for the whole producer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiokprod.config import ProducerConfig
    from aiokprod.errors import (
        AuthenticationError,
        BrokerResponseError,
        BufferExhaustedError,
        ClientRequestTimeoutError,
        ConfigError,
        ErrorCategory,
        IllegalStateError,
        IllegalTopicNameError,
        KafkaConnectionError,
        KafkaError,
        KafkaTimeoutError,
        ProducerClosedError,
        ProducerFencedError,
        ProtocolError,
        RecordTooLargeError,
        SerializationError,
        TransactionAbortableError,
        TransactionAbortedError,
        UnrecognizedBrokerError,
    )
    from aiokprod.hooks import (
        Partitioner,
        ProducerInterceptor,
        Serializer,
        SerializerNotReady,
        TopicSerializer,
    )
    from aiokprod.network.oauth import OAuthToken
    from aiokprod.producer.bulk import SendManyResult
    from aiokprod.producer.producer import Producer, ProducerHealth
    from aiokprod.producer.transactional.prepared import PreparedTransaction
    from aiokprod.producer.transactional.transactions import ConsumerGroupMetadata
    from aiokprod.record_metadata import RecordMetadata
    from aiokprod.records.columnar import BinaryColumn, HeaderColumn
    from aiokprod.settings import ProducerSettings

from aiokprod._version import __version__  # written once, in aiokprod/_version.py

_ERRORS = (
    "AuthenticationError",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ClientRequestTimeoutError",
    "ConfigError",
    "ErrorCategory",
    "IllegalStateError",
    "IllegalTopicNameError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProtocolError",
    "RecordTooLargeError",
    "SerializationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "UnrecognizedBrokerError",
)
_LAZY = {
    **{name: "aiokprod.errors" for name in _ERRORS},
    "ConsumerGroupMetadata": "aiokprod.producer.transactional.transactions",
    "PreparedTransaction": "aiokprod.producer.transactional.prepared",
    "OAuthToken": "aiokprod.network.oauth",
    "Partitioner": "aiokprod.hooks",
    "ProducerInterceptor": "aiokprod.hooks",
    "Serializer": "aiokprod.hooks",
    "SerializerNotReady": "aiokprod.hooks",
    "TopicSerializer": "aiokprod.hooks",
    "Producer": "aiokprod.producer.producer",
    "ProducerHealth": "aiokprod.producer.producer",
    "ProducerConfig": "aiokprod.config",
    "ProducerSettings": "aiokprod.settings",
    "RecordMetadata": "aiokprod.record_metadata",
    "SendManyResult": "aiokprod.producer.bulk",
    "BinaryColumn": "aiokprod.records.columnar",
    "HeaderColumn": "aiokprod.records.columnar",
}

__all__ = [
    "AuthenticationError",
    "BinaryColumn",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ClientRequestTimeoutError",
    "ConfigError",
    "ConsumerGroupMetadata",
    "ErrorCategory",
    "HeaderColumn",
    "IllegalStateError",
    "IllegalTopicNameError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "OAuthToken",
    "Partitioner",
    "PreparedTransaction",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerFencedError",
    "ProducerHealth",
    "ProducerInterceptor",
    "ProducerSettings",
    "ProtocolError",
    "RecordMetadata",
    "RecordTooLargeError",
    "SendManyResult",
    "SerializationError",
    "Serializer",
    "SerializerNotReady",
    "TopicSerializer",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "UnrecognizedBrokerError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'aiokprod' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
