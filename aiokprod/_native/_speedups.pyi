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
