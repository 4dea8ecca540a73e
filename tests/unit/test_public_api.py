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


def test_every_exception_class_of_the_tree_is_at_the_root() -> None:
    # docs/index.md: the error tree's classes import from the package root; only the
    # generated one-per-error-code classes are aiokprod.errors' alone
    from aiokprod import _broker_errors, errors

    generated = set(_broker_errors.__all__)
    tree = [name for name in errors.__all__
            if name not in generated and isinstance(getattr(errors, name), type)
            and getattr(errors, name).__name__ == name]  # not an old name kept as an alias
    assert {"ErrorCategory", "TransactionAbortedError"} <= set(tree)
    missing = [name for name in tree if name not in aiokprod.__all__]
    assert missing == []
    for name in tree:
        assert getattr(aiokprod, name) is getattr(errors, name), name


def test_the_integrations_export_their_names_from_their_modules() -> None:
    # docs/index.md sends a user to aiokprod.spark for KafkaSinkError (its module imports
    # pyarrow, which the package root must not)
    import ast
    from pathlib import Path

    source = Path(aiokprod.__file__).parent / "spark" / "__init__.py"
    exported = next(
        node.value for node in ast.parse(source.read_text()).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets))
    assert "KafkaSinkError" in ast.literal_eval(exported)
    assert "KafkaSinkError" not in aiokprod.__all__
