"""The exception tree: one class per TSV error code with the TSV's facts, the names the rest
of the code imports, and the stdlib bases that let callers catch by kind."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from aiokprod import errors
from aiokprod._error_codes import ErrorCode
from aiokprod.errors import (
    BROKER_ERRORS_BY_CODE,
    BrokerResponseError,
    BufferExhaustedError,
    ConfigError,
    DuplicateSequenceNumberError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NotLeaderOrFollowerError,
    ProducerClosedError,
    ProtocolError,
    RecordTooLargeError,
    RequestTimedOutError,
    RequestTimeoutError,
    SerializationError,
    UnknownServerError,
    UnrecognizedBrokerError,
    UnsupportedVersionError,
    error_for_code,
    raise_for_error_code,
)

TSV = Path(__file__).resolve().parents[2] / "tools" / "kafka-specs" / "kafka-error-codes.tsv"


def tsv_rows() -> list[dict[str, str]]:
    with TSV.open(newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_every_tsv_row_has_a_member_and_a_class() -> None:
    rows = tsv_rows()
    assert len(rows) > 100
    for row in rows:
        code = int(row["code"])
        member = ErrorCode(code)
        assert member.name == row["name"]
        assert member.retriable is (row["retriable"] == "true")
        assert member.message == row["message"].strip()
        java = row["java_exception"]
        assert member.java_exception == (None if java in ("", "-") else java)
        if code == 0:
            assert code not in BROKER_ERRORS_BY_CODE
            continue
        cls = error_for_code(code)
        assert issubclass(cls, BrokerResponseError)
        assert cls.__module__ == "aiokprod.errors"
        assert getattr(errors, cls.__name__) is cls
        assert cls.__name__.endswith("Error") and not cls.__name__.endswith("ErrorError")
        assert (cls.code, cls.retriable, cls.message) == (code, member.retriable, member.message)
        assert cls.error_code is member


def test_names_from_the_brief() -> None:
    assert error_for_code(6) is NotLeaderOrFollowerError
    assert error_for_code(7) is RequestTimedOutError
    assert error_for_code(-1) is UnknownServerError
    assert error_for_code(46) is DuplicateSequenceNumberError
    assert error_for_code(10) is MessageTooLargeError
    assert error_for_code(35) is UnsupportedVersionError
    assert NotLeaderOrFollowerError.retriable is True
    assert MessageTooLargeError.retriable is False


def test_error_code_enum() -> None:
    assert ErrorCode.NONE == 0
    assert ErrorCode.of(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    unknown = ErrorCode.of(4242)
    assert int(unknown) == 4242 and unknown.name == "UNKNOWN_4242"
    assert unknown.retriable is False
    assert ErrorCode(4242) is unknown  # decoding a newer broker's code never raises


def test_unknown_codes_get_a_class_carrying_the_number() -> None:
    cls = error_for_code(4242)
    assert issubclass(cls, UnrecognizedBrokerError)
    assert cls.code == 4242 and error_for_code(4242) is cls
    assert "4242" in str(cls())


def test_raise_for_error_code() -> None:
    raise_for_error_code(0, "Produce to t-0")
    with pytest.raises(NotLeaderOrFollowerError) as info:
        raise_for_error_code(6, "Produce to t-0")
    assert "Produce to t-0" in str(info.value)
    assert "[Error 6] NOT_LEADER_OR_FOLLOWER" in str(info.value)


def test_client_side_tree() -> None:
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, KafkaError)
    assert issubclass(BufferExhaustedError, KafkaTimeoutError)
    assert issubclass(RequestTimeoutError, KafkaTimeoutError)
    assert issubclass(RecordTooLargeError, ValueError)
    assert issubclass(SerializationError, ValueError)
    assert issubclass(IllegalStateError, RuntimeError)
    assert not issubclass(ProtocolError, ValueError)
    assert not issubclass(ProducerClosedError, ValueError)
    for cls in (KafkaTimeoutError, BufferExhaustedError, RequestTimeoutError, KafkaConnectionError):
        assert cls.retriable is True
    for cls in (ConfigError, RecordTooLargeError, SerializationError, ProtocolError,
                ProducerClosedError, IllegalStateError):
        assert cls.retriable is False
    assert ConfigError.code is None


def test_connection_error_names_node_and_address() -> None:
    exc = KafkaConnectionError("connection reset", node_id=2, address="broker-2:9092")
    assert "node 2" in str(exc) and "broker-2:9092" in str(exc)
    assert (exc.node_id, exc.address) == (2, "broker-2:9092")


def test_messages_default_and_override() -> None:
    assert BufferExhaustedError().message == BufferExhaustedError.message
    assert ConfigError("linger_ms must be >= 0").message == "linger_ms must be >= 0"
    assert str(ConfigError("x")) == "x"


def test_the_three_timeouts_are_told_apart() -> None:
    """KafkaTimeoutError: a user-facing bound; ClientRequestTimeoutError (old name
    RequestTimeoutError): this client's request.timeout.ms; RequestTimedOutError: the broker's
    code 7. The module docstring says the same."""
    assert errors.RequestTimeoutError is errors.ClientRequestTimeoutError
    assert issubclass(errors.ClientRequestTimeoutError, KafkaTimeoutError)
    assert errors.ClientRequestTimeoutError.code is None  # measured by the client
    assert issubclass(RequestTimedOutError, BrokerResponseError)
    assert not issubclass(RequestTimedOutError, KafkaTimeoutError)
    assert RequestTimedOutError.code == 7 and RequestTimedOutError.retriable
    doc = errors.__doc__ or ""
    for name in ("KafkaTimeoutError", "ClientRequestTimeoutError", "RequestTimedOutError"):
        assert f"``{name}``" in doc


def test_generated_classes_are_re_exported_and_named_after_the_public_module() -> None:
    import pickle

    from aiokprod import _broker_errors

    for name in _broker_errors.__all__:
        assert getattr(errors, name) is getattr(_broker_errors, name), name
        assert name in errors.__all__
    for cls in (KafkaError, BrokerResponseError, NotLeaderOrFollowerError):
        assert cls.__module__ == "aiokprod.errors"
    exc = pickle.loads(pickle.dumps(NotLeaderOrFollowerError("moved")))
    assert type(exc) is NotLeaderOrFollowerError and exc.message == "moved"
    assert len(errors.__all__) == len(set(errors.__all__))


def _all_error_classes() -> list[type[BaseException]]:
    from aiokprod import errors

    seen: list[type[BaseException]] = []
    todo: list[type[BaseException]] = [KafkaError]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.append(cls)
            todo.extend(cls.__subclasses__())
    named = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, KafkaError)]
    assert set(named) <= set(seen)
    return seen


def test_no_library_error_is_an_oserror() -> None:
    """``except OSError`` (or ``TimeoutError``/``ConnectionError``, both ``OSError``\\ s) in an
    application never swallows an aiokprod error; ``except KafkaError`` catches them all."""
    classes = _all_error_classes()
    assert len(classes) > 100  # the client-side classes and one per broker error code
    offenders = [c.__name__ for c in classes if issubclass(c, OSError)]
    assert offenders == []
    assert not issubclass(KafkaTimeoutError, TimeoutError)
    assert not issubclass(KafkaConnectionError, ConnectionError)
    try:
        try:
            raise BufferExhaustedError("no memory within max.block.ms")
        except OSError:  # what an application wraps around its own socket/file code
            pytest.fail("an OSError handler caught a KafkaTimeoutError")
    except KafkaTimeoutError:
        pass
