"""librdkafka's in-process mock Kafka cluster, driven through ctypes.

Why this exists: Tansu is one real broker, but it cannot fail on demand. The mock cluster in
librdkafka (bundled with confluent-kafka) has several brokers on loopback ports, per-request
error injection, broker down/up, RTT and leader moves, and it records every request it
receives — exactly what fault tests need, with no extra process to manage.

Facts that matter when writing tests against it:

* Broker ids are 1..N. The listeners live in a thread of *this* process; ``close()`` joins it.
* It does NOT deduplicate idempotent batches: a batch re-sent with a sequence already
  written is appended again (see ``test_mock_cluster_does_not_deduplicate`` in the fixture
  tests). Nor does it check sequences: a batch after a gap is written, so with several
  requests in flight a retried batch can land after a later one. Use Tansu or real Kafka to
  prove exactly-once and order with requests pipelined; use the mock for fault handling.
* CreateTopics is not served; topics come from ``create_topic`` (or client auto-create).
* This API is marked experimental by librdkafka; signatures below were checked against
  rdkafka_mock.h of the 2.x series and the symbols exported by the bundled library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from dataclasses import dataclass
from types import TracebackType

__all__ = ["MockCluster", "MockClusterError", "MockRequest", "load_librdkafka"]

_RD_KAFKA_PRODUCER = 0
_CONF_OK = 0
_ERRSTR_SIZE = 512

_c_void_p = ctypes.c_void_p
_c_char_p = ctypes.c_char_p


class MockClusterError(RuntimeError):
    """A mock-cluster call returned an error, or the library could not be loaded."""


@dataclass(frozen=True)
class MockRequest:
    """One request the mock cluster received, as recorded by request tracking."""

    api_key: int
    broker_id: int
    # Microseconds on librdkafka's monotonic clock: useful for ordering and spacing only.
    timestamp_us: int


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _library_path() -> str:
    import confluent_kafka

    package_dir = os.path.dirname(os.path.abspath(confluent_kafka.__file__))
    bundled = sorted(
        glob.glob(os.path.join(os.path.dirname(package_dir), "confluent_kafka.libs", "librdkafka*"))
    )
    if bundled:
        # The very file confluent_kafka's extension links against: dlopen returns the same
        # handle, so the mock and the Python clients share one librdkafka.
        return bundled[0]
    found = ctypes.util.find_library("rdkafka")
    if found is None:
        raise MockClusterError(
            "no librdkafka found: neither confluent_kafka.libs/ nor a system librdkafka"
        )
    return found


def _declare(lib: ctypes.CDLL) -> None:
    """Give every function we call its exact C signature (wrong widths corrupt silently)."""
    sigs: dict[str, tuple[type | None, list[type]]] = {
        "rd_kafka_conf_new": (_c_void_p, []),
        "rd_kafka_conf_set": (
            ctypes.c_int,
            [_c_void_p, _c_char_p, _c_char_p, _c_char_p, ctypes.c_size_t],
        ),
        "rd_kafka_conf_destroy": (None, [_c_void_p]),
        "rd_kafka_new": (_c_void_p, [ctypes.c_int, _c_void_p, _c_char_p, ctypes.c_size_t]),
        "rd_kafka_destroy": (None, [_c_void_p]),
        "rd_kafka_err2name": (_c_char_p, [ctypes.c_int]),
        "rd_kafka_mock_cluster_new": (_c_void_p, [_c_void_p, ctypes.c_int]),
        "rd_kafka_mock_cluster_destroy": (None, [_c_void_p]),
        "rd_kafka_mock_cluster_bootstraps": (_c_char_p, [_c_void_p]),
        "rd_kafka_mock_topic_create": (
            ctypes.c_int,
            [_c_void_p, _c_char_p, ctypes.c_int, ctypes.c_int],
        ),
        "rd_kafka_mock_topic_set_error": (None, [_c_void_p, _c_char_p, ctypes.c_int]),
        "rd_kafka_mock_push_request_errors_array": (
            None,
            [_c_void_p, ctypes.c_int16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)],
        ),
        "rd_kafka_mock_clear_request_errors": (None, [_c_void_p, ctypes.c_int16]),
        # Variadic: (err, rtt_ms) int pairs follow `cnt`. Only the fixed part is declared;
        # the pairs are passed as explicit c_int (the System V x86-64 and AAPCS64-Linux
        # conventions pass variadic ints like fixed ones).
        "rd_kafka_mock_broker_push_request_error_rtts": (
            ctypes.c_int,
            [_c_void_p, ctypes.c_int32, ctypes.c_int16, ctypes.c_size_t],
        ),
        "rd_kafka_mock_broker_error_stack_cnt": (
            ctypes.c_int,
            [_c_void_p, ctypes.c_int32, ctypes.c_int16, ctypes.POINTER(ctypes.c_size_t)],
        ),
        "rd_kafka_mock_partition_set_leader": (
            ctypes.c_int,
            [_c_void_p, _c_char_p, ctypes.c_int32, ctypes.c_int32],
        ),
        "rd_kafka_mock_partition_set_follower": (
            ctypes.c_int,
            [_c_void_p, _c_char_p, ctypes.c_int32, ctypes.c_int32],
        ),
        "rd_kafka_mock_broker_set_down": (ctypes.c_int, [_c_void_p, ctypes.c_int32]),
        "rd_kafka_mock_broker_set_up": (ctypes.c_int, [_c_void_p, ctypes.c_int32]),
        "rd_kafka_mock_broker_set_rtt": (ctypes.c_int, [_c_void_p, ctypes.c_int32, ctypes.c_int]),
        "rd_kafka_mock_coordinator_set": (
            ctypes.c_int,
            [_c_void_p, _c_char_p, _c_char_p, ctypes.c_int32],
        ),
        "rd_kafka_mock_set_apiversion": (
            ctypes.c_int,
            [_c_void_p, ctypes.c_int16, ctypes.c_int16, ctypes.c_int16],
        ),
        "rd_kafka_mock_start_request_tracking": (None, [_c_void_p]),
        "rd_kafka_mock_stop_request_tracking": (None, [_c_void_p]),
        "rd_kafka_mock_clear_requests": (None, [_c_void_p]),
        "rd_kafka_mock_get_requests": (
            ctypes.POINTER(_c_void_p),
            [_c_void_p, ctypes.POINTER(ctypes.c_size_t)],
        ),
        "rd_kafka_mock_request_id": (ctypes.c_int32, [_c_void_p]),
        "rd_kafka_mock_request_api_key": (ctypes.c_int16, [_c_void_p]),
        "rd_kafka_mock_request_timestamp": (ctypes.c_int64, [_c_void_p]),
        "rd_kafka_mock_request_destroy_array": (
            None,
            [ctypes.POINTER(_c_void_p), ctypes.c_size_t],
        ),
    }
    for name, (restype, argtypes) in sigs.items():
        func = getattr(lib, name)
        func.restype = restype
        func.argtypes = argtypes


def load_librdkafka() -> ctypes.CDLL:
    """Load (once) the librdkafka that confluent-kafka uses, with signatures declared."""
    global _lib
    with _lib_lock:
        if _lib is None:
            lib = ctypes.CDLL(_library_path())
            _declare(lib)
            _lib = lib
        return _lib


def _error_name(lib: ctypes.CDLL, code: int) -> str:
    raw = lib.rd_kafka_err2name(code)
    return raw.decode() if raw else str(code)


class MockCluster:
    """A librdkafka mock cluster with ``brokers`` brokers (ids 1..brokers).

    Owns one ``rd_kafka_t`` (the mock needs a handle for its bookkeeping) and the cluster.
    Not thread-safe by design: one test drives it. ``close()`` is idempotent.
    """

    def __init__(self, brokers: int = 3) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        self._lib = load_librdkafka()
        self.broker_ids: tuple[int, ...] = tuple(range(1, brokers + 1))
        errstr = ctypes.create_string_buffer(_ERRSTR_SIZE)
        conf = self._lib.rd_kafka_conf_new()
        # Errors only: the helper handle never connects anywhere, and its chatter about
        # having no bootstrap servers is noise in test output.
        if self._lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, _ERRSTR_SIZE) != _CONF_OK:
            self._lib.rd_kafka_conf_destroy(conf)
            raise MockClusterError(f"rd_kafka_conf_set: {errstr.value.decode()}")
        rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, _ERRSTR_SIZE)
        if not rk:
            # On failure the conf is still ours to free.
            self._lib.rd_kafka_conf_destroy(conf)
            raise MockClusterError(f"rd_kafka_new: {errstr.value.decode()}")
        self._rk: int | None = rk
        mcluster = self._lib.rd_kafka_mock_cluster_new(rk, brokers)
        if not mcluster:
            self._lib.rd_kafka_destroy(rk)
            self._rk = None
            raise MockClusterError("rd_kafka_mock_cluster_new returned NULL")
        self._mcluster: int | None = mcluster
        raw = self._lib.rd_kafka_mock_cluster_bootstraps(mcluster)
        self.bootstrap: str = raw.decode()
        # True while request tracking is on, so get_requests() can refuse to lie.
        self._tracking = False

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Destroy the cluster (joins its thread), then the handle it was attached to."""
        if self._mcluster is not None:
            self._lib.rd_kafka_mock_cluster_destroy(self._mcluster)
            self._mcluster = None
        if self._rk is not None:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    @property
    def closed(self) -> bool:
        return self._mcluster is None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"bootstrap={self.bootstrap}"
        return f"<MockCluster brokers={len(self.broker_ids)} {state}>"

    def _handle(self) -> int:
        if self._mcluster is None:
            raise MockClusterError("mock cluster is closed")
        return self._mcluster

    def _check(self, what: str, code: int) -> None:
        if code != 0:
            raise MockClusterError(f"{what}: {_error_name(self._lib, code)} ({code})")

    def _check_broker(self, broker_id: int, *, allow_all: bool = False) -> None:
        # The C side accepts unknown ids for some calls and silently does nothing: catch typos.
        if broker_id in self.broker_ids or (allow_all and broker_id == -1):
            return
        raise ValueError(f"broker id {broker_id} not in {self.broker_ids}")

    # -- topics and leaders ----------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        """Create a topic; leaders are spread over the brokers by the mock."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        code = self._lib.rd_kafka_mock_topic_create(
            self._handle(), name.encode(), partitions, replication_factor
        )
        self._check(f"create topic {name!r}", code)

    def set_topic_error(self, topic: str, error_code: int) -> None:
        """Metadata (and AddPartitionsToTxn) report ``error_code`` for the topic; 0 clears."""
        self._lib.rd_kafka_mock_topic_set_error(self._handle(), topic.encode(), error_code)

    def set_partition_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move leadership; ``-1`` makes the partition leaderless. Clients learn via Metadata."""
        self._check_broker(broker_id, allow_all=True)
        code = self._lib.rd_kafka_mock_partition_set_leader(
            self._handle(), topic.encode(), partition, broker_id
        )
        self._check(f"set leader of {topic}-{partition} to {broker_id}", code)

    def set_partition_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """Set the preferred read replica (consumer side; rarely useful to a producer)."""
        code = self._lib.rd_kafka_mock_partition_set_follower(
            self._handle(), topic.encode(), partition, broker_id
        )
        self._check(f"set follower of {topic}-{partition} to {broker_id}", code)

    def set_coordinator(self, key_type: str, key: str, broker_id: int) -> None:
        """Pin the group (``"group"``) or transaction (``"transaction"``) coordinator."""
        if key_type not in ("group", "transaction"):
            raise ValueError(f"key_type must be 'group' or 'transaction', got {key_type!r}")
        code = self._lib.rd_kafka_mock_coordinator_set(
            self._handle(), key_type.encode(), key.encode(), broker_id
        )
        self._check(f"set {key_type} coordinator for {key!r}", code)

    def set_api_version(self, api_key: int, min_version: int, max_version: int) -> None:
        """Narrow what ApiVersions advertises for ``api_key`` (-1/-1 disables the API)."""
        code = self._lib.rd_kafka_mock_set_apiversion(
            self._handle(), api_key, min_version, max_version
        )
        self._check(f"set ApiVersion range of key {api_key}", code)

    # -- error injection -------------------------------------------------------------------

    def push_request_errors(self, api_key: int, *error_codes: int) -> None:
        """The next ``len(error_codes)`` requests of ``api_key`` (to any broker) fail in order.

        A code of -195 (``_TRANSPORT``) makes the broker drop the connection instead.
        """
        if not error_codes:
            raise ValueError("give at least one error code")
        array = (ctypes.c_int * len(error_codes))(*error_codes)
        self._lib.rd_kafka_mock_push_request_errors_array(
            self._handle(), api_key, len(error_codes), array
        )

    def clear_request_errors(self, api_key: int) -> None:
        """Drop cluster-wide errors still queued for ``api_key``."""
        self._lib.rd_kafka_mock_clear_request_errors(self._handle(), api_key)

    def push_broker_request_errors(
        self, broker_id: int, api_key: int, *errors_and_rtts: tuple[int, int]
    ) -> None:
        """Queue ``(error_code, rtt_ms)`` responses for ``api_key`` on one broker only.

        Error code 0 with a positive RTT delays a successful response: the way to make one
        request slow (e.g. to test request timeouts) without slowing the whole broker.
        Broker-scoped errors take precedence over cluster-wide ones.
        """
        self._check_broker(broker_id)
        if not errors_and_rtts:
            raise ValueError("give at least one (error_code, rtt_ms) pair")
        variadic: list[ctypes.c_int] = []
        for error_code, rtt_ms in errors_and_rtts:
            variadic += [ctypes.c_int(error_code), ctypes.c_int(rtt_ms)]
        code = self._lib.rd_kafka_mock_broker_push_request_error_rtts(
            self._handle(), broker_id, api_key, len(errors_and_rtts), *variadic
        )
        self._check(f"push errors on broker {broker_id}", code)

    def broker_error_stack_count(self, broker_id: int, api_key: int) -> int:
        """How many broker-scoped injected responses for ``api_key`` are still queued."""
        self._check_broker(broker_id)
        count = ctypes.c_size_t(0)
        code = self._lib.rd_kafka_mock_broker_error_stack_cnt(
            self._handle(), broker_id, api_key, ctypes.byref(count)
        )
        self._check(f"error stack count on broker {broker_id}", code)
        return int(count.value)

    def broker_set_down(self, broker_id: int) -> None:
        """Disconnect clients and refuse new connections; leadership does NOT move."""
        self._check_broker(broker_id, allow_all=True)
        self._check(
            f"set broker {broker_id} down",
            self._lib.rd_kafka_mock_broker_set_down(self._handle(), broker_id),
        )

    def broker_set_up(self, broker_id: int) -> None:
        """Accept connections again."""
        self._check_broker(broker_id, allow_all=True)
        self._check(
            f"set broker {broker_id} up",
            self._lib.rd_kafka_mock_broker_set_up(self._handle(), broker_id),
        )

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response from the broker by ``rtt_ms`` (0 restores)."""
        self._check_broker(broker_id, allow_all=True)
        self._check(
            f"set rtt of broker {broker_id}",
            self._lib.rd_kafka_mock_broker_set_rtt(self._handle(), broker_id, rtt_ms),
        )

    # -- request tracking ------------------------------------------------------------------

    def start_request_tracking(self) -> None:
        """Record every request from now on (cleared first, so counts start at zero)."""
        handle = self._handle()
        self._lib.rd_kafka_mock_clear_requests(handle)
        self._lib.rd_kafka_mock_start_request_tracking(handle)
        self._tracking = True

    def stop_request_tracking(self) -> None:
        """Stop recording; what was recorded stays readable."""
        self._lib.rd_kafka_mock_stop_request_tracking(self._handle())
        self._tracking = False

    def clear_requests(self) -> None:
        self._lib.rd_kafka_mock_clear_requests(self._handle())

    def get_requests(self, api_key: int | None = None) -> list[MockRequest]:
        """Recorded requests in arrival order, optionally only those of ``api_key``."""
        handle = self._handle()
        count = ctypes.c_size_t(0)
        array = self._lib.rd_kafka_mock_get_requests(handle, ctypes.byref(count))
        requests: list[MockRequest] = []
        if not array:
            return requests
        try:
            for index in range(count.value):
                request = array[index]
                requests.append(
                    MockRequest(
                        api_key=int(self._lib.rd_kafka_mock_request_api_key(request)),
                        broker_id=int(self._lib.rd_kafka_mock_request_id(request)),
                        timestamp_us=int(self._lib.rd_kafka_mock_request_timestamp(request)),
                    )
                )
        finally:
            # Frees each copied request and the array itself.
            self._lib.rd_kafka_mock_request_destroy_array(array, count.value)
        if api_key is not None:
            requests = [r for r in requests if r.api_key == api_key]
        return requests

    @property
    def tracking(self) -> bool:
        return self._tracking
