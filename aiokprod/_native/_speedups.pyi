from collections.abc import Callable
from typing import Any

def murmur2_u32(data: bytes | bytearray | memoryview) -> int: ...
def append_record(
    buf: bytearray,
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: bytes | None,
) -> int: ...
def complete_deliveries(
    deliveries: list[Any],
    topic: str,
    partition: int,
    base_offset: int,
    log_append_time: int,
    ts_base: int,
    on_ack: Callable[[Any, BaseException | None], None] | None,
    metadata_type: type[Any],
    call_interceptor: Callable[[Any, Any, BaseException | None], None],
) -> None: ...

class Columns:
    length: int
    def __init__(self, length: int, values: tuple[Any, Any, Any, int, bool],
                 keys: tuple[Any, Any, Any, int, bool] | None,
                 timestamps: tuple[Any, int] | None,
                 headers: tuple[Any, Any, int, tuple[Any, Any, Any, int, bool],
                                tuple[Any, Any, Any, int, bool]] | None) -> None: ...
    def max_row_bytes(self) -> int: ...
    def set_order(self, order: Any) -> None: ...

def append_columns(buf: bytearray, cols: Columns, start: int, stop: int, limit: int,
                   base_timestamp: int, count: int,
                   timestamp: int) -> tuple[int, int, int, bool]: ...
def partition_rows(cols: Columns, order: Any, num_partitions: int,
                   null_partition: int) -> list[int]: ...
def append_open(batch: Any, timestamp: int, key: bytes | None, value: bytes | None,
                create_future: Callable[[], Any]) -> Any: ...
def group_keys(keys: list[bytes | None], values: list[bytes | None], num_partitions: int
               ) -> tuple[list[int], list[tuple[int, int, int]], list[bytes | None],
                          list[bytes | None]] | None: ...
def longest_bytes(items: list[Any]) -> int: ...
def append_values(buf: bytearray, delta: int, count: int, keys: list[bytes | None] | None,
                  values: list[bytes | None], start: int, stop: int, limit: int
                  ) -> tuple[int, int]: ...

class FlatAvroEncoder:
    def __init__(self, fields: tuple[tuple[str, str, int, Any], ...], missing: object) -> None: ...
    def __call__(self, record: Any, header: bytes = b"") -> bytes: ...

def encode_avro_columns(
    rows: int,
    row_validity: Any,
    row_offset: int,
    header: bytes,
    fields: list[tuple[str, str, bool, int, Any, Any, Any, int, bool]],
) -> tuple[bytearray, bytearray, bytearray | None, bool]: ...
def write_produce(
    out: list[Any],
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: list[tuple[Any, list[tuple[int, Any]]]],
) -> None: ...

class ProduceAnswerReader:
    def __init__(self, response: type[Any], topic: type[Any], partition: type[Any],
                 leader: type[Any], uuid_type: type[Any], zero_uuid: Any) -> None: ...
    def read(self, data: Any, version: int) -> Any: ...
