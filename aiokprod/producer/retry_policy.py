"""The client's decision about a failed produce: retry, split, fail, or stop the producer.

Two layers: ``ErrorCode.retriable`` is the broker's view of an error;
:func:`classify` is this client's decision and differs on purpose where the broker's flag would
mislead a producer. Every entry of :data:`RULES` that is not simply "the broker's flag" says why.

``classify`` is a pure function of the error code and the batch's context. It does not know
about sequences: for an idempotent producer, ``idempotence.IdempotenceManager.on_error`` refines
its answer (bump the epoch and reset sequences, wait for unresolved batches) -- docs/idempotence.md,
Sending Process, step 8.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from aiokprod._backoff import ExponentialBackoff
from aiokprod._error_codes import ErrorCode

__all__ = ["RULES", "Action", "RetryDecision", "Rule", "classify", "rule_for"]


class Action(enum.Enum):
    """What the sender does with a batch after a response (or its absence)."""

    #: The records are written: complete their futures (DUPLICATE_SEQUENCE_NUMBER).
    COMPLETE = "complete"
    #: Put the batch back (in sequence order) and send it again after the backoff.
    RETRY = "retry"
    #: MESSAGE_TOO_LARGE for several records: split into smaller batches and send those.
    SPLIT = "split"
    #: Fail this batch's records with the error; the producer carries on.
    FAIL = "fail"
    #: Fail this batch and every later send with the error; the producer must be recreated.
    FATAL = "fatal"


@dataclass(frozen=True)
class Rule:
    """The client's view of one error code, before attempts and deadlines are considered."""

    # Retry when attempts and delivery.timeout.ms allow (the client's view, not the broker's).
    retriable: bool = False
    # Ask for a metadata refresh: the error says our picture of leaders/topics is out of date.
    refresh_metadata: bool = False
    # The broker may have written the records although it answered with this error, so a
    # retry relies on de-duplication (idempotence) or may duplicate them (without it).
    ambiguous: bool = False
    # Stops the producer when it is idempotent (the producer id itself is unusable).
    fatal_if_idempotent: bool = False
    # Stops a transactional producer (its epoch belongs to someone else now).
    fatal_if_transactional: bool = False
    # Only meaningful to an idempotent producer; without idempotence it can only be a bug.
    idempotent_only: bool = False
    # Why this entry differs from the broker's flag or is otherwise not obvious.
    why: str = ""


_RETRY = Rule(retriable=True)
_RETRY_REFRESH = Rule(retriable=True, refresh_metadata=True)

#: The client's decisions per error code. Codes not listed follow the broker's flag.
RULES: dict[ErrorCode, Rule] = {
    # --- stale metadata: the partition moved or is not where we think ----------------------
    ErrorCode.NOT_LEADER_OR_FOLLOWER: _RETRY_REFRESH,
    ErrorCode.LEADER_NOT_AVAILABLE: _RETRY_REFRESH,
    ErrorCode.FENCED_LEADER_EPOCH: _RETRY_REFRESH,
    ErrorCode.UNKNOWN_LEADER_EPOCH: _RETRY_REFRESH,
    ErrorCode.REPLICA_NOT_AVAILABLE: _RETRY_REFRESH,
    ErrorCode.UNKNOWN_TOPIC_ID: _RETRY_REFRESH,
    ErrorCode.INCONSISTENT_TOPIC_ID: _RETRY_REFRESH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: Rule(
        retriable=True, refresh_metadata=True,
        why="a topic being created or a partition being added is unknown to this broker for a "
            "moment; retry with fresh metadata and let delivery.timeout.ms bound the wait"),
    ErrorCode.KAFKA_STORAGE_ERROR: Rule(
        retriable=True, refresh_metadata=True,
        why="the leader's log directory failed; leadership moves, so fetch the new leader"),
    # --- transient broker-side conditions ----------------------------------------------------
    ErrorCode.NOT_ENOUGH_REPLICAS: _RETRY,
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: _RETRY,
    ErrorCode.REQUEST_TIMED_OUT: Rule(
        retriable=True, ambiguous=True,
        why="the leader may have appended the records and only replication timed out"),
    ErrorCode.NETWORK_EXCEPTION: Rule(
        retriable=True, refresh_metadata=True, ambiguous=True,
        why="the connection died with the request outstanding (the sender also reports a "
            "lost connection with this code): it may have been written, and the broker may "
            "be gone, so refresh metadata"),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Rule(
        retriable=True, ambiguous=True,
        why="the leader already appended the records; with idempotence the retry is "
            "de-duplicated, without it the retry may write them twice (at-least-once, which "
            "is what disabling idempotence with retries > 0 asks for, as in the Java client)"),
    # --- the request itself is wrong: retrying the same bytes gets the same answer ----------
    ErrorCode.CORRUPT_MESSAGE: Rule(
        why="the broker calls it retriable, but a retry resends the very same sealed bytes, "
            "and the broker also uses this code for a null key on a compacted topic, which "
            "no retry can fix"),
    ErrorCode.INVALID_RECORD: Rule(why="the broker's validation rejected a record"),
    ErrorCode.INVALID_TIMESTAMP: Rule(),
    ErrorCode.RECORD_LIST_TOO_LARGE: Rule(),
    ErrorCode.INVALID_REQUIRED_ACKS: Rule(),
    ErrorCode.INVALID_TOPIC_EXCEPTION: Rule(),
    ErrorCode.POLICY_VIOLATION: Rule(),
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: Rule(),
    ErrorCode.UNKNOWN_SERVER_ERROR: Rule(
        why="not retriable in Java either: an unexpected broker failure is reported, not "
            "hidden behind retries until delivery.timeout.ms"),
    # MESSAGE_TOO_LARGE is decided in classify(): split several records, fail one.
    ErrorCode.MESSAGE_TOO_LARGE: Rule(),
    # --- authorization ------------------------------------------------------------------------
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: Rule(
        why="fails this topic's records only; other topics keep working"),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: Rule(
        fatal_if_idempotent=True,
        why="an idempotent producer needs IdempotentWrite on the cluster for its producer id; "
            "without it no partition can be written, so stop (Java does the same)"),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Rule(fatal_if_idempotent=True),
    ErrorCode.UNSUPPORTED_VERSION: Rule(
        fatal_if_idempotent=True,
        why="the broker cannot take idempotent produce at the negotiated version; every "
            "partition would fail the same way (Java: fatal)"),
    # --- idempotence / transactions ------------------------------------------------------------
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: Rule(
        retriable=True, idempotent_only=True,
        why="usually an earlier batch was not written yet; idempotence decides whether it is "
            "a real gap (bump epoch, reset sequences) or a retry (docs/idempotence.md step 8b)"),
    ErrorCode.UNKNOWN_PRODUCER_ID: Rule(
        retriable=True, idempotent_only=True,
        why="the broker lost our producer state (retention); idempotence bumps the epoch and "
            "resets sequences, then the retry is accepted (docs/idempotence.md step 8b)"),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: Rule(
        idempotent_only=True,
        why="the broker already has these records: success without an offset (idempotence.md B1)"),
    ErrorCode.INVALID_PRODUCER_EPOCH: Rule(
        fatal_if_transactional=True,
        why="transactional: another producer owns the epoch now. Idempotent: only this batch "
            "fails and idempotence bumps the epoch (docs/idempotence.md step 8a)"),
    ErrorCode.PRODUCER_FENCED: Rule(
        fatal_if_idempotent=True,
        why="a newer producer with our transactional id took over: nothing more can be sent; "
            "close this producer and build a new one"),
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: Rule(fatal_if_idempotent=True),
}


@dataclass(frozen=True)
class RetryDecision:
    """What to do with one batch after an error, and why."""

    # What the sender does with the batch.
    action: Action
    # The error code this answers.
    error_code: ErrorCode
    # The client would retry this error if attempts and delivery.timeout.ms allowed; when it
    # fails with retriable=True, the sender reports a delivery timeout instead of the code.
    retriable: bool
    # Ask the cluster for fresh metadata before the retry (or for other partitions' sake).
    refresh_metadata: bool = False
    # The broker may hold the records although it answered with an error (see Rule.ambiguous).
    possibly_written: bool = False
    # Milliseconds to wait before the retry (KIP-580 exponential backoff with jitter).
    backoff_ms: float = 0.0
    # Set by idempotence: this answer made the partition ask for an epoch bump and a sequence
    # reset (docs/idempotence.md step 1b, 8a, 8b); the sender needs to do nothing about it.
    reset_sequences: bool = False
    # One line for the log.
    reason: str = ""


def rule_for(error_code: int) -> Rule:
    """The client's rule for a code; unknown codes follow the broker's retriable flag."""
    code = ErrorCode.of(int(error_code))
    rule = RULES.get(code)
    if rule is not None:
        return rule
    return _RETRY if code.retriable else Rule()


def classify(
    error_code: int,
    *,
    attempts: int,
    idempotent: bool,
    delivery_deadline_passed: bool,
    record_count: int = 1,
    retries: int = 2**31 - 1,
    transactional: bool = False,
    backoff: ExponentialBackoff | None = None,
) -> RetryDecision:
    """Decide what the sender does with a batch the broker answered with ``error_code``.

    ``attempts`` counts sends of this batch including the one just answered (>= 1);
    ``retries`` is the ``retries`` config (Java's default: effectively unlimited, bounded by
    ``delivery.timeout.ms``). A retriable error past the delivery deadline or out of retries is
    a FAIL with ``retriable=True``. ``backoff`` (retry.backoff.ms/retry.backoff.max.ms) fills
    ``backoff_ms`` for a retry.
    """
    if attempts < 1:
        raise ValueError(f"attempts counts the send being answered, so >= 1; got {attempts}")
    code = ErrorCode.of(int(error_code))
    if code is ErrorCode.NONE:
        raise ValueError("classify() is for errors; error code 0 is a success")
    rule = rule_for(code)
    base = RetryDecision(action=Action.FAIL, error_code=code, retriable=False,
                         refresh_metadata=rule.refresh_metadata,
                         possibly_written=rule.ambiguous)
    if rule.idempotent_only and not idempotent:
        return _with(base, Action.FAIL, f"{code.name} from a broker to a non-idempotent producer")
    if code is ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
        return _with(base, Action.COMPLETE, "already written: success without an offset")
    if (rule.fatal_if_idempotent and (idempotent or transactional)) or (
            rule.fatal_if_transactional and transactional):
        return _with(base, Action.FATAL, f"{code.name} makes the producer id unusable")
    if code is ErrorCode.MESSAGE_TOO_LARGE:
        if record_count > 1:
            return _with(base, Action.SPLIT, f"{record_count} records too large together: split")
        return _with(base, Action.FAIL, "a single record larger than the broker accepts")
    if not rule.retriable:
        return _with(base, Action.FAIL, f"{code.name} is not retried")
    if delivery_deadline_passed:
        return _with(base, Action.FAIL, "delivery.timeout.ms passed", retriable=True)
    if attempts > retries:
        return _with(base, Action.FAIL, f"retries={retries} exhausted", retriable=True)
    backoff_ms = backoff.backoff_ms(attempts - 1) if backoff is not None else 0.0
    return RetryDecision(action=Action.RETRY, error_code=code, retriable=True,
                         refresh_metadata=rule.refresh_metadata,
                         possibly_written=rule.ambiguous, backoff_ms=backoff_ms,
                         reason=f"{code.name}: retry #{attempts}")


def _with(base: RetryDecision, action: Action, reason: str, *,
          retriable: bool = False) -> RetryDecision:
    return RetryDecision(action=action, error_code=base.error_code, retriable=retriable,
                         refresh_metadata=base.refresh_metadata,
                         possibly_written=base.possibly_written, reason=reason)
