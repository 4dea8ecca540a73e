"""Every exception aiokprod raises, in one tree.

::

    Exception
     └── KafkaError                              code, retriable, message
          ├── BrokerResponseError                an error code returned by a broker
          │    ├── NotLeaderOrFollowerError      one class per ErrorCode (generated below)
          │    ├── UnsupportedVersionError       also raised client-side: no usable API version
          │    ├── ...                           (UnknownServerError, RequestTimedOutError, ...)
          │    └── UnrecognizedBrokerError       codes this client does not know (per-code subclass)
          ├── ConfigError                        (also ValueError) invalid producer configuration
          ├── SerializationError                 (also ValueError) a serializer failed
          ├── RecordTooLargeError                (also ValueError) a record can never fit
          ├── KafkaTimeoutError                  (also TimeoutError) a bounded wait expired
          │    ├── BufferExhaustedError          no buffer memory within max_block_ms
          │    └── RequestTimeoutError           no response within request_timeout_ms
          ├── KafkaConnectionError               (also ConnectionError) socket refused/reset/closed
          ├── ProtocolError                      malformed or truncated bytes from a broker
          ├── AuthenticationError                TLS or SASL authentication failed
          ├── ProducerClosedError                the producer is closed or closing
          └── IllegalStateError                  (also RuntimeError) an illegal state transition

Two layers decide about retries (DESIGN.md, convention 5): ``retriable`` on each class is the
broker's (or, for client-side classes, this library's) view of whether the same operation may
succeed later; ``producer.retry_policy`` makes the client's decision and may differ on purpose.

The per-code classes between the GENERATED markers are written by ``tools/gen_protocol.py``
from ``kafka-error-codes.tsv``; edit the TSV and regenerate rather than editing them.
"""

from __future__ import annotations

from typing import ClassVar

from aiokprod._error_codes import ErrorCode

__all__ = [
    "BROKER_ERRORS_BY_CODE",
    "BrokerResponseError",
    "BufferExhaustedError",
    "ConfigError",
    "IllegalStateError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "ProducerClosedError",
    "ProtocolError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "SerializationError",
    "UnrecognizedBrokerError",
    "error_for_code",
    "raise_for_error_code",
]


class KafkaError(Exception):
    """Base of every aiokprod error.

    ``code`` is the broker error code when there is one (``None`` for client-side errors),
    ``retriable`` whether retrying the same operation may succeed, ``message`` the text.
    """

    code: int | None = None
    retriable: bool = False
    message: str = "A Kafka client error occurred."

    def __init__(self, message: str | None = None) -> None:
        text = type(self).message if message is None else message
        super().__init__(text)
        self.message = text


class BrokerResponseError(KafkaError):
    """A broker answered with a non-zero error code.

    Subclasses exist per code so callers can ``except NotLeaderOrFollowerError``; the class
    attributes carry the code, the broker's retriable flag and its default message.
    """

    code: int = -1
    error_code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    def __str__(self) -> str:
        return f"[Error {self.code}] {self.error_code.name}: {self.message}"


class UnrecognizedBrokerError(BrokerResponseError):
    """Base for error codes newer than this client's table; ``error_for_code`` makes one
    subclass per such code so the number survives to the caller."""

    retriable = False


class ConfigError(KafkaError, ValueError):
    """The producer configuration is invalid; raised before anything is sent."""

    retriable = False
    message = "Invalid producer configuration."


class SerializationError(KafkaError, ValueError):
    """A key or value serializer failed or returned something other than bytes."""

    retriable = False
    message = "Could not serialize the record."


class RecordTooLargeError(KafkaError, ValueError):
    """A record is larger than max_request_size or buffer_memory, so it can never be sent.

    Client-side check; the broker's own verdict is ``MessageTooLargeError`` (code 10).
    """

    retriable = False
    message = "The record is larger than the producer can ever send."


class KafkaTimeoutError(KafkaError, TimeoutError):
    """A bounded wait expired; the message names the config value that bounds it."""

    retriable = True
    message = "The operation timed out."


class BufferExhaustedError(KafkaTimeoutError):
    """No buffer memory became free within max_block_ms."""

    message = "Failed to allocate buffer memory within max_block_ms."


class RequestTimeoutError(KafkaTimeoutError):
    """No response arrived within request_timeout_ms; the request may still have been applied,
    which is why idempotence (not the caller) decides what a retry means."""

    message = "The broker did not answer within request_timeout_ms."


class KafkaConnectionError(KafkaError, ConnectionError):
    """A connection to a broker was refused, reset or closed; retrying on a new connection
    may succeed."""

    retriable = True
    message = "Connection to the broker failed."

    def __init__(
        self,
        message: str | None = None,
        *,
        node_id: int | None = None,
        address: str | None = None,
    ) -> None:
        text = type(self).message if message is None else message
        if node_id is not None or address is not None:
            text = f"{text} (node {node_id}, {address})"
        super().__init__(text)
        self.node_id = node_id
        self.address = address


class ProtocolError(KafkaError):
    """Bytes from a broker could not be decoded (truncated, malformed, trailing data).

    Not retriable by itself: the connection is no longer in a known state and is closed; the
    retry policy decides whether the affected batches are retried on a new connection.
    """

    retriable = False
    message = "Malformed data received from the broker."


class ProducerClosedError(KafkaError):
    """The producer is closed or closing and accepts no more records."""

    retriable = False
    message = "The producer is closed."


class IllegalStateError(KafkaError, RuntimeError):
    """A state machine was asked for a transition its table does not allow; a bug or misuse."""

    retriable = False
    message = "Illegal state transition."


_UNRECOGNIZED: dict[int, type[BrokerResponseError]] = {}


def error_for_code(code: int) -> type[BrokerResponseError]:
    """The exception class for a broker error code; unknown codes get a cached subclass of
    :class:`UnrecognizedBrokerError` whose ``code`` is the number received."""
    known = BROKER_ERRORS_BY_CODE.get(code)
    if known is not None:
        return known
    cls = _UNRECOGNIZED.get(code)
    if cls is None:
        cls = type(
            f"UnrecognizedBrokerError{code}",
            (UnrecognizedBrokerError,),
            {
                "code": code,
                "error_code": ErrorCode.of(code),
                "message": f"Unrecognized broker error code {code}.",
                "__module__": __name__,
            },
        )
        _UNRECOGNIZED[code] = cls
    return cls


def raise_for_error_code(code: int, context: str) -> None:
    """Raise the error for ``code`` unless it is 0, prefixing the default message with
    ``context`` (for example ``"Produce to orders-3"``) so logs say where it happened."""
    if code == 0:
        return
    cls = error_for_code(code)
    raise cls(f"{context}: {cls.message}")


# --- BEGIN GENERATED BROKER ERRORS (tools/gen_protocol.py; do not edit) ---


class UnknownServerError(BrokerResponseError):
    """UNKNOWN_SERVER_ERROR, code -1 (Java UnknownServerException); not retriable."""

    code = -1
    retriable = False
    error_code = ErrorCode.UNKNOWN_SERVER_ERROR
    message = ErrorCode.UNKNOWN_SERVER_ERROR.message


class OffsetOutOfRangeError(BrokerResponseError):
    """OFFSET_OUT_OF_RANGE, code 1 (Java OffsetOutOfRangeException); not retriable."""

    code = 1
    retriable = False
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE
    message = ErrorCode.OFFSET_OUT_OF_RANGE.message


class CorruptMessageError(BrokerResponseError):
    """CORRUPT_MESSAGE, code 2 (Java CorruptRecordException); retriable."""

    code = 2
    retriable = True
    error_code = ErrorCode.CORRUPT_MESSAGE
    message = ErrorCode.CORRUPT_MESSAGE.message


class UnknownTopicOrPartitionError(BrokerResponseError):
    """UNKNOWN_TOPIC_OR_PARTITION, code 3 (Java UnknownTopicOrPartitionException); retriable."""

    code = 3
    retriable = True
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.message


class InvalidFetchSizeError(BrokerResponseError):
    """INVALID_FETCH_SIZE, code 4 (Java InvalidFetchSizeException); not retriable."""

    code = 4
    retriable = False
    error_code = ErrorCode.INVALID_FETCH_SIZE
    message = ErrorCode.INVALID_FETCH_SIZE.message


class LeaderNotAvailableError(BrokerResponseError):
    """LEADER_NOT_AVAILABLE, code 5 (Java LeaderNotAvailableException); retriable."""

    code = 5
    retriable = True
    error_code = ErrorCode.LEADER_NOT_AVAILABLE
    message = ErrorCode.LEADER_NOT_AVAILABLE.message


class NotLeaderOrFollowerError(BrokerResponseError):
    """NOT_LEADER_OR_FOLLOWER, code 6 (Java NotLeaderOrFollowerException); retriable."""

    code = 6
    retriable = True
    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    message = ErrorCode.NOT_LEADER_OR_FOLLOWER.message


class RequestTimedOutError(BrokerResponseError):
    """REQUEST_TIMED_OUT, code 7 (Java TimeoutException); retriable."""

    code = 7
    retriable = True
    error_code = ErrorCode.REQUEST_TIMED_OUT
    message = ErrorCode.REQUEST_TIMED_OUT.message


class BrokerNotAvailableError(BrokerResponseError):
    """BROKER_NOT_AVAILABLE, code 8 (Java BrokerNotAvailableException); not retriable."""

    code = 8
    retriable = False
    error_code = ErrorCode.BROKER_NOT_AVAILABLE
    message = ErrorCode.BROKER_NOT_AVAILABLE.message


class ReplicaNotAvailableError(BrokerResponseError):
    """REPLICA_NOT_AVAILABLE, code 9 (Java ReplicaNotAvailableException); retriable."""

    code = 9
    retriable = True
    error_code = ErrorCode.REPLICA_NOT_AVAILABLE
    message = ErrorCode.REPLICA_NOT_AVAILABLE.message


class MessageTooLargeError(BrokerResponseError):
    """MESSAGE_TOO_LARGE, code 10 (Java RecordTooLargeException); not retriable."""

    code = 10
    retriable = False
    error_code = ErrorCode.MESSAGE_TOO_LARGE
    message = ErrorCode.MESSAGE_TOO_LARGE.message


class StaleControllerEpochError(BrokerResponseError):
    """STALE_CONTROLLER_EPOCH, code 11 (Java ControllerMovedException); not retriable."""

    code = 11
    retriable = False
    error_code = ErrorCode.STALE_CONTROLLER_EPOCH
    message = ErrorCode.STALE_CONTROLLER_EPOCH.message


class OffsetMetadataTooLargeError(BrokerResponseError):
    """OFFSET_METADATA_TOO_LARGE, code 12 (Java OffsetMetadataTooLarge); not retriable."""

    code = 12
    retriable = False
    error_code = ErrorCode.OFFSET_METADATA_TOO_LARGE
    message = ErrorCode.OFFSET_METADATA_TOO_LARGE.message


class NetworkError(BrokerResponseError):
    """NETWORK_EXCEPTION, code 13 (Java NetworkException); retriable."""

    code = 13
    retriable = True
    error_code = ErrorCode.NETWORK_EXCEPTION
    message = ErrorCode.NETWORK_EXCEPTION.message


class CoordinatorLoadInProgressError(BrokerResponseError):
    """COORDINATOR_LOAD_IN_PROGRESS, code 14 (Java CoordinatorLoadInProgressException);
    retriable.
    """

    code = 14
    retriable = True
    error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    message = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS.message


class CoordinatorNotAvailableError(BrokerResponseError):
    """COORDINATOR_NOT_AVAILABLE, code 15 (Java CoordinatorNotAvailableException); retriable."""

    code = 15
    retriable = True
    error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    message = ErrorCode.COORDINATOR_NOT_AVAILABLE.message


class NotCoordinatorError(BrokerResponseError):
    """NOT_COORDINATOR, code 16 (Java NotCoordinatorException); retriable."""

    code = 16
    retriable = True
    error_code = ErrorCode.NOT_COORDINATOR
    message = ErrorCode.NOT_COORDINATOR.message


class InvalidTopicError(BrokerResponseError):
    """INVALID_TOPIC_EXCEPTION, code 17 (Java InvalidTopicException); not retriable."""

    code = 17
    retriable = False
    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
    message = ErrorCode.INVALID_TOPIC_EXCEPTION.message


class RecordListTooLargeError(BrokerResponseError):
    """RECORD_LIST_TOO_LARGE, code 18 (Java RecordBatchTooLargeException); not retriable."""

    code = 18
    retriable = False
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE
    message = ErrorCode.RECORD_LIST_TOO_LARGE.message


class NotEnoughReplicasError(BrokerResponseError):
    """NOT_ENOUGH_REPLICAS, code 19 (Java NotEnoughReplicasException); retriable."""

    code = 19
    retriable = True
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS
    message = ErrorCode.NOT_ENOUGH_REPLICAS.message


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    """NOT_ENOUGH_REPLICAS_AFTER_APPEND, code 20 (Java NotEnoughReplicasAfterAppendException);
    retriable.
    """

    code = 20
    retriable = True
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    message = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND.message


class InvalidRequiredAcksError(BrokerResponseError):
    """INVALID_REQUIRED_ACKS, code 21 (Java InvalidRequiredAcksException); not retriable."""

    code = 21
    retriable = False
    error_code = ErrorCode.INVALID_REQUIRED_ACKS
    message = ErrorCode.INVALID_REQUIRED_ACKS.message


class IllegalGenerationError(BrokerResponseError):
    """ILLEGAL_GENERATION, code 22 (Java IllegalGenerationException); not retriable."""

    code = 22
    retriable = False
    error_code = ErrorCode.ILLEGAL_GENERATION
    message = ErrorCode.ILLEGAL_GENERATION.message


class InconsistentGroupProtocolError(BrokerResponseError):
    """INCONSISTENT_GROUP_PROTOCOL, code 23 (Java InconsistentGroupProtocolException); not
    retriable.
    """

    code = 23
    retriable = False
    error_code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    message = ErrorCode.INCONSISTENT_GROUP_PROTOCOL.message


class InvalidGroupIdError(BrokerResponseError):
    """INVALID_GROUP_ID, code 24 (Java InvalidGroupIdException); not retriable."""

    code = 24
    retriable = False
    error_code = ErrorCode.INVALID_GROUP_ID
    message = ErrorCode.INVALID_GROUP_ID.message


class UnknownMemberIdError(BrokerResponseError):
    """UNKNOWN_MEMBER_ID, code 25 (Java UnknownMemberIdException); not retriable."""

    code = 25
    retriable = False
    error_code = ErrorCode.UNKNOWN_MEMBER_ID
    message = ErrorCode.UNKNOWN_MEMBER_ID.message


class InvalidSessionTimeoutError(BrokerResponseError):
    """INVALID_SESSION_TIMEOUT, code 26 (Java InvalidSessionTimeoutException); not retriable."""

    code = 26
    retriable = False
    error_code = ErrorCode.INVALID_SESSION_TIMEOUT
    message = ErrorCode.INVALID_SESSION_TIMEOUT.message


class RebalanceInProgressError(BrokerResponseError):
    """REBALANCE_IN_PROGRESS, code 27 (Java RebalanceInProgressException); not retriable."""

    code = 27
    retriable = False
    error_code = ErrorCode.REBALANCE_IN_PROGRESS
    message = ErrorCode.REBALANCE_IN_PROGRESS.message


class InvalidCommitOffsetSizeError(BrokerResponseError):
    """INVALID_COMMIT_OFFSET_SIZE, code 28 (Java InvalidCommitOffsetSizeException); not
    retriable.
    """

    code = 28
    retriable = False
    error_code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    message = ErrorCode.INVALID_COMMIT_OFFSET_SIZE.message


class TopicAuthorizationFailedError(BrokerResponseError):
    """TOPIC_AUTHORIZATION_FAILED, code 29 (Java TopicAuthorizationException); not retriable."""

    code = 29
    retriable = False
    error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    message = ErrorCode.TOPIC_AUTHORIZATION_FAILED.message


class GroupAuthorizationFailedError(BrokerResponseError):
    """GROUP_AUTHORIZATION_FAILED, code 30 (Java GroupAuthorizationException); not retriable."""

    code = 30
    retriable = False
    error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    message = ErrorCode.GROUP_AUTHORIZATION_FAILED.message


class ClusterAuthorizationFailedError(BrokerResponseError):
    """CLUSTER_AUTHORIZATION_FAILED, code 31 (Java ClusterAuthorizationException); not
    retriable.
    """

    code = 31
    retriable = False
    error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED.message


class InvalidTimestampError(BrokerResponseError):
    """INVALID_TIMESTAMP, code 32 (Java InvalidTimestampException); not retriable."""

    code = 32
    retriable = False
    error_code = ErrorCode.INVALID_TIMESTAMP
    message = ErrorCode.INVALID_TIMESTAMP.message


class UnsupportedSaslMechanismError(BrokerResponseError):
    """UNSUPPORTED_SASL_MECHANISM, code 33 (Java UnsupportedSaslMechanismException); not
    retriable.
    """

    code = 33
    retriable = False
    error_code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    message = ErrorCode.UNSUPPORTED_SASL_MECHANISM.message


class IllegalSaslStateError(BrokerResponseError):
    """ILLEGAL_SASL_STATE, code 34 (Java IllegalSaslStateException); not retriable."""

    code = 34
    retriable = False
    error_code = ErrorCode.ILLEGAL_SASL_STATE
    message = ErrorCode.ILLEGAL_SASL_STATE.message


class UnsupportedVersionError(BrokerResponseError):
    """UNSUPPORTED_VERSION, code 35 (Java UnsupportedVersionException); not retriable."""

    code = 35
    retriable = False
    error_code = ErrorCode.UNSUPPORTED_VERSION
    message = ErrorCode.UNSUPPORTED_VERSION.message


class TopicAlreadyExistsError(BrokerResponseError):
    """TOPIC_ALREADY_EXISTS, code 36 (Java TopicExistsException); not retriable."""

    code = 36
    retriable = False
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS
    message = ErrorCode.TOPIC_ALREADY_EXISTS.message


class InvalidPartitionsError(BrokerResponseError):
    """INVALID_PARTITIONS, code 37 (Java InvalidPartitionsException); not retriable."""

    code = 37
    retriable = False
    error_code = ErrorCode.INVALID_PARTITIONS
    message = ErrorCode.INVALID_PARTITIONS.message


class InvalidReplicationFactorError(BrokerResponseError):
    """INVALID_REPLICATION_FACTOR, code 38 (Java InvalidReplicationFactorException); not
    retriable.
    """

    code = 38
    retriable = False
    error_code = ErrorCode.INVALID_REPLICATION_FACTOR
    message = ErrorCode.INVALID_REPLICATION_FACTOR.message


class InvalidReplicaAssignmentError(BrokerResponseError):
    """INVALID_REPLICA_ASSIGNMENT, code 39 (Java InvalidReplicaAssignmentException); not
    retriable.
    """

    code = 39
    retriable = False
    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    message = ErrorCode.INVALID_REPLICA_ASSIGNMENT.message


class InvalidConfigError(BrokerResponseError):
    """INVALID_CONFIG, code 40 (Java InvalidConfigurationException); not retriable."""

    code = 40
    retriable = False
    error_code = ErrorCode.INVALID_CONFIG
    message = ErrorCode.INVALID_CONFIG.message


class NotControllerError(BrokerResponseError):
    """NOT_CONTROLLER, code 41 (Java NotControllerException); retriable."""

    code = 41
    retriable = True
    error_code = ErrorCode.NOT_CONTROLLER
    message = ErrorCode.NOT_CONTROLLER.message


class InvalidRequestError(BrokerResponseError):
    """INVALID_REQUEST, code 42 (Java InvalidRequestException); not retriable."""

    code = 42
    retriable = False
    error_code = ErrorCode.INVALID_REQUEST
    message = ErrorCode.INVALID_REQUEST.message


class UnsupportedForMessageFormatError(BrokerResponseError):
    """UNSUPPORTED_FOR_MESSAGE_FORMAT, code 43 (Java UnsupportedForMessageFormatException); not
    retriable.
    """

    code = 43
    retriable = False
    error_code = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    message = ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT.message


class PolicyViolationError(BrokerResponseError):
    """POLICY_VIOLATION, code 44 (Java PolicyViolationException); not retriable."""

    code = 44
    retriable = False
    error_code = ErrorCode.POLICY_VIOLATION
    message = ErrorCode.POLICY_VIOLATION.message


class OutOfOrderSequenceNumberError(BrokerResponseError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER, code 45 (Java OutOfOrderSequenceException); not retriable."""

    code = 45
    retriable = False
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    message = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER.message


class DuplicateSequenceNumberError(BrokerResponseError):
    """DUPLICATE_SEQUENCE_NUMBER, code 46 (Java DuplicateSequenceException); not retriable."""

    code = 46
    retriable = False
    error_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    message = ErrorCode.DUPLICATE_SEQUENCE_NUMBER.message


class InvalidProducerEpochError(BrokerResponseError):
    """INVALID_PRODUCER_EPOCH, code 47 (Java InvalidProducerEpochException); not retriable."""

    code = 47
    retriable = False
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH
    message = ErrorCode.INVALID_PRODUCER_EPOCH.message


class InvalidTxnStateError(BrokerResponseError):
    """INVALID_TXN_STATE, code 48 (Java InvalidTxnStateException); not retriable."""

    code = 48
    retriable = False
    error_code = ErrorCode.INVALID_TXN_STATE
    message = ErrorCode.INVALID_TXN_STATE.message


class InvalidProducerIdMappingError(BrokerResponseError):
    """INVALID_PRODUCER_ID_MAPPING, code 49 (Java InvalidPidMappingException); not retriable."""

    code = 49
    retriable = False
    error_code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    message = ErrorCode.INVALID_PRODUCER_ID_MAPPING.message


class InvalidTransactionTimeoutError(BrokerResponseError):
    """INVALID_TRANSACTION_TIMEOUT, code 50 (Java InvalidTxnTimeoutException); not retriable."""

    code = 50
    retriable = False
    error_code = ErrorCode.INVALID_TRANSACTION_TIMEOUT
    message = ErrorCode.INVALID_TRANSACTION_TIMEOUT.message


class ConcurrentTransactionsError(BrokerResponseError):
    """CONCURRENT_TRANSACTIONS, code 51 (Java ConcurrentTransactionsException); retriable."""

    code = 51
    retriable = True
    error_code = ErrorCode.CONCURRENT_TRANSACTIONS
    message = ErrorCode.CONCURRENT_TRANSACTIONS.message


class TransactionCoordinatorFencedError(BrokerResponseError):
    """TRANSACTION_COORDINATOR_FENCED, code 52 (Java TransactionCoordinatorFencedException);
    not retriable.
    """

    code = 52
    retriable = False
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED
    message = ErrorCode.TRANSACTION_COORDINATOR_FENCED.message


class TransactionalIdAuthorizationFailedError(BrokerResponseError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED, code 53 (Java
    TransactionalIdAuthorizationException); not retriable.
    """

    code = 53
    retriable = False
    error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    message = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED.message


class SecurityDisabledError(BrokerResponseError):
    """SECURITY_DISABLED, code 54 (Java SecurityDisabledException); not retriable."""

    code = 54
    retriable = False
    error_code = ErrorCode.SECURITY_DISABLED
    message = ErrorCode.SECURITY_DISABLED.message


class OperationNotAttemptedError(BrokerResponseError):
    """OPERATION_NOT_ATTEMPTED, code 55 (Java OperationNotAttemptedException); not retriable."""

    code = 55
    retriable = False
    error_code = ErrorCode.OPERATION_NOT_ATTEMPTED
    message = ErrorCode.OPERATION_NOT_ATTEMPTED.message


class KafkaStorageError(BrokerResponseError):
    """KAFKA_STORAGE_ERROR, code 56 (Java KafkaStorageException); retriable."""

    code = 56
    retriable = True
    error_code = ErrorCode.KAFKA_STORAGE_ERROR
    message = ErrorCode.KAFKA_STORAGE_ERROR.message


class LogDirNotFoundError(BrokerResponseError):
    """LOG_DIR_NOT_FOUND, code 57 (Java LogDirNotFoundException); not retriable."""

    code = 57
    retriable = False
    error_code = ErrorCode.LOG_DIR_NOT_FOUND
    message = ErrorCode.LOG_DIR_NOT_FOUND.message


class SaslAuthenticationFailedError(BrokerResponseError):
    """SASL_AUTHENTICATION_FAILED, code 58 (Java SaslAuthenticationException); not retriable."""

    code = 58
    retriable = False
    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED
    message = ErrorCode.SASL_AUTHENTICATION_FAILED.message


class UnknownProducerIdError(BrokerResponseError):
    """UNKNOWN_PRODUCER_ID, code 59 (Java UnknownProducerIdException); not retriable."""

    code = 59
    retriable = False
    error_code = ErrorCode.UNKNOWN_PRODUCER_ID
    message = ErrorCode.UNKNOWN_PRODUCER_ID.message


class ReassignmentInProgressError(BrokerResponseError):
    """REASSIGNMENT_IN_PROGRESS, code 60 (Java ReassignmentInProgressException); not retriable."""

    code = 60
    retriable = False
    error_code = ErrorCode.REASSIGNMENT_IN_PROGRESS
    message = ErrorCode.REASSIGNMENT_IN_PROGRESS.message


class DelegationTokenAuthDisabledError(BrokerResponseError):
    """DELEGATION_TOKEN_AUTH_DISABLED, code 61 (Java DelegationTokenDisabledException); not
    retriable.
    """

    code = 61
    retriable = False
    error_code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    message = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED.message


class DelegationTokenNotFoundError(BrokerResponseError):
    """DELEGATION_TOKEN_NOT_FOUND, code 62 (Java DelegationTokenNotFoundException); not
    retriable.
    """

    code = 62
    retriable = False
    error_code = ErrorCode.DELEGATION_TOKEN_NOT_FOUND
    message = ErrorCode.DELEGATION_TOKEN_NOT_FOUND.message


class DelegationTokenOwnerMismatchError(BrokerResponseError):
    """DELEGATION_TOKEN_OWNER_MISMATCH, code 63 (Java DelegationTokenOwnerMismatchException);
    not retriable.
    """

    code = 63
    retriable = False
    error_code = ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    message = ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH.message


class DelegationTokenRequestNotAllowedError(BrokerResponseError):
    """DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, code 64 (Java
    UnsupportedByAuthenticationException); not retriable.
    """

    code = 64
    retriable = False
    error_code = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    message = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.message


class DelegationTokenAuthorizationFailedError(BrokerResponseError):
    """DELEGATION_TOKEN_AUTHORIZATION_FAILED, code 65 (Java
    DelegationTokenAuthorizationException); not retriable.
    """

    code = 65
    retriable = False
    error_code = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    message = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED.message


class DelegationTokenExpiredError(BrokerResponseError):
    """DELEGATION_TOKEN_EXPIRED, code 66 (Java DelegationTokenExpiredException); not retriable."""

    code = 66
    retriable = False
    error_code = ErrorCode.DELEGATION_TOKEN_EXPIRED
    message = ErrorCode.DELEGATION_TOKEN_EXPIRED.message


class InvalidPrincipalTypeError(BrokerResponseError):
    """INVALID_PRINCIPAL_TYPE, code 67 (Java InvalidPrincipalTypeException); not retriable."""

    code = 67
    retriable = False
    error_code = ErrorCode.INVALID_PRINCIPAL_TYPE
    message = ErrorCode.INVALID_PRINCIPAL_TYPE.message


class NonEmptyGroupError(BrokerResponseError):
    """NON_EMPTY_GROUP, code 68 (Java GroupNotEmptyException); not retriable."""

    code = 68
    retriable = False
    error_code = ErrorCode.NON_EMPTY_GROUP
    message = ErrorCode.NON_EMPTY_GROUP.message


class GroupIdNotFoundError(BrokerResponseError):
    """GROUP_ID_NOT_FOUND, code 69 (Java GroupIdNotFoundException); not retriable."""

    code = 69
    retriable = False
    error_code = ErrorCode.GROUP_ID_NOT_FOUND
    message = ErrorCode.GROUP_ID_NOT_FOUND.message


class FetchSessionIdNotFoundError(BrokerResponseError):
    """FETCH_SESSION_ID_NOT_FOUND, code 70 (Java FetchSessionIdNotFoundException); retriable."""

    code = 70
    retriable = True
    error_code = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    message = ErrorCode.FETCH_SESSION_ID_NOT_FOUND.message


class InvalidFetchSessionEpochError(BrokerResponseError):
    """INVALID_FETCH_SESSION_EPOCH, code 71 (Java InvalidFetchSessionEpochException);
    retriable.
    """

    code = 71
    retriable = True
    error_code = ErrorCode.INVALID_FETCH_SESSION_EPOCH
    message = ErrorCode.INVALID_FETCH_SESSION_EPOCH.message


class ListenerNotFoundError(BrokerResponseError):
    """LISTENER_NOT_FOUND, code 72 (Java ListenerNotFoundException); retriable."""

    code = 72
    retriable = True
    error_code = ErrorCode.LISTENER_NOT_FOUND
    message = ErrorCode.LISTENER_NOT_FOUND.message


class TopicDeletionDisabledError(BrokerResponseError):
    """TOPIC_DELETION_DISABLED, code 73 (Java TopicDeletionDisabledException); not retriable."""

    code = 73
    retriable = False
    error_code = ErrorCode.TOPIC_DELETION_DISABLED
    message = ErrorCode.TOPIC_DELETION_DISABLED.message


class FencedLeaderEpochError(BrokerResponseError):
    """FENCED_LEADER_EPOCH, code 74 (Java FencedLeaderEpochException); retriable."""

    code = 74
    retriable = True
    error_code = ErrorCode.FENCED_LEADER_EPOCH
    message = ErrorCode.FENCED_LEADER_EPOCH.message


class UnknownLeaderEpochError(BrokerResponseError):
    """UNKNOWN_LEADER_EPOCH, code 75 (Java UnknownLeaderEpochException); retriable."""

    code = 75
    retriable = True
    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH
    message = ErrorCode.UNKNOWN_LEADER_EPOCH.message


class UnsupportedCompressionTypeError(BrokerResponseError):
    """UNSUPPORTED_COMPRESSION_TYPE, code 76 (Java UnsupportedCompressionTypeException); not
    retriable.
    """

    code = 76
    retriable = False
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    message = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE.message


class StaleBrokerEpochError(BrokerResponseError):
    """STALE_BROKER_EPOCH, code 77 (Java StaleBrokerEpochException); not retriable."""

    code = 77
    retriable = False
    error_code = ErrorCode.STALE_BROKER_EPOCH
    message = ErrorCode.STALE_BROKER_EPOCH.message


class OffsetNotAvailableError(BrokerResponseError):
    """OFFSET_NOT_AVAILABLE, code 78 (Java OffsetNotAvailableException); retriable."""

    code = 78
    retriable = True
    error_code = ErrorCode.OFFSET_NOT_AVAILABLE
    message = ErrorCode.OFFSET_NOT_AVAILABLE.message


class MemberIdRequiredError(BrokerResponseError):
    """MEMBER_ID_REQUIRED, code 79 (Java MemberIdRequiredException); not retriable."""

    code = 79
    retriable = False
    error_code = ErrorCode.MEMBER_ID_REQUIRED
    message = ErrorCode.MEMBER_ID_REQUIRED.message


class PreferredLeaderNotAvailableError(BrokerResponseError):
    """PREFERRED_LEADER_NOT_AVAILABLE, code 80 (Java PreferredLeaderNotAvailableException);
    retriable.
    """

    code = 80
    retriable = True
    error_code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    message = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE.message


class GroupMaxSizeReachedError(BrokerResponseError):
    """GROUP_MAX_SIZE_REACHED, code 81 (Java GroupMaxSizeReachedException); not retriable."""

    code = 81
    retriable = False
    error_code = ErrorCode.GROUP_MAX_SIZE_REACHED
    message = ErrorCode.GROUP_MAX_SIZE_REACHED.message


class FencedInstanceIdError(BrokerResponseError):
    """FENCED_INSTANCE_ID, code 82 (Java FencedInstanceIdException); not retriable."""

    code = 82
    retriable = False
    error_code = ErrorCode.FENCED_INSTANCE_ID
    message = ErrorCode.FENCED_INSTANCE_ID.message


class EligibleLeadersNotAvailableError(BrokerResponseError):
    """ELIGIBLE_LEADERS_NOT_AVAILABLE, code 83 (Java EligibleLeadersNotAvailableException);
    retriable.
    """

    code = 83
    retriable = True
    error_code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    message = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE.message


class ElectionNotNeededError(BrokerResponseError):
    """ELECTION_NOT_NEEDED, code 84 (Java ElectionNotNeededException); retriable."""

    code = 84
    retriable = True
    error_code = ErrorCode.ELECTION_NOT_NEEDED
    message = ErrorCode.ELECTION_NOT_NEEDED.message


class NoReassignmentInProgressError(BrokerResponseError):
    """NO_REASSIGNMENT_IN_PROGRESS, code 85 (Java NoReassignmentInProgressException); not
    retriable.
    """

    code = 85
    retriable = False
    error_code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    message = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS.message


class GroupSubscribedToTopicError(BrokerResponseError):
    """GROUP_SUBSCRIBED_TO_TOPIC, code 86 (Java GroupSubscribedToTopicException); not
    retriable.
    """

    code = 86
    retriable = False
    error_code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    message = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC.message


class InvalidRecordError(BrokerResponseError):
    """INVALID_RECORD, code 87 (Java InvalidRecordException); not retriable."""

    code = 87
    retriable = False
    error_code = ErrorCode.INVALID_RECORD
    message = ErrorCode.INVALID_RECORD.message


class UnstableOffsetCommitError(BrokerResponseError):
    """UNSTABLE_OFFSET_COMMIT, code 88 (Java UnstableOffsetCommitException); retriable."""

    code = 88
    retriable = True
    error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    message = ErrorCode.UNSTABLE_OFFSET_COMMIT.message


class ThrottlingQuotaExceededError(BrokerResponseError):
    """THROTTLING_QUOTA_EXCEEDED, code 89 (Java ThrottlingQuotaExceededException); retriable."""

    code = 89
    retriable = True
    error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED
    message = ErrorCode.THROTTLING_QUOTA_EXCEEDED.message


class ProducerFencedError(BrokerResponseError):
    """PRODUCER_FENCED, code 90 (Java ProducerFencedException); not retriable."""

    code = 90
    retriable = False
    error_code = ErrorCode.PRODUCER_FENCED
    message = ErrorCode.PRODUCER_FENCED.message


class ResourceNotFoundError(BrokerResponseError):
    """RESOURCE_NOT_FOUND, code 91 (Java ResourceNotFoundException); not retriable."""

    code = 91
    retriable = False
    error_code = ErrorCode.RESOURCE_NOT_FOUND
    message = ErrorCode.RESOURCE_NOT_FOUND.message


class DuplicateResourceError(BrokerResponseError):
    """DUPLICATE_RESOURCE, code 92 (Java DuplicateResourceException); not retriable."""

    code = 92
    retriable = False
    error_code = ErrorCode.DUPLICATE_RESOURCE
    message = ErrorCode.DUPLICATE_RESOURCE.message


class UnacceptableCredentialError(BrokerResponseError):
    """UNACCEPTABLE_CREDENTIAL, code 93 (Java UnacceptableCredentialException); not retriable."""

    code = 93
    retriable = False
    error_code = ErrorCode.UNACCEPTABLE_CREDENTIAL
    message = ErrorCode.UNACCEPTABLE_CREDENTIAL.message


class InconsistentVoterSetError(BrokerResponseError):
    """INCONSISTENT_VOTER_SET, code 94 (Java InconsistentVoterSetException); not retriable."""

    code = 94
    retriable = False
    error_code = ErrorCode.INCONSISTENT_VOTER_SET
    message = ErrorCode.INCONSISTENT_VOTER_SET.message


class InvalidUpdateVersionError(BrokerResponseError):
    """INVALID_UPDATE_VERSION, code 95 (Java InvalidUpdateVersionException); not retriable."""

    code = 95
    retriable = False
    error_code = ErrorCode.INVALID_UPDATE_VERSION
    message = ErrorCode.INVALID_UPDATE_VERSION.message


class FeatureUpdateFailedError(BrokerResponseError):
    """FEATURE_UPDATE_FAILED, code 96 (Java FeatureUpdateFailedException); not retriable."""

    code = 96
    retriable = False
    error_code = ErrorCode.FEATURE_UPDATE_FAILED
    message = ErrorCode.FEATURE_UPDATE_FAILED.message


class PrincipalDeserializationFailureError(BrokerResponseError):
    """PRINCIPAL_DESERIALIZATION_FAILURE, code 97 (Java PrincipalDeserializationException); not
    retriable.
    """

    code = 97
    retriable = False
    error_code = ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE
    message = ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE.message


class SnapshotNotFoundError(BrokerResponseError):
    """SNAPSHOT_NOT_FOUND, code 98 (Java SnapshotNotFoundException); not retriable."""

    code = 98
    retriable = False
    error_code = ErrorCode.SNAPSHOT_NOT_FOUND
    message = ErrorCode.SNAPSHOT_NOT_FOUND.message


class UnknownTopicIdError(BrokerResponseError):
    """UNKNOWN_TOPIC_ID, code 100 (Java UnknownTopicIdException); retriable."""

    code = 100
    retriable = True
    error_code = ErrorCode.UNKNOWN_TOPIC_ID
    message = ErrorCode.UNKNOWN_TOPIC_ID.message


class DuplicateBrokerRegistrationError(BrokerResponseError):
    """DUPLICATE_BROKER_REGISTRATION, code 101 (Java DuplicateBrokerRegistrationException); not
    retriable.
    """

    code = 101
    retriable = False
    error_code = ErrorCode.DUPLICATE_BROKER_REGISTRATION
    message = ErrorCode.DUPLICATE_BROKER_REGISTRATION.message


class BrokerIdNotRegisteredError(BrokerResponseError):
    """BROKER_ID_NOT_REGISTERED, code 102 (Java BrokerIdNotRegisteredException); not retriable."""

    code = 102
    retriable = False
    error_code = ErrorCode.BROKER_ID_NOT_REGISTERED
    message = ErrorCode.BROKER_ID_NOT_REGISTERED.message


class InconsistentTopicIdError(BrokerResponseError):
    """INCONSISTENT_TOPIC_ID, code 103 (Java InconsistentTopicIdException); retriable."""

    code = 103
    retriable = True
    error_code = ErrorCode.INCONSISTENT_TOPIC_ID
    message = ErrorCode.INCONSISTENT_TOPIC_ID.message


class InconsistentClusterIdError(BrokerResponseError):
    """INCONSISTENT_CLUSTER_ID, code 104 (Java InconsistentClusterIdException); not retriable."""

    code = 104
    retriable = False
    error_code = ErrorCode.INCONSISTENT_CLUSTER_ID
    message = ErrorCode.INCONSISTENT_CLUSTER_ID.message


class TransactionalIdNotFoundError(BrokerResponseError):
    """TRANSACTIONAL_ID_NOT_FOUND, code 105 (Java TransactionalIdNotFoundException); not
    retriable.
    """

    code = 105
    retriable = False
    error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    message = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND.message


class FetchSessionTopicIdError(BrokerResponseError):
    """FETCH_SESSION_TOPIC_ID_ERROR, code 106 (Java FetchSessionTopicIdException); retriable."""

    code = 106
    retriable = True
    error_code = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    message = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR.message


class IneligibleReplicaError(BrokerResponseError):
    """INELIGIBLE_REPLICA, code 107 (Java IneligibleReplicaException); not retriable."""

    code = 107
    retriable = False
    error_code = ErrorCode.INELIGIBLE_REPLICA
    message = ErrorCode.INELIGIBLE_REPLICA.message


class NewLeaderElectedError(BrokerResponseError):
    """NEW_LEADER_ELECTED, code 108 (Java NewLeaderElectedException); not retriable."""

    code = 108
    retriable = False
    error_code = ErrorCode.NEW_LEADER_ELECTED
    message = ErrorCode.NEW_LEADER_ELECTED.message


class OffsetMovedToTieredStorageError(BrokerResponseError):
    """OFFSET_MOVED_TO_TIERED_STORAGE, code 109 (Java OffsetMovedToTieredStorageException); not
    retriable.
    """

    code = 109
    retriable = False
    error_code = ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
    message = ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE.message


class FencedMemberEpochError(BrokerResponseError):
    """FENCED_MEMBER_EPOCH, code 110 (Java FencedMemberEpochException); not retriable."""

    code = 110
    retriable = False
    error_code = ErrorCode.FENCED_MEMBER_EPOCH
    message = ErrorCode.FENCED_MEMBER_EPOCH.message


class UnreleasedInstanceIdError(BrokerResponseError):
    """UNRELEASED_INSTANCE_ID, code 111 (Java UnreleasedInstanceIdException); not retriable."""

    code = 111
    retriable = False
    error_code = ErrorCode.UNRELEASED_INSTANCE_ID
    message = ErrorCode.UNRELEASED_INSTANCE_ID.message


class UnsupportedAssignorError(BrokerResponseError):
    """UNSUPPORTED_ASSIGNOR, code 112 (Java UnsupportedAssignorException); not retriable."""

    code = 112
    retriable = False
    error_code = ErrorCode.UNSUPPORTED_ASSIGNOR
    message = ErrorCode.UNSUPPORTED_ASSIGNOR.message


class StaleMemberEpochError(BrokerResponseError):
    """STALE_MEMBER_EPOCH, code 113 (Java StaleMemberEpochException); not retriable."""

    code = 113
    retriable = False
    error_code = ErrorCode.STALE_MEMBER_EPOCH
    message = ErrorCode.STALE_MEMBER_EPOCH.message


class MismatchedEndpointTypeError(BrokerResponseError):
    """MISMATCHED_ENDPOINT_TYPE, code 114 (Java MismatchedEndpointTypeException); not
    retriable.
    """

    code = 114
    retriable = False
    error_code = ErrorCode.MISMATCHED_ENDPOINT_TYPE
    message = ErrorCode.MISMATCHED_ENDPOINT_TYPE.message


class UnsupportedEndpointTypeError(BrokerResponseError):
    """UNSUPPORTED_ENDPOINT_TYPE, code 115 (Java UnsupportedEndpointTypeException); not
    retriable.
    """

    code = 115
    retriable = False
    error_code = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    message = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE.message


class UnknownControllerIdError(BrokerResponseError):
    """UNKNOWN_CONTROLLER_ID, code 116 (Java UnknownControllerIdException); not retriable."""

    code = 116
    retriable = False
    error_code = ErrorCode.UNKNOWN_CONTROLLER_ID
    message = ErrorCode.UNKNOWN_CONTROLLER_ID.message


class UnknownSubscriptionIdError(BrokerResponseError):
    """UNKNOWN_SUBSCRIPTION_ID, code 117 (Java UnknownSubscriptionIdException); not retriable."""

    code = 117
    retriable = False
    error_code = ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    message = ErrorCode.UNKNOWN_SUBSCRIPTION_ID.message


class TelemetryTooLargeError(BrokerResponseError):
    """TELEMETRY_TOO_LARGE, code 118 (Java TelemetryTooLargeException); not retriable."""

    code = 118
    retriable = False
    error_code = ErrorCode.TELEMETRY_TOO_LARGE
    message = ErrorCode.TELEMETRY_TOO_LARGE.message


class InvalidRegistrationError(BrokerResponseError):
    """INVALID_REGISTRATION, code 119 (Java InvalidRegistrationException); not retriable."""

    code = 119
    retriable = False
    error_code = ErrorCode.INVALID_REGISTRATION
    message = ErrorCode.INVALID_REGISTRATION.message


class TransactionAbortableError(BrokerResponseError):
    """TRANSACTION_ABORTABLE, code 120 (Java TransactionAbortableException); not retriable."""

    code = 120
    retriable = False
    error_code = ErrorCode.TRANSACTION_ABORTABLE
    message = ErrorCode.TRANSACTION_ABORTABLE.message


class InvalidRecordStateError(BrokerResponseError):
    """INVALID_RECORD_STATE, code 121 (Java InvalidRecordStateException); not retriable."""

    code = 121
    retriable = False
    error_code = ErrorCode.INVALID_RECORD_STATE
    message = ErrorCode.INVALID_RECORD_STATE.message


class ShareSessionNotFoundError(BrokerResponseError):
    """SHARE_SESSION_NOT_FOUND, code 122 (Java ShareSessionNotFoundException); retriable."""

    code = 122
    retriable = True
    error_code = ErrorCode.SHARE_SESSION_NOT_FOUND
    message = ErrorCode.SHARE_SESSION_NOT_FOUND.message


class InvalidShareSessionEpochError(BrokerResponseError):
    """INVALID_SHARE_SESSION_EPOCH, code 123 (Java InvalidShareSessionEpochException);
    retriable.
    """

    code = 123
    retriable = True
    error_code = ErrorCode.INVALID_SHARE_SESSION_EPOCH
    message = ErrorCode.INVALID_SHARE_SESSION_EPOCH.message


class FencedStateEpochError(BrokerResponseError):
    """FENCED_STATE_EPOCH, code 124 (Java FencedStateEpochException); not retriable."""

    code = 124
    retriable = False
    error_code = ErrorCode.FENCED_STATE_EPOCH
    message = ErrorCode.FENCED_STATE_EPOCH.message


class InvalidVoterKeyError(BrokerResponseError):
    """INVALID_VOTER_KEY, code 125 (Java InvalidVoterKeyException); not retriable."""

    code = 125
    retriable = False
    error_code = ErrorCode.INVALID_VOTER_KEY
    message = ErrorCode.INVALID_VOTER_KEY.message


class DuplicateVoterError(BrokerResponseError):
    """DUPLICATE_VOTER, code 126 (Java DuplicateVoterException); not retriable."""

    code = 126
    retriable = False
    error_code = ErrorCode.DUPLICATE_VOTER
    message = ErrorCode.DUPLICATE_VOTER.message


class VoterNotFoundError(BrokerResponseError):
    """VOTER_NOT_FOUND, code 127 (Java VoterNotFoundException); not retriable."""

    code = 127
    retriable = False
    error_code = ErrorCode.VOTER_NOT_FOUND
    message = ErrorCode.VOTER_NOT_FOUND.message


class InvalidRegularExpressionError(BrokerResponseError):
    """INVALID_REGULAR_EXPRESSION, code 128 (Java InvalidRegularExpression); not retriable."""

    code = 128
    retriable = False
    error_code = ErrorCode.INVALID_REGULAR_EXPRESSION
    message = ErrorCode.INVALID_REGULAR_EXPRESSION.message


BROKER_ERRORS_BY_CODE: dict[int, type[BrokerResponseError]] = {
    -1: UnknownServerError,
    1: OffsetOutOfRangeError,
    2: CorruptMessageError,
    3: UnknownTopicOrPartitionError,
    4: InvalidFetchSizeError,
    5: LeaderNotAvailableError,
    6: NotLeaderOrFollowerError,
    7: RequestTimedOutError,
    8: BrokerNotAvailableError,
    9: ReplicaNotAvailableError,
    10: MessageTooLargeError,
    11: StaleControllerEpochError,
    12: OffsetMetadataTooLargeError,
    13: NetworkError,
    14: CoordinatorLoadInProgressError,
    15: CoordinatorNotAvailableError,
    16: NotCoordinatorError,
    17: InvalidTopicError,
    18: RecordListTooLargeError,
    19: NotEnoughReplicasError,
    20: NotEnoughReplicasAfterAppendError,
    21: InvalidRequiredAcksError,
    22: IllegalGenerationError,
    23: InconsistentGroupProtocolError,
    24: InvalidGroupIdError,
    25: UnknownMemberIdError,
    26: InvalidSessionTimeoutError,
    27: RebalanceInProgressError,
    28: InvalidCommitOffsetSizeError,
    29: TopicAuthorizationFailedError,
    30: GroupAuthorizationFailedError,
    31: ClusterAuthorizationFailedError,
    32: InvalidTimestampError,
    33: UnsupportedSaslMechanismError,
    34: IllegalSaslStateError,
    35: UnsupportedVersionError,
    36: TopicAlreadyExistsError,
    37: InvalidPartitionsError,
    38: InvalidReplicationFactorError,
    39: InvalidReplicaAssignmentError,
    40: InvalidConfigError,
    41: NotControllerError,
    42: InvalidRequestError,
    43: UnsupportedForMessageFormatError,
    44: PolicyViolationError,
    45: OutOfOrderSequenceNumberError,
    46: DuplicateSequenceNumberError,
    47: InvalidProducerEpochError,
    48: InvalidTxnStateError,
    49: InvalidProducerIdMappingError,
    50: InvalidTransactionTimeoutError,
    51: ConcurrentTransactionsError,
    52: TransactionCoordinatorFencedError,
    53: TransactionalIdAuthorizationFailedError,
    54: SecurityDisabledError,
    55: OperationNotAttemptedError,
    56: KafkaStorageError,
    57: LogDirNotFoundError,
    58: SaslAuthenticationFailedError,
    59: UnknownProducerIdError,
    60: ReassignmentInProgressError,
    61: DelegationTokenAuthDisabledError,
    62: DelegationTokenNotFoundError,
    63: DelegationTokenOwnerMismatchError,
    64: DelegationTokenRequestNotAllowedError,
    65: DelegationTokenAuthorizationFailedError,
    66: DelegationTokenExpiredError,
    67: InvalidPrincipalTypeError,
    68: NonEmptyGroupError,
    69: GroupIdNotFoundError,
    70: FetchSessionIdNotFoundError,
    71: InvalidFetchSessionEpochError,
    72: ListenerNotFoundError,
    73: TopicDeletionDisabledError,
    74: FencedLeaderEpochError,
    75: UnknownLeaderEpochError,
    76: UnsupportedCompressionTypeError,
    77: StaleBrokerEpochError,
    78: OffsetNotAvailableError,
    79: MemberIdRequiredError,
    80: PreferredLeaderNotAvailableError,
    81: GroupMaxSizeReachedError,
    82: FencedInstanceIdError,
    83: EligibleLeadersNotAvailableError,
    84: ElectionNotNeededError,
    85: NoReassignmentInProgressError,
    86: GroupSubscribedToTopicError,
    87: InvalidRecordError,
    88: UnstableOffsetCommitError,
    89: ThrottlingQuotaExceededError,
    90: ProducerFencedError,
    91: ResourceNotFoundError,
    92: DuplicateResourceError,
    93: UnacceptableCredentialError,
    94: InconsistentVoterSetError,
    95: InvalidUpdateVersionError,
    96: FeatureUpdateFailedError,
    97: PrincipalDeserializationFailureError,
    98: SnapshotNotFoundError,
    100: UnknownTopicIdError,
    101: DuplicateBrokerRegistrationError,
    102: BrokerIdNotRegisteredError,
    103: InconsistentTopicIdError,
    104: InconsistentClusterIdError,
    105: TransactionalIdNotFoundError,
    106: FetchSessionTopicIdError,
    107: IneligibleReplicaError,
    108: NewLeaderElectedError,
    109: OffsetMovedToTieredStorageError,
    110: FencedMemberEpochError,
    111: UnreleasedInstanceIdError,
    112: UnsupportedAssignorError,
    113: StaleMemberEpochError,
    114: MismatchedEndpointTypeError,
    115: UnsupportedEndpointTypeError,
    116: UnknownControllerIdError,
    117: UnknownSubscriptionIdError,
    118: TelemetryTooLargeError,
    119: InvalidRegistrationError,
    120: TransactionAbortableError,
    121: InvalidRecordStateError,
    122: ShareSessionNotFoundError,
    123: InvalidShareSessionEpochError,
    124: FencedStateEpochError,
    125: InvalidVoterKeyError,
    126: DuplicateVoterError,
    127: VoterNotFoundError,
    128: InvalidRegularExpressionError,
}

__all__ += [
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "DelegationTokenAuthDisabledError",
    "DelegationTokenAuthorizationFailedError",
    "DelegationTokenExpiredError",
    "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError",
    "DelegationTokenRequestNotAllowedError",
    "DuplicateBrokerRegistrationError",
    "DuplicateResourceError",
    "DuplicateSequenceNumberError",
    "DuplicateVoterError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FeatureUpdateFailedError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "FencedStateEpochError",
    "FetchSessionIdNotFoundError",
    "FetchSessionTopicIdError",
    "GroupAuthorizationFailedError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentClusterIdError",
    "InconsistentGroupProtocolError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "IneligibleReplicaError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigError",
    "InvalidFetchSessionEpochError",
    "InvalidFetchSizeError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidPrincipalTypeError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidRecordStateError",
    "InvalidRegistrationError",
    "InvalidRegularExpressionError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidShareSessionEpochError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "InvalidVoterKeyError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "ListenerNotFoundError",
    "LogDirNotFoundError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "MismatchedEndpointTypeError",
    "NetworkError",
    "NewLeaderElectedError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetMovedToTieredStorageError",
    "OffsetNotAvailableError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PolicyViolationError",
    "PreferredLeaderNotAvailableError",
    "PrincipalDeserializationFailureError",
    "ProducerFencedError",
    "ReassignmentInProgressError",
    "RebalanceInProgressError",
    "RecordListTooLargeError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SaslAuthenticationFailedError",
    "SecurityDisabledError",
    "ShareSessionNotFoundError",
    "SnapshotNotFoundError",
    "StaleBrokerEpochError",
    "StaleControllerEpochError",
    "StaleMemberEpochError",
    "TelemetryTooLargeError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TopicDeletionDisabledError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "UnacceptableCredentialError",
    "UnknownControllerIdError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownSubscriptionIdError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnreleasedInstanceIdError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedCompressionTypeError",
    "UnsupportedEndpointTypeError",
    "UnsupportedForMessageFormatError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "VoterNotFoundError",
]
# --- END GENERATED BROKER ERRORS ---


class IllegalTopicNameError(InvalidTopicError, ValueError):
    """A topic name the broker would refuse, caught before anything is queued.

    The client-side twin of INVALID_TOPIC_EXCEPTION (Java's ``Topic.validate``): it is also a
    ``ValueError`` because the caller passed bad input.
    """


class AuthenticationError(KafkaError):
    """TLS or SASL authentication with a broker failed: wrong credentials, an unknown user, an
    untrusted or mismatched certificate, or a mechanism the broker does not enable.

    Not retriable with the same credentials; the message names the broker, the mechanism and
    the cause, never a secret.
    """

    retriable = False
    message = "Authentication with the broker failed."


__all__ += ["AuthenticationError", "IllegalTopicNameError"]
