"""The Kafka wire protocol: generated message classes, primitives and framing.

Message classes are generated from Kafka's JSON specs by ``tools/gen_protocol.py`` into
``_generated``; this package re-exports them so callers write
``from aiokprod.protocol import ProduceRequest``.
"""

from aiokprod.protocol import _generated
from aiokprod.protocol._generated import *  # noqa: F403
from aiokprod.protocol.framing import (
    decode_response,
    decode_response_header,
    encode_request,
    encode_request_pieces,
)
from aiokprod.protocol.messages import KafkaRequest, KafkaResponse

__all__ = [
    "KafkaRequest",
    "KafkaResponse",
    "decode_response",
    "decode_response_header",
    "encode_request",
    "encode_request_pieces",
]
__all__ += _generated.__all__
