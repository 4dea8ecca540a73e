"""A FastAPI app that produces each request body to Kafka (docs/fastapi.md).

Needs `pip install 'aiokprod[fastapi,prometheus]' uvicorn`. Run it with
``KAFKA_BOOTSTRAP_SERVERS=host:port uvicorn --app-dir examples fastapi_app:app``.

* ``POST /events/{topic}`` sends the raw body as the value (key from the ``X-Key`` header) and
  answers ``{"topic", "partition", "offset"}`` once the broker acknowledged it. A client that
  sets ``Idempotency-Key`` (the same on every retry of one event) has it written as the
  record's ``idempotency-key`` header, for readers to drop a second copy; a 503 whose outcome
  is unknown invites a retry (``Retry-After``) only then (docs/fastapi.md);
* ``GET /healthz`` is liveness: 200 unless the producer is fatal (only a restart helps);
* ``GET /readyz`` is readiness: 200 only while the producer can deliver (connected, nothing
  stalled), so a load balancer sends requests elsewhere meanwhile;
* ``GET /metrics`` serves the producer metrics in Prometheus text format, through
  OpenTelemetry's Prometheus exporter (``aiokprod.otel.instrument_metrics``).

Its defaults bound a request by what an HTTP client waits for, not by the producer's defaults
(120 s of ``delivery.timeout.ms``): ``max.block.ms`` 2 s for metadata or buffer memory,
``request.timeout.ms`` 3 s per Produce, ``delivery.timeout.ms`` 5 s per record, so a stalled
broker turns into a 503 within about 5 s, 7 s at worst (docs/fastapi.md). The environment
overrides them: ``AIOKPROD_LINGER_MS``, ``AIOKPROD_MAX_BLOCK_MS``,
``AIOKPROD_REQUEST_TIMEOUT_MS``, ``AIOKPROD_DELIVERY_TIMEOUT_MS``, ``AIOKPROD_CLOSE_TIMEOUT_S``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response

from aiokprod import ProducerSettings
from aiokprod.fastapi import (
    ProducerDep,
    health_response,
    install_error_handlers,
    producer_lifespan,
    readiness_response,
)


# A request waits for at most max.block.ms (metadata, memory) plus delivery.timeout.ms; the
# producer's defaults (60 s and 120 s) suit a batch job, not an HTTP client waiting for an answer.
# delivery.timeout.ms must be at least linger.ms + request.timeout.ms.
def _settings_from_env() -> ProducerSettings:
    """The tuning settings, typed (a misspelt key here is a type error, not a 500 at start-up),
    with bounds a web request can live with unless the environment says otherwise."""
    env = os.environ.get
    return ProducerSettings(
        client_id="fastapi-app",
        linger_ms=int(env("AIOKPROD_LINGER_MS", "5")),
        max_block_ms=int(env("AIOKPROD_MAX_BLOCK_MS", "2000")),
        request_timeout_ms=int(env("AIOKPROD_REQUEST_TIMEOUT_MS", "3000")),
        delivery_timeout_ms=int(env("AIOKPROD_DELIVERY_TIMEOUT_MS", "5000")))


@asynccontextmanager
async def metrics_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside producer_lifespan, so the producer is started: register its gauges."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry

    from aiokprod.otel import instrument_metrics

    registry = CollectorRegistry()  # this app's own, not the process-global one
    reader = PrometheusMetricReader(registry=registry)
    provider = MeterProvider(metric_readers=[reader])
    instrument_metrics(app.state.producer, meter_provider=provider)
    app.state.prometheus_registry = registry
    try:
        yield
    finally:
        provider.shutdown()


app = FastAPI(lifespan=producer_lifespan(
    bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "localhost:9092"),
    lifespan=metrics_lifespan,
    close_timeout=float(os.environ.get("AIOKPROD_CLOSE_TIMEOUT_S", "10")),
    **_settings_from_env()))
install_error_handlers(app)


@app.post("/events/{topic}")
async def post_event(topic: str, request: Request, producer: ProducerDep,
                     x_key: Annotated[str | None, Header()] = None,
                     idempotency_key: Annotated[str | None, Header()] = None
                     ) -> dict[str, Any]:
    body = await request.body()
    headers = [] if idempotency_key is None else [("idempotency-key",
                                                   idempotency_key.encode())]
    md = await producer.send_and_wait(topic, body, headers=headers,
                                      key=None if x_key is None else x_key.encode())
    return {"topic": md.topic, "partition": md.partition, "offset": md.offset}


@app.get("/healthz")
async def healthz(producer: ProducerDep) -> JSONResponse:
    return health_response(producer)


@app.get("/readyz")
async def readyz(producer: ProducerDep) -> JSONResponse:
    return readiness_response(producer)


@app.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(request.app.state.prometheus_registry),
                    media_type=CONTENT_TYPE_LATEST)
