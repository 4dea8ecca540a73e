"""The serializer hooks a Schema Registry serializer uses (aiokprod.hooks), with a toy serializer:
``TopicSerializer`` gets the topic, ``SerializerNotReady`` makes send() await set-up work."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from aiokprod import Producer, SerializationError, SerializerNotReady
from aiokprod.devbroker import TansuBroker
from support.reader import read_back


class GatedSerializer:
    """Not ready for a topic until its gate future is resolved; counts calls."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Future[None]] = {}
        self.calls = 0

    def __call__(self, obj: Any, /) -> bytes:
        raise AssertionError("the producer must call serialize_to_topic")

    def serialize_to_topic(self, topic: str, obj: Any, /) -> bytes:
        self.calls += 1
        gate = self.gates.get(topic)
        if gate is None or not gate.done() or gate.exception() is not None:
            if gate is None or gate.done():
                gate = self.gates[topic] = asyncio.get_running_loop().create_future()
            raise SerializerNotReady(f"{topic} not ready", gate)
        return f"{topic}:{obj}".encode()


async def test_send_awaits_a_serializer_not_ready_and_passes_the_topic(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    serializer = GatedSerializer()
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        value_serializer=serializer) as producer:
        sends = [asyncio.ensure_future(producer.send(topic, i)) for i in range(3)]
        await asyncio.sleep(0.05)
        assert not any(s.done() for s in sends)  # all three wait on the one gate
        assert len(serializer.gates) == 1
        serializer.gates[topic].set_result(None)
        await asyncio.gather(*[await s for s in sends])
        await (await producer.send_many(topic, [3, 4]))
    assert [r.value for r in read_back(tansu.bootstrap, topic, expected=5)] == \
        [f"{topic}:{i}".encode() for i in range(5)]


async def test_a_failed_set_up_fails_the_send_and_the_next_send_tries_again(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    serializer = GatedSerializer()
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        value_serializer=serializer) as producer:
        first = asyncio.ensure_future(producer.send(topic, 0))
        await asyncio.sleep(0.05)
        serializer.gates[topic].set_exception(OSError("registry down"))
        with pytest.raises(SerializationError, match="registry down") as failed:
            await first
        assert isinstance(failed.value.__cause__, OSError)
        many = asyncio.ensure_future(producer.send_many(topic, [1, 2]))
        await asyncio.sleep(0.05)
        serializer.gates[topic].set_exception(OSError("still down"))
        with pytest.raises(SerializationError, match="still down"):
            await many
        again = asyncio.ensure_future(producer.send(topic, 3))
        await asyncio.sleep(0.05)
        serializer.gates[topic].set_result(None)
        await (await again)
    # nothing of the failed sends was queued
    assert [r.value for r in read_back(tansu.bootstrap, topic, expected=1, settle=0.5)] == \
        [f"{topic}:3".encode()]


class NeverReady:
    """Says it is not ready every time, with a gate that is already open: a serializer whose
    set-up never takes. The producer must give up after a bounded number of waits."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, obj: Any, /) -> bytes | None:
        if obj is None:
            return None
        self.calls += 1
        gate = asyncio.get_running_loop().create_future()
        gate.set_result(None)
        raise SerializerNotReady("schema not registered yet", gate)


async def test_a_serializer_never_ready_fails_the_call_after_a_bounded_number_of_waits(
        tansu: TansuBroker, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    serializer = NeverReady()
    async with Producer(bootstrap_servers=tansu.bootstrap,
                        key_serializer=serializer) as producer:
        with pytest.raises(SerializationError, match="still not ready .* after 4 waits"):
            await producer.send(topic, b"v", key=1)
        assert serializer.calls == 5  # the first call, then once after each wait
        with pytest.raises(SerializationError, match="still not ready .* after 4 waits"):
            await producer.send_many(topic, [b"v"], keys=[1])
        assert serializer.calls == 10
        await (await producer.send(topic, b"plain"))  # the producer still works
    assert [r.value for r in read_back(tansu.bootstrap, topic, expected=1, settle=0.5)] == \
        [b"plain"]
