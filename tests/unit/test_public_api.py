"""The package root exports what users catch and use, and nothing it cannot import."""

from __future__ import annotations

import pytest

import aiokprod

# a check of the source tree, the same on every Python and encoder: `make test` runs it once
pytestmark = pytest.mark.static


def test_every_public_name_imports_from_the_package_root() -> None:
    for name in aiokprod.__all__:
        assert getattr(aiokprod, name) is not None, name


def test_the_errors_a_user_catches_are_exported_and_form_one_tree() -> None:
    for name in ("ProducerClosedError", "BufferExhaustedError", "RecordTooLargeError",
                 "KafkaTimeoutError", "SerializationError", "ConfigError",
                 "IllegalTopicNameError", "KafkaConnectionError"):
        cls = getattr(aiokprod, name)
        assert issubclass(cls, aiokprod.KafkaError), name
    assert issubclass(aiokprod.BufferExhaustedError, aiokprod.KafkaTimeoutError)
    assert issubclass(aiokprod.IllegalTopicNameError, ValueError)
