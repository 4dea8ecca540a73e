"""`make kafka`: an Apache Kafka cluster (KRaft) in the foreground for manual runs.

Part of the test fixtures' machinery, beside it (``support.kafka_cluster``), and run from
``tests/`` as ``python -m support.run_kafka``: the jars are resolved once
with Maven into ~/.cache/aiokprod/kafka-<version>, the nodes run on free loopback ports with
their data in a temporary directory, and Ctrl-C (or SIGTERM) stops every node by PID and
removes that directory. Try it with `aiokprod perf --bootstrap-servers <printed address>`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from types import FrameType

from support.kafka_cluster import (
    KAFKA_VERSION,
    KafkaCluster,
    SecurityOptions,
    ensure_kafka_jars,
    kafka_cache_dir,
    with_class_archive,
)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                        help="1 combined node, or 3 (RF 3, min.insync.replicas=2)")
    parser.add_argument("--secure", action="store_true",
                        help="add SSL, SASL_PLAINTEXT and SASL_SSL listeners (1 broker)")
    parser.add_argument("--verbose", action="store_true", help="log what the fixture does")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    print(f"Apache Kafka {KAFKA_VERSION}: jars in {kafka_cache_dir()} (resolved once by Maven)")
    jars = ensure_kafka_jars()
    if isinstance(jars, str):
        print(f"cannot start Kafka: {jars}", file=sys.stderr)
        return 2
    security = SecurityOptions() if args.secure else None
    cluster = KafkaCluster(with_class_archive(jars), brokers=args.brokers, security=security)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        cluster.start()
        print(f"ready in {cluster.startup_seconds:.1f}s; data and logs in {cluster.work_dir}")
        print(f"bootstrap (PLAINTEXT): {cluster.bootstrap}")
        if cluster.tls is not None and cluster.security is not None:
            for listener in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
                print(f"bootstrap ({listener}): {cluster.bootstrap_for(listener)}")
            users = ", ".join(f"{u.name}/{u.password}" for u in cluster.security.users)
            print(f"CA certificate: {cluster.tls.ca_cert}; PLAIN and SCRAM users: {users}; "
                  f"OAUTHBEARER (unsecured JWS) subject: {cluster.security.oauth_subject}")
        print("Ctrl-C stops it.", flush=True)
        while True:
            time.sleep(1.0)
            down = [i for i in cluster.node_ids if cluster.pid(i) is None]
            if down:
                cluster.keep_logs = True
                print(f"node(s) {down} exited; logs kept in {cluster.work_dir}", file=sys.stderr)
                return 1
    except KeyboardInterrupt:
        print("stopping...", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip stop()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
