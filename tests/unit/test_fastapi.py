"""aiokprod.fastapi in-process: the lifespan's order and bound, the dependency, the error map.

The app runs on this test's loop through httpx's ASGI transport, with a real producer against
the shared Tansu broker (the uvicorn-process tests are in tests/integration).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx
from fastapi import FastAPI

from aiokprod import (
    BufferExhaustedError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from aiokprod.fastapi import (
    ProducerDep,
    install_error_handlers,
    kafka_error_response,
    producer_lifespan,
)
from support.reader import read_back


@pytest.mark.parametrize(("error", "status", "retry_after"), [
    (BufferExhaustedError("no memory"), 503, "1"),
    (KafkaTimeoutError("expired"), 503, "1"),
    (ProducerClosedError("closed"), 503, "1"),
    (RecordTooLargeError("big"), 413, None),
    (SerializationError("bad"), 400, None),
])
def test_error_mapping(error: KafkaError, status: int, retry_after: str | None) -> None:
    response = kafka_error_response(error)
    assert response.status_code == status
    assert response.headers.get("Retry-After") == retry_after


async def test_lifespan_composes_and_closes_the_producer(tansu, new_topic) -> None:
    topic = new_topic()
    events: list[str] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[None]:
        # runs inside: the producer is already started and on app.state
        events.append(f"enter {app.state.producer.health().state != 'fatal'}")
        yield
        events.append("exit")

    app = FastAPI(lifespan=producer_lifespan(lifespan=own, bootstrap_servers=tansu.bootstrap,
                                             close_timeout=5))
    install_error_handlers(app)

    @app.post("/send")
    async def send(producer: ProducerDep) -> dict[str, int]:
        md = await producer.send_and_wait(topic, b"v")
        return {"offset": md.offset}

    @app.post("/too-large")
    async def too_large(producer: ProducerDep) -> dict[str, int]:
        md = await producer.send_and_wait(topic, b"x" * 2_000_000)
        return {"offset": md.offset}

    async with app.router.lifespan_context(app):
        producer = app.state.producer
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            assert (await client.post("/send")).json() == {"offset": 0}
            assert (await client.post("/too-large")).status_code == 413
    assert events == ["enter True", "exit"]
    assert producer.health().state == "fatal"  # closed: "the producer is closed"
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"after close")


async def test_state_attribute_is_where_the_dependency_finds_the_producer(tansu,
                                                                         new_topic) -> None:
    # an app that keeps its producer under another name (say, beside a second client)
    topic = new_topic()
    app = FastAPI(lifespan=producer_lifespan(bootstrap_servers=tansu.bootstrap,
                                             state_attribute="kafka", close_timeout=5))
    install_error_handlers(app)

    @app.post("/send")
    async def send(producer: ProducerDep) -> dict[str, int]:
        md = await producer.send_and_wait(topic, b"v")
        return {"offset": md.offset}

    async with app.router.lifespan_context(app):
        assert not hasattr(app.state, "producer")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            response = await client.post("/send")
    assert response.status_code == 200, response.text
    assert response.json() == {"offset": 0}


def _docs_snippet() -> str:
    """The app docs/fastapi.md shows under "One producer per app"."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "fastapi.md").read_text()
    section = text.split("## One producer per app", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


async def test_the_docs_app_produces_a_posted_body(tansu, new_topic) -> None:
    # the page's handler as written, pointed at the test broker: a POST with a body is
    # produced (a `body: bytes` parameter is a query parameter to FastAPI: 422)
    topic = new_topic()
    source = _docs_snippet().replace('"kafka:9092"', repr(tansu.bootstrap))
    source = source.replace('"orders"', repr(topic))
    namespace: dict[str, object] = {}
    exec(compile(source, "docs/fastapi.md", "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, FastAPI)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            response = await client.post("/orders", content=b'{"id": 1}')
    assert response.status_code == 200, response.text
    assert response.json() == {"offset": 0}
    assert [r.value for r in read_back(tansu.bootstrap, topic, expected=1)] == [b'{"id": 1}']
