"""Checks on what ``send()`` is given, run before anything is queued.

Bad input must fail the call that brought it, at once and with a message naming the problem,
never later inside a background task: a topic name the Metadata request cannot encode used to
kill the metadata task, and a timestamp beyond int64 used to crash the sender when it sealed
the batch. The rules are Kafka's own (Java's ``org.apache.kafka.common.internals.Topic``).
"""

from __future__ import annotations

import re

from aiokprod.errors import IllegalTopicNameError
from aiokprod.hooks import Headers

__all__ = ["BYTES_LIKE", "MAX_TIMESTAMP_MS", "MAX_TOPIC_NAME_LENGTH", "check_header_key",
           "check_headers", "check_timestamp_ms", "validate_topic"]

MAX_TOPIC_NAME_LENGTH = 249  # Kafka's limit (a partition directory name must fit 255 bytes)
MAX_TIMESTAMP_MS = 2**63 - 1  # the record batch's timestamp fields are int64
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
BYTES_LIKE = (bytes, bytearray, memoryview)  # what a key, value or header value may be


def validate_topic(topic: object) -> str:
    """``topic`` if the broker would accept it as a topic name; else an error saying why."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be str, got {type(topic).__name__}: {topic!r}")
    if not topic:
        raise IllegalTopicNameError("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise IllegalTopicNameError('Topic name cannot be "." or ".."')
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise IllegalTopicNameError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {topic[:60]!r}...")
    if _LEGAL_TOPIC.fullmatch(topic) is None:
        raise IllegalTopicNameError(
            f"Topic name {topic!r} is illegal, it contains a character other than ASCII "
            f"alphanumerics, '.', '_' and '-'")
    return topic


def check_timestamp_ms(timestamp_ms: object) -> int:
    """A record timestamp in ms since the epoch: a non-negative int that fits int64."""
    if not isinstance(timestamp_ms, int) or not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
        raise ValueError(f"timestamp_ms must be an int in 0..2**63-1 (ms since the epoch), "
                         f"got {timestamp_ms!r}")
    return timestamp_ms


def check_header_key(key: str) -> None:
    """A header key must encode as UTF-8 (a lone surrogate does not)."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"header key {key!r} cannot be encoded as UTF-8: {exc.reason}") from None


def check_headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    """``headers`` as a list of (str, bytes | None) pairs, or an error naming the bad one."""
    checked: list[tuple[str, bytes | None]] = []
    for item in headers:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {item!r}")
        hkey, hvalue = item
        if not isinstance(hkey, str):
            raise TypeError(f"header key must be str, got {type(hkey).__name__}: {hkey!r}")
        check_header_key(hkey)
        if hvalue is not None and not isinstance(hvalue, BYTES_LIKE):
            raise TypeError(f"header {hkey!r} value must be bytes or None, "
                            f"got {type(hvalue).__name__}")
        checked.append((hkey, None if hvalue is None else bytes(hvalue)))
    return checked
