"""KIP-1050's categories on every exception class: each has one, they agree with
``retriable``, the transactional ones are what KIP-1050 says, and the table in
docs/api/errors.md is the classes' own (tools/gen_error_docs.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from aiokprod import errors
from aiokprod.errors import ErrorCategory, error_for_code

REPO = Path(__file__).resolve().parents[2]


def public_classes() -> list[type[errors.KafkaError]]:
    return [obj for name in errors.__all__
            if isinstance(obj := getattr(errors, name), type)
            and issubclass(obj, errors.KafkaError)]


def test_every_public_class_has_a_category() -> None:
    classes = public_classes()
    assert len(classes) > 130
    for cls in classes:
        assert isinstance(cls.category, ErrorCategory), cls
        assert isinstance(cls("x").category, ErrorCategory)


def test_retriable_and_category_agree() -> None:
    """A RETRIABLE class is retriable; a retriable class is RETRIABLE except where this client
    does not retry what the broker calls retriable."""
    not_retried = {errors.CorruptMessageError}
    for cls in public_classes():
        if cls.category is ErrorCategory.RETRIABLE:
            assert cls.retriable, cls
        elif cls.retriable:
            assert cls in not_retried, cls


@pytest.mark.parametrize(("cls", "category"), [
    (errors.NotLeaderOrFollowerError, ErrorCategory.RETRIABLE),
    (errors.KafkaTimeoutError, ErrorCategory.RETRIABLE),
    (errors.BufferExhaustedError, ErrorCategory.RETRIABLE),
    (errors.ClientRequestTimeoutError, ErrorCategory.RETRIABLE),
    (errors.KafkaConnectionError, ErrorCategory.RETRIABLE),
    (errors.ConcurrentTransactionsError, ErrorCategory.RETRIABLE),
    (errors.TransactionAbortableError, ErrorCategory.ABORTABLE),
    (errors.TransactionAbortedError, ErrorCategory.ABORTABLE),
    (errors.InvalidProducerEpochError, ErrorCategory.ABORTABLE),
    (errors.MessageTooLargeError, ErrorCategory.ABORTABLE),
    (errors.RecordTooLargeError, ErrorCategory.ABORTABLE),
    (errors.SerializationError, ErrorCategory.ABORTABLE),
    (errors.IllegalTopicNameError, ErrorCategory.ABORTABLE),
    (errors.ProducerFencedError, ErrorCategory.APPLICATION_RECOVERABLE),
    (errors.TransactionCoordinatorFencedError, ErrorCategory.APPLICATION_RECOVERABLE),
    (errors.TopicAuthorizationFailedError, ErrorCategory.INVALID_CONFIGURATION),
    (errors.TransactionalIdAuthorizationFailedError, ErrorCategory.INVALID_CONFIGURATION),
    (errors.SaslAuthenticationFailedError, ErrorCategory.INVALID_CONFIGURATION),
    (errors.AuthenticationError, ErrorCategory.INVALID_CONFIGURATION),
    (errors.ConfigError, ErrorCategory.INVALID_CONFIGURATION),
    (errors.InvalidTransactionTimeoutError, ErrorCategory.INVALID_CONFIGURATION),
    (errors.UnsupportedVersionError, ErrorCategory.FATAL),
    (errors.InvalidTxnStateError, ErrorCategory.FATAL),
    (errors.IllegalStateError, ErrorCategory.FATAL),
    (errors.ProducerClosedError, ErrorCategory.FATAL),
    (errors.KafkaError, ErrorCategory.FATAL),
])
def test_categories(cls: type[errors.KafkaError], category: ErrorCategory) -> None:
    assert cls.category is category


def test_codes_this_client_does_not_know_are_abortable() -> None:
    unknown = error_for_code(9999)
    assert unknown.category is ErrorCategory.ABORTABLE and not unknown.retriable


def test_the_docs_table_is_current() -> None:
    spec = importlib.util.spec_from_file_location("gen_error_docs",
                                                  REPO / "tools/gen_error_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_error_docs"] = module
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run `python tools/gen_error_docs.py`"
    assert "| `ProducerFencedError` | 90 | no | application-recoverable |" in \
        (REPO / "docs/api/errors.md").read_text()
