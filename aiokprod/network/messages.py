"""The message protocol, re-exported where the network layer's callers have imported it from.

Defined once in :mod:`aiokprod.protocol.messages`.
"""

from aiokprod.protocol.messages import KafkaRequest, KafkaResponse

__all__ = ["KafkaRequest", "KafkaResponse"]
