"""FastAPI integration (extra ``aiokprod[fastapi]``): one producer per app, errors as HTTP.

Why this shape:

* **One producer per app and event loop.** A producer owns background tasks on the loop that
  started it, so it is created in the app's lifespan (which runs on uvicorn's loop), stored on
  ``app.state.producer``, and handed to handlers by a dependency (``ProducerDep``).
* **Shutdown is bounded.** uvicorn lets in-flight requests finish before it runs the lifespan's
  shutdown; ``close(timeout=close_timeout)`` then flushes what is queued and fails whatever a
  stalled broker would not take by the deadline, so a SIGTERM never hangs the pod.
* **The loop never blocks.** ``send()`` suspends only to wait for metadata or memory, each
  bounded by ``max_block_ms``; the acknowledgement is bounded by ``delivery_timeout_ms``.
  A stalled broker therefore turns into 503s while the loop keeps serving its health checks —
  unlike a client whose delivery callbacks run on a thread that the loop waits for.
* **A timeout is not a failure.** A record whose acknowledgement did not come may still be
  written, so a 503 says whether the outcome is unknown, and invites a retry (``Retry-After``)
  only when repeating the request cannot write the record twice unnoticed: it was never
  sent, or the request carries an ``Idempotency-Key``.
* **Liveness is not readiness.** ``health_response`` fails only when a restart is the remedy
  (fatal); ``readiness_response`` fails whenever the producer cannot deliver right now.

Error mapping (``install_error_handlers``): ``BufferExhaustedError`` and ``KafkaTimeoutError``
(and every other retriable ``KafkaError``, a closed or fatal producer included) → 503;
``RecordTooLargeError`` → 413; ``SerializationError`` and ``IllegalTopicNameError`` → 400;
any other ``KafkaError`` → 502. See docs/fastapi.md.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from aiokprod.errors import (
    BufferExhaustedError,
    IllegalTopicNameError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from aiokprod.producer.producer import Producer
from aiokprod.settings import ProducerSettings

if sys.version_info >= (3, 12):
    from typing import Unpack
else:  # PEP 692's Unpack for **kwargs is in typing from 3.12
    from typing_extensions import Unpack

__all__ = [
    "IDEMPOTENCY_HEADER",
    "ProducerDep",
    "get_producer",
    "health_response",
    "install_error_handlers",
    "kafka_error_response",
    "producer_lifespan",
    "readiness_response",
]

log = logging.getLogger(__name__)

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[Any]]


def producer_lifespan(
    *,
    bootstrap_servers: str | Sequence[str],
    lifespan: Lifespan | None = None,
    close_timeout: float = 10.0,
    state_attribute: str = "producer",
    **settings: Unpack[ProducerSettings],
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """A FastAPI lifespan that runs one started ``Producer`` for the app's lifetime.

    ``bootstrap_servers`` and ``settings`` go to ``Producer(bootstrap_servers, **settings)``,
    typed as there (``ProducerSettings``) so a type checker sees a wrong setting in the app's
    set-up, not when uvicorn starts it. The producer is started and
    stored on ``app.state.<state_attribute>`` *before* the app's own ``lifespan`` (if given)
    enters, so that lifespan can use it (e.g. to register metrics), and it is closed *after*
    that lifespan exits, with ``close(timeout=close_timeout)``: queued records are flushed,
    and those not delivered within the bound fail instead of holding the shutdown.
    """

    @asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        producer = Producer(bootstrap_servers, **settings)
        await producer.start()
        setattr(app.state, state_attribute, producer)
        # where get_producer and the error handlers look for it
        app.state.aiokprod_state_attribute = state_attribute
        try:
            if lifespan is None:
                yield
            else:
                async with lifespan(app):
                    yield
        finally:
            log.info("closing the app's producer (timeout %.1fs)", close_timeout)
            await producer.close(timeout=close_timeout)

    return run


def _app_producer(app: Any) -> Any:
    """The producer ``producer_lifespan`` stored, under the attribute it was told to use."""
    state = app.state
    return getattr(state, getattr(state, "aiokprod_state_attribute", "producer"), None)


def get_producer(request: Request) -> Producer:
    """The app's producer (a FastAPI dependency); set up by ``producer_lifespan``."""
    producer = _app_producer(request.app)
    if producer is None:
        raise RuntimeError("no producer on app.state: create the app with "
                           "FastAPI(lifespan=producer_lifespan(...))")
    if not isinstance(producer, Producer):
        # an instrumented wrapper (aiokprod.otel.instrument) duck-types the Producer API
        return producer  # type: ignore[no-any-return]
    return producer


ProducerDep = Annotated[Producer, Depends(get_producer)]


#: The request header a client sets to make its retries safe (the IETF draft's name).
IDEMPOTENCY_HEADER = "Idempotency-Key"

# never queued: a retry cannot duplicate anything (the 4xx ones are not retried at all)
_NOT_SENT = (BufferExhaustedError, SerializationError, RecordTooLargeError,
             IllegalTopicNameError)


def kafka_error_response(exc: KafkaError, *, retry_after_s: int = 1,
                         idempotency_key: str | None = None,
                         producer_reason: str | None = None) -> JSONResponse:
    """The HTTP answer for a failed send (the mapping in the module docstring).

    The body's ``outcome`` says whether the record may be in Kafka: ``"not-sent"`` when the
    producer refused it before queueing it, ``"unknown"`` otherwise: a delivery timeout or a
    broker error after retries does not tell whether an earlier attempt was written (a stalled
    broker may still write it when it resumes). ``Retry-After`` is the invitation to repeat the
    request, so it is sent only when repeating is safe: the record was not sent, or the
    request carried an ``idempotency_key`` (the app writes it into the record, and readers drop
    a key they have seen). ``producer_reason``: why the producer is fatal, when it is.
    """
    body: dict[str, str] = {"error": type(exc).__name__, "detail": str(exc)}
    if isinstance(exc, RecordTooLargeError):
        return JSONResponse(body, status_code=413)
    if isinstance(exc, (SerializationError, IllegalTopicNameError)):
        return JSONResponse(body, status_code=400)
    # ProducerClosedError: closing or fatal; either way another instance may take the request
    if not (exc.retriable or producer_reason is not None
            or isinstance(exc, (ProducerClosedError, KafkaTimeoutError))):
        return JSONResponse(body, status_code=502)
    not_sent = isinstance(exc, _NOT_SENT)
    body["outcome"] = "not-sent" if not_sent else "unknown"
    if producer_reason is not None:
        body["producer"] = producer_reason
    safe = not_sent or bool(idempotency_key)
    return JSONResponse(body, status_code=503,
                        headers={"Retry-After": str(retry_after_s)} if safe else None)


def install_error_handlers(app: FastAPI, *, retry_after_s: int = 1,
                           idempotency_header: str = IDEMPOTENCY_HEADER) -> None:
    """Map ``KafkaError`` raised by handlers to HTTP responses (see ``kafka_error_response``);
    a request's ``idempotency_header`` is what makes a retry of an unknown outcome safe."""

    async def handle(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, KafkaError)
        reason = None
        producer = _app_producer(request.app)
        if producer is not None and not isinstance(exc, RecordTooLargeError):
            health = producer.health()
            if health.state == "fatal":  # say why; readiness takes this instance out
                reason = health.reason or "fatal"
        return kafka_error_response(exc, retry_after_s=retry_after_s,
                                    idempotency_key=request.headers.get(idempotency_header),
                                    producer_reason=reason)

    app.add_exception_handler(KafkaError, handle)


def health_response(producer: Producer) -> JSONResponse:
    """Liveness: ``{"state", "reason"}``, 200 for ok and degraded, 503 for fatal.

    503 only when restarting the process is the remedy: a fatal producer sends nothing more,
    while a degraded one (no broker connection, deliveries stalled, memory exhausted) recovers
    by itself when the broker does. ``health()`` reads in-memory state only, so this answers
    in microseconds even when every broker is stalled.
    """
    health = producer.health()
    return JSONResponse({"state": health.state, "reason": health.reason},
                        status_code=503 if health.state == "fatal" else 200)


def readiness_response(producer: Producer) -> JSONResponse:
    """Readiness: 200 only while the producer can deliver (``health()`` is ``ok``), else 503.

    Not ready: not started or closing, no connection to any broker, deliveries stalled (a
    record unacknowledged for longer than ``request.timeout.ms``), sends waiting for buffer
    memory, or fatal. A load balancer then sends requests to instances that can deliver them,
    and the instance comes back by itself once ``health()`` is ``ok`` again. Reads in-memory
    state only, like ``health_response``.
    """
    health = producer.health()
    return JSONResponse({"state": health.state, "reason": health.reason},
                        status_code=200 if health.state == "ok" else 503)
