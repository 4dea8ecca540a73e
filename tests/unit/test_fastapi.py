"""aiokprod.fastapi in-process: the lifespan's order and bound, the dependency, the error map.

The app runs on this test's loop through httpx's ASGI transport, with a real producer against
the shared Tansu broker (the uvicorn-process tests are in tests/integration).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse

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
    health_response,
    install_error_handlers,
    kafka_error_response,
    producer_lifespan,
    readiness_response,
)
from support.reader import read_back


@pytest.mark.parametrize(("error", "status", "retry_after"), [
    (BufferExhaustedError("no memory"), 503, "1"),
    (KafkaTimeoutError("expired"), 503, None),
    (ProducerClosedError("closed"), 503, None),
    (RecordTooLargeError("big"), 413, None),
    (SerializationError("bad"), 400, None),
])
def test_error_mapping(error: KafkaError, status: int, retry_after: str | None) -> None:
    response = kafka_error_response(error)
    assert response.status_code == status
    assert response.headers.get("Retry-After") == retry_after


@pytest.mark.parametrize("error", [KafkaTimeoutError("Expiring 1 record(s)"),
                                   ProducerClosedError("closed")])
def test_an_unknown_outcome_invites_a_retry_only_with_an_idempotency_key(
        error: KafkaError) -> None:
    # the record may be in Kafka: repeating the request is safe only when the record carries
    # a key its readers de-duplicate on
    without = kafka_error_response(error)
    assert json.loads(without.body)["outcome"] == "unknown"
    assert "Retry-After" not in without.headers
    keyed = kafka_error_response(error, idempotency_key="order-17", retry_after_s=2)
    assert keyed.status_code == 503
    assert json.loads(keyed.body)["outcome"] == "unknown"
    assert keyed.headers["Retry-After"] == "2"


def test_a_record_never_sent_invites_a_retry() -> None:
    response = kafka_error_response(BufferExhaustedError("no memory within max.block.ms"))
    assert json.loads(response.body)["outcome"] == "not-sent"
    assert response.headers["Retry-After"] == "1"


async def test_readiness_fails_without_a_broker_while_liveness_holds() -> None:
    # nothing listens on port 1: the producer starts, and cannot deliver
    app = FastAPI(lifespan=producer_lifespan(bootstrap_servers="127.0.0.1:1", close_timeout=1))

    @app.get("/healthz")
    async def healthz(producer: ProducerDep) -> JSONResponse:
        return health_response(producer)

    @app.get("/readyz")
    async def readyz(producer: ProducerDep) -> JSONResponse:
        return readiness_response(producer)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            live = await client.get("/healthz")
            ready = await client.get("/readyz")
    assert live.status_code == 200, live.text  # restarting would not bring a broker
    assert ready.status_code == 503, ready.text
    assert ready.json() == {"state": "degraded",
                            "reason": ready.json()["reason"]}
    assert "no connection" in ready.json()["reason"]


async def test_readiness_is_ok_once_connected(tansu, new_topic) -> None:
    topic = new_topic()
    app = FastAPI(lifespan=producer_lifespan(bootstrap_servers=tansu.bootstrap,
                                             close_timeout=5))

    @app.get("/readyz")
    async def readyz(producer: ProducerDep) -> JSONResponse:
        return readiness_response(producer)

    async with app.router.lifespan_context(app):
        await app.state.producer.send_and_wait(topic, b"v")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            ready = await client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"state": "ok", "reason": None}


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
            ready = await client.get("/readyz")
            live = await client.get("/healthz")
    assert response.status_code == 200, response.text
    assert response.json() == {"offset": 0}
    assert [r.value for r in read_back(tansu.bootstrap, topic, expected=1)] == [b'{"id": 1}']
    assert (live.status_code, ready.status_code) == (200, 200), (live.text, ready.text)
