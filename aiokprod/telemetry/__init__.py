"""Client metrics push (KIP-714): the producer's metrics sent to the broker on request.

A cluster operator subscribes clients to metrics with a ``CLIENT_METRICS`` config resource
(metric name prefixes, a push interval, client matching rules); each producer with
``enable_metrics_push`` (the default, as in Java) asks the broker for its subscription and, when
the subscription names metrics, pushes them as OTLP every interval. docs/observability.md
describes it for users.

* ``subscription``: the state machine (no I/O).
* ``collector``: our metrics under KIP-714's names, as OTLP points.
* ``otlp``: the OTLP ``MetricsData`` encoding (on ``aiokprod._protobuf``).
* ``reporter``: the background task that talks to the broker.
"""

from aiokprod.telemetry.collector import TelemetryCollector, telemetry_name
from aiokprod.telemetry.reporter import ClientTelemetry
from aiokprod.telemetry.subscription import Subscription, TelemetrySchedule, TelemetryState

__all__ = [
    "ClientTelemetry",
    "Subscription",
    "TelemetryCollector",
    "TelemetrySchedule",
    "TelemetryState",
    "telemetry_name",
]
