"""Connection set-up time per security protocol against Apache Kafka (docs/security.md).

Starts one secure KRaft node (the test fixture's cluster: jars cached in ~/.cache/aiokprod),
then opens ``N`` connections per variant with ``BrokerConnection.open`` — TCP connect, TLS
handshake, ApiVersions, and the SASL exchange — and prints the median and p90 in ms side by
side with plain TCP. Usage: ``python benchmarks/security_setup.py [N]`` (default 40).
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from aiokprod.network.connection import BrokerConnection
from aiokprod.network.oauth import OAuthToken
from aiokprod.network.security import (
    SecurityOptions,
    build_ssl_context,
)
from support.kafka_cluster import KafkaCluster, ensure_kafka_jars
from support.kafka_cluster import SecurityOptions as BrokerSecurity


def _jws(subject: str) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 600})}."


async def _token() -> OAuthToken:
    return OAuthToken(_jws("aiokprod-oauth-user"), int(time.time() * 1000) + 600_000)


async def _measure(port: int, options: SecurityOptions, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        conn = await BrokerConnection.open("127.0.0.1", port, security=options,
                                           connect_timeout_ms=10_000)
        times.append((time.perf_counter() - start) * 1000)
        conn.close()
    return times


async def main(n: int) -> None:
    jars = ensure_kafka_jars()
    if isinstance(jars, str):
        sys.exit(f"cannot run Apache Kafka: {jars}")
    cluster = KafkaCluster(jars, security=BrokerSecurity()).start()
    try:
        assert cluster.tls is not None
        context = build_ssl_context(cafile=str(cluster.tls.ca_cert))
        user = {"sasl_username": "alice", "sasl_password": "alice-secret"}
        variants: list[tuple[str, str, SecurityOptions]] = [
            ("PLAINTEXT", "PLAINTEXT", SecurityOptions()),
            ("SSL", "SSL", SecurityOptions("SSL", ssl_context=context)),
            ("SASL_PLAINTEXT PLAIN", "SASL_PLAINTEXT",
             SecurityOptions("SASL_PLAINTEXT", sasl_mechanism="PLAIN", **user)),
            ("SASL_PLAINTEXT SCRAM-SHA-256", "SASL_PLAINTEXT",
             SecurityOptions("SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", **user)),
            ("SASL_SSL SCRAM-SHA-512", "SASL_SSL",
             SecurityOptions("SASL_SSL", ssl_context=context, sasl_mechanism="SCRAM-SHA-512",
                             **user)),
            ("SASL_SSL OAUTHBEARER", "SASL_SSL",
             SecurityOptions("SASL_SSL", ssl_context=context, sasl_mechanism="OAUTHBEARER",
                             sasl_oauth_token_provider=_token)),
        ]
        await _measure(cluster.port(1, "PLAINTEXT"), SecurityOptions(), 5)  # warm the broker
        base: float | None = None
        print(f"Apache Kafka, one KRaft node on loopback, {n} connections per variant")
        print(f"{'variant':30} {'median ms':>10} {'p90 ms':>8} {'vs TCP':>7}")
        for name, listener, options in variants:
            times = sorted(await _measure(cluster.port(1, listener), options, n))
            median = statistics.median(times)
            base = median if base is None else base
            p90 = times[int(len(times) * 0.9) - 1]
            print(f"{name:30} {median:10.2f} {p90:8.2f} {median / base:6.1f}x")
    finally:
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
