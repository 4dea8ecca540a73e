"""Apache Kafka itself as a test broker: KRaft nodes from Maven Central jars, on loopback ports.

Why: Tansu and librdkafka's mock cluster each hide real behaviour (Tansu refuses the KIP-360
epoch bump, cannot serve TLS and forgets producers on restart; the mock neither de-duplicates
nor fences). Our users run Apache Kafka, so the behaviours that matter most are also tested
against it.

Jars. ``ensure_kafka_jars`` (``support.kafka_jars``, re-exported here) resolves
``tests/support/kafka/pom.xml`` once with ``mvn dependency:copy-dependencies`` into
``~/.cache/aiokprod/kafka-<version>/libs``, so later runs need only ``java``. It returns a
reason string instead when Java or Maven is missing or resolution fails; the fixtures turn
that into a skip (or a failure on CI).

Nodes. Every node runs ``process.roles=broker,controller`` (one broker: a single voter; three
brokers: three voters), which starts fastest: three JVMs, not four. Each node has three
listeners: ``CONTROLLER`` (the Raft quorum), ``INTERNAL`` (inter-broker replication, and the
port our own readiness probes use) and ``PLAINTEXT`` (clients; its advertised port may be a
proxy's). The secure shape adds ``SSL``, ``SASL_PLAINTEXT`` and ``SASL_SSL``.

Readiness is asked over the Kafka protocol with aiokprod's generated classes: ApiVersions,
then Metadata must list every running node with our cluster id. Every wait is bounded and every
process is ended by its PID; a node's logs (``server.log`` by log4j2, ``stdout.log``) stay in
its directory, which is kept when the cluster stops after a failure.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from aiokprod.errors import ProtocolError
from aiokprod.protocol import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DescribeProducersRequest,
    IncrementalAlterConfigsRequest,
    MetadataRequest,
    decode_response,
    encode_request,
)
from support.kafka_jars import (
    KAFKA_VERSION,
    QUICK_JVM,
    KafkaJars,
    ensure_kafka_jars,
    kafka_cache_dir,
)
from support.kafka_security import SCRAM_MECHANISMS, SaslUser, TlsMaterial, make_tls_material

__all__ = [
    "DEFAULT_JVM_OPTIONS",
    "KAFKA_VERSION",
    "KafkaCluster",
    "KafkaClusterError",
    "KafkaJars",
    "KafkaPartition",
    "SecurityOptions",
    "ensure_kafka_jars",
    "free_ports",
    "kafka_cache_dir",
    "with_class_archive",
]

logger = logging.getLogger(__name__)

_TAIL_LINES = 60
_PORT_ATTEMPTS = 3
# Small heaps and a quick JIT (QUICK_JVM): start-up time matters more in tests than peak
# throughput, and several JVMs share 2 cores. Serial GC keeps the thread count (and idle CPU) down.
DEFAULT_JVM_OPTIONS: tuple[str, ...] = (
    "-Xmx512m", "-Xms256m", *QUICK_JVM, "-Djava.awt.headless=true",
)
_CLIENT_ID = "aiokprod-kafka-fixture"
# ConfigResource.Type.CLIENT_METRICS and AlterConfigOp.OpType SET / DELETE, as on the wire.
_CLIENT_METRICS_RESOURCE = 16
_OP_SET, _OP_DELETE = 0, 1


class KafkaClusterError(RuntimeError):
    """A node did not format, start, become ready or stop; the message carries its log tail."""


# -- the wire (blocking; fixtures run before any event loop) --------------------------------


class _WireError(Exception):
    """A request failed at the socket or framing level."""


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise _WireError("connection closed by broker")
        data += chunk
    return bytes(data)


def _round_trip(port: int, request: Any, version: int, *, timeout: float) -> Any:
    """One request on a fresh socket to 127.0.0.1:``port``, decoded by the generated classes."""
    frame = encode_request(request, version, 1, _CLIENT_ID)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(frame)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            correlation_id, response = decode_response(
                _recv_exact(sock, size), request.RESPONSE_TYPE, version)
    except (OSError, ProtocolError, struct.error) as exc:
        raise _WireError(f"{type(exc).__name__}: {exc}") from exc
    if correlation_id != 1:
        raise _WireError(f"correlation id {correlation_id} != 1")
    return response


def _version(versions: Mapping[int, tuple[int, int]], request_type: Any) -> int:
    """The highest version both we and the broker speak."""
    low, high = versions.get(request_type.API_KEY, (0, -1))
    version: int = min(high, int(request_type.MAX_VERSION))
    if version < max(low, request_type.MIN_VERSION):
        raise KafkaClusterError(f"no common version of {request_type.__name__}: broker "
                                f"{low}-{high}, ours {request_type.MIN_VERSION}-"
                                f"{request_type.MAX_VERSION}")
    return version


@dataclass(frozen=True)
class KafkaPartition:
    """One partition as Metadata reports it."""

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int


# -- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class SecurityOptions:
    """What the secure shape serves: TLS material, PLAIN/SCRAM users, the OAUTHBEARER subject.

    Every SASL listener enables PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER. PLAIN
    users are JAAS ``user_<name>`` entries; SCRAM credentials are written at format time
    (``kafka-storage format --add-scram``), so no admin-tool JVM is needed; OAUTHBEARER uses
    Kafka's default unsecured validator
    (``OAuthBearerUnsecuredValidatorCallbackHandler``), which accepts any unsigned JWS whose
    ``sub`` claim is set: clients use ``unsecuredLoginStringClaim_sub`` (Java) or
    ``enable.sasl.oauthbearer.unsecure.jwt`` (librdkafka).
    """

    users: tuple[SaslUser, ...] = (SaslUser("alice", "alice-secret"),
                                   SaslUser("bob", "bob-secret"))
    oauth_subject: str = "aiokprod-oauth-user"


#: The listener names of the secure shape, equal to their security protocols.
SECURE_LISTENERS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")


def _props(values: Mapping[str, str]) -> str:
    """A Java .properties text; backslashes and newlines escaped as Properties.load expects."""
    lines = []
    for key, value in values.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{key}={escaped}")
    return "\n".join(lines) + "\n"


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.raft.name = org.apache.kafka.raft
logger.raft.level = WARN
logger.coord.name = org.apache.kafka.coordinator
logger.coord.level = WARN
"""


def _random_cluster_id() -> str:
    """A Kafka Uuid string (22 url-safe base64 characters). Like Kafka's ``Uuid.randomUuid``
    it never starts with "-", which a command line would read as an option."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held together while picking, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass
class _Node:
    """One KRaft node (broker+controller): its ports, directory and current process."""

    node_id: int
    directory: Path
    # Listener name -> port the node binds.
    ports: dict[str, int]
    # Listener name -> port advertised to clients (differs behind a proxy).
    advertised: dict[str, int]
    process: subprocess.Popen[bytes] | None = None
    # Seconds from exec to ready, per start of this node (restarts append).
    start_seconds: list[float] = field(default_factory=list)
    # Monotonic time of the last exec, until that start was seen ready.
    launched_at: float | None = None
    last_returncode: int | None = None

    @property
    def config(self) -> Path:
        return self.directory / "server.properties"

    @property
    def server_log(self) -> Path:
        return self.directory / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.directory / "stdout.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        out = []
        for path in (self.stdout_log, self.server_log):
            with contextlib.suppress(FileNotFoundError):
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()
                if text:
                    out.append(f"--- {path} ---")
                    out.extend(text[-lines:])
        return "\n".join(out)


# -- the cluster ------------------------------------------------------------------------------


class KafkaCluster:
    """One or three KRaft nodes of Apache Kafka on loopback ports, owned by this object.

    ``brokers=3`` gives replication factor 3 and ``min.insync.replicas=2`` by default (also for
    the internal offsets and transaction topics). ``advertised_ports`` maps node id to the
    port its PLAINTEXT listener advertises (a proxy in front). ``security`` adds the SSL,
    SASL_PLAINTEXT and SASL_SSL listeners (one broker only). ``broker_config`` overrides or
    adds server properties; ``extra_classpath`` puts more jars or class directories on the
    broker's ``java -cp`` (plugins a test builds, e.g. a KIP-714 telemetry receiver).
    ``start()`` returns once every node answers Metadata listing all nodes; ``stop()`` ends
    every process by PID and is idempotent.
    """

    def __init__(
        self,
        jars: KafkaJars,
        *,
        brokers: int = 1,
        work_dir: Path | None = None,
        advertised_ports: Mapping[int, int] | None = None,
        security: SecurityOptions | None = None,
        broker_config: Mapping[str, str] | None = None,
        extra_classpath: Sequence[str | Path] = (),
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        startup_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        stop_grace: float = 2.0,
    ) -> None:
        if brokers not in (1, 3):
            raise ValueError(f"brokers must be 1 or 3, got {brokers}")
        if security is not None and brokers != 1:
            raise ValueError("the security listeners are offered on the 1-broker shape only")
        self.jars = jars
        self.brokers = brokers
        # Our own temp dir is removed after a clean stop; a caller's is left to the caller.
        self._own_dir = work_dir is None
        self.work_dir = Path(tempfile.mkdtemp(prefix="aiokprod-kafka-")) if work_dir is None \
            else Path(work_dir)
        self._advertised_ports = dict(advertised_ports or {})
        self.security = security
        self._broker_config = dict(broker_config or {})
        # after the Kafka jars, so a plugin never shadows a broker class
        self.extra_classpath = tuple(str(p) for p in extra_classpath)
        self.jvm_options = tuple(jvm_options)
        self.startup_timeout = startup_timeout
        # stop_broker's bound for one node's controlled shutdown; stop_grace is stop()'s.
        self.stop_timeout = stop_timeout
        self.stop_grace = stop_grace
        # Fresh per cluster: the readiness check compares it, so a foreign broker that won a
        # port race is never taken for ours.
        self.cluster_id = _random_cluster_id()
        self.tls: TlsMaterial | None = None
        self._nodes: dict[int, _Node] = {}
        # Seconds from the first exec to the whole cluster being ready (set by start()).
        self.startup_seconds: float | None = None
        # Set by the owner when a test failed: stop() then keeps the logs.
        self.keep_logs = False
        # What the broker advertised in ApiVersions (from the first node), for version checks.
        self.api_versions: dict[int, tuple[int, int]] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Format every node's storage, start them all, wait until Metadata lists them all.

        Ports are picked free and then released, so another process can take one before a
        node binds it: a node that fails to bind makes the whole start retry on fresh ports
        (up to 3 attempts); any other failure raises KafkaClusterError with the log tail.
        """
        if self._nodes:
            raise KafkaClusterError(f"{self!r} was already started")
        started = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.security is not None:
            self.tls = make_tls_material(self.work_dir / "tls")
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            try:
                self._start_once(started + self.startup_timeout)
                break
            except KafkaClusterError as exc:
                lost_race = "Address already in use" in str(exc) and attempt < _PORT_ATTEMPTS
                self.keep_logs = not lost_race
                self.stop()
                if not lost_race:
                    raise
                logger.info("kafka: a port was taken before a node bound it; retrying")
                for node in self._nodes.values():
                    shutil.rmtree(node.directory, ignore_errors=True)
                self._nodes.clear()
                self.keep_logs = False
            except BaseException:
                self.keep_logs = True
                self.stop()
                raise
        self.startup_seconds = time.monotonic() - started
        logger.info("kafka: %d node(s) ready in %.1fs at %s", self.brokers,
                    self.startup_seconds, self.bootstrap)
        return self

    def _start_once(self, deadline: float) -> None:
        listeners = ["CONTROLLER", "INTERNAL", "PLAINTEXT"]
        if self.security is not None:
            listeners += SECURE_LISTENERS
        ports = iter(free_ports(len(listeners) * self.brokers))
        for node_id in range(1, self.brokers + 1):
            node_ports = {name: next(ports) for name in listeners}
            advertised = {name: p for name, p in node_ports.items() if name != "CONTROLLER"}
            if node_id in self._advertised_ports:
                advertised["PLAINTEXT"] = self._advertised_ports[node_id]
            self._nodes[node_id] = _Node(node_id, self.work_dir / f"node-{node_id}",
                                         node_ports, advertised)
        for node in self._nodes.values():
            self._write_config(node)
        self._format_all()
        for node in self._nodes.values():
            self._launch(node)
        for node in self._nodes.values():
            self._wait_ready(node, deadline)

    def stop(self) -> None:
        """End every node by PID: SIGTERM together, SIGKILL what is left after ``stop_grace``.

        Idempotent. The whole cluster goes at once and its data is thrown away, so a node that
        waits for a controlled shutdown a stopping quorum can no longer grant (3-node shape:
        ~5 s) is killed rather than waited for.
        """
        running = [n for n in self._nodes.values() if n.process is not None]
        for node in running:
            self._signal(node, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        for node in running:
            process = node.process
            if process is None:
                continue
            try:
                process.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.info("kafka: node %d (pid %d) still shutting down after %.1fs; killing",
                            node.node_id, process.pid, self.stop_grace)
                process.kill()
            self._reap(node, self.stop_timeout)
        if self.keep_logs:
            logger.warning("kafka: logs kept in %s", self.work_dir)
        elif self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self.keep_logs = True
        self.stop()

    # -- one node --------------------------------------------------------------------------

    def stop_broker(self, node_id: int, *, timeout: float | None = None) -> int:
        """SIGTERM (a controlled shutdown: leadership moves first) and wait; returns the exit
        status. Killed after ``timeout`` (default ``stop_timeout``) with a warning."""
        node = self._node(node_id)
        self._signal(node, signal.SIGTERM)
        return self._reap(node, self.stop_timeout if timeout is None else timeout)

    def kill_broker(self, node_id: int) -> int:
        """SIGKILL, as a crash: no controlled shutdown, the controller fences the node after
        ``broker.session.timeout.ms``. Returns the exit status (-9)."""
        node = self._node(node_id)
        self._signal(node, signal.SIGKILL)
        return self._reap(node, self.stop_timeout)

    def start_broker(self, node_id: int, *, timeout: float | None = None) -> None:
        """Start a stopped node again on the same ports with its data kept; returns once
        every running node's Metadata lists it."""
        node = self._node(node_id)
        if node.running:
            raise KafkaClusterError(f"node {node_id} is already running")
        self._launch(node)
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        for other in self._nodes.values():
            if other.running:
                self._wait_ready(other, deadline)

    def _node(self, node_id: int) -> _Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KafkaClusterError(f"no node {node_id}; nodes are {sorted(self._nodes)}") \
                from None

    def _signal(self, node: _Node, signum: int) -> None:
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signum)

    def _reap(self, node: _Node, timeout: float) -> int:
        process = node.process
        if process is None:
            return node.last_returncode if node.last_returncode is not None else 0
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("kafka: node %d (pid %d) still running after %.1fs; killing",
                           node.node_id, process.pid, timeout)
            process.kill()
            process.wait(10.0)
        node.process = None
        node.last_returncode = process.returncode
        return process.returncode

    def _write_config(self, node: _Node) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.ports['CONTROLLER']}"
                          for n in self._nodes.values())
        rf = str(self.brokers)
        min_isr = "2" if self.brokers == 3 else "1"
        protocol_map = {"CONTROLLER": "PLAINTEXT", "INTERNAL": "PLAINTEXT",
                        "PLAINTEXT": "PLAINTEXT"}
        for name in node.ports:
            protocol_map.setdefault(name, name)
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "listeners": ",".join(f"{name}://127.0.0.1:{port}"
                                  for name, port in node.ports.items()),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}"
                                             for name, port in node.advertised.items()),
            "listener.security.protocol.map": ",".join(f"{k}:{v}"
                                                       for k, v in protocol_map.items()),
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "3",
            # a transaction past transaction.timeout.ms is aborted within a second, not ten
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            # The controller writes a no-op record to the metadata log when it has been idle
            # this long (default 500 ms), for brokers to see their metadata is current; tests
            # need none of it. With it and Kafka's default heartbeat (one node, below), an idle
            # node takes 1.1% of a core instead of 1.9% (4.4.0, 180 s each, four nodes side by
            # side) and starts as fast; the shared nodes idle for most of a run.
            "metadata.max.idle.interval.ms": "5000",
            # few threads: several JVMs share 2 cores
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "delete.topic.enable": "true",
            # Tests write records stamped years ago (fixed timestamps); under the default 7-day
            # retention the broker's check (every 5 min, from 30 s after start) deletes them
            # while a test is reading them back. Nothing here expires unless a topic says so.
            "log.retention.ms": "-1",
        }
        if self.brokers == 3:
            # a crashed (SIGKILLed) node is fenced, and its partitions move, within ~3 s; one
            # node has no one to fail over to, and keeps Kafka's defaults (2 s and 9 s), which
            # also leave a loaded machine more room before a node's own heartbeat is late
            props.update({"broker.heartbeat.interval.ms": "500",
                          "broker.session.timeout.ms": "3000",
                          "controller.quorum.election.timeout.ms": "1000",
                          "controller.quorum.fetch.timeout.ms": "2000"})
        props.update(self._security_props())
        props.update(self._broker_config)
        node.config.write_text(_props(props))
        (node.directory / "log4j2.properties").write_text(_LOG4J2.format(log=node.server_log))

    def _security_props(self) -> dict[str, str]:
        security, tls = self.security, self.tls
        if security is None or tls is None:
            return {}
        props = {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": tls.server_key_pem,
            "ssl.keystore.certificate.chain": tls.server_chain_pem,
            "ssl.client.auth": "none",
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        }
        plain_users = " ".join(f'user_{u.name}="{u.password}"' for u in security.users)
        for listener in ("sasl_plaintext", "sasl_ssl"):
            prefix = f"listener.name.{listener}"
            props[f"{prefix}.plain.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f"{plain_users};")
            for mechanism in SCRAM_MECHANISMS:
                props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;")
            # No server callback handler configured: Kafka's default for OAUTHBEARER is the
            # unsecured JWS validator (OAuthBearerUnsecuredValidatorCallbackHandler).
            props[f"{prefix}.oauthbearer.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'unsecuredLoginStringClaim_sub="{security.oauth_subject}";')
        return props

    def _java(self, node: _Node, main: str, *args: str, heap: Sequence[str] = ()) -> list[str]:
        archive = self.jars.class_archive
        # -Xshare:auto: a stale or foreign archive is ignored, never fatal
        sharing = [f"-XX:SharedArchiveFile={archive}", "-Xshare:auto"] if archive else []
        return [
            "java", *heap, *self.jvm_options, *sharing,
            # what the JVM unpacks (lz4's and snappy's native libraries) stays in the node's
            # directory and goes with it; in /tmp, a killed broker left it there for good
            f"-Djava.io.tmpdir={node.directory}",
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.directory}",
            "-cp", os.pathsep.join((self.jars.classpath, *self.extra_classpath)), main, *args,
        ]

    def _format_argv(self, node: _Node) -> list[str]:
        argv = self._java(node, "kafka.tools.StorageTool", "format", "--config",
                          str(node.config), f"--cluster-id={self.cluster_id}")
        if self.security is not None:
            for user in self.security.users:
                for mechanism in SCRAM_MECHANISMS:
                    argv += ["--add-scram",
                             f"{mechanism}=[name={user.name},password={user.password}]"]
        # the formatter needs far less heap than a broker, and starts quicker with less; it
        # must not write the class archive a broker of this cluster may be dumping
        argv = [a for a in argv
                if not a.startswith(("-Xmx", "-Xms", "-XX:ArchiveClassesAtExit"))]
        argv.insert(1, "-Xmx128m")
        return argv

    def _format_all(self, timeout: float = 300.0) -> None:
        """``kafka-storage format`` with our cluster id (and SCRAM users, secure shape), on every
        node at once: each run is a JVM start (~0.7 s), so in parallel they cost one. The
        bound is far above that: a benchmark run at the lowest priority beside two suites
        once took over 60 s to format one node."""
        running: list[tuple[_Node, subprocess.Popen[bytes]]] = []
        try:
            for node in self._nodes.values():
                out = open(node.directory / "format.log", "wb")  # noqa: SIM115 - closed below
                with out:
                    running.append((node, subprocess.Popen(
                        self._format_argv(node), stdin=subprocess.DEVNULL, stdout=out,
                        stderr=subprocess.STDOUT)))
            deadline = time.monotonic() + timeout
            for node, process in running:
                try:
                    code = process.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise KafkaClusterError(f"formatting node {node.node_id} took over "
                                            f"{timeout}s") from None
                if code != 0:
                    output = (node.directory / "format.log").read_text(errors="replace")
                    raise KafkaClusterError(f"formatting node {node.node_id} failed "
                                            f"(exit {code}):\n{output[-4000:]}")
        finally:
            for _node, process in running:
                if process.poll() is None:
                    process.kill()
                    process.wait(10.0)

    def _launch(self, node: _Node) -> None:
        argv = self._java(node, "kafka.Kafka", str(node.config))
        env = {k: v for k, v in os.environ.items()
               if k not in ("KAFKA_OPTS", "KAFKA_HEAP_OPTS", "JAVA_TOOL_OPTIONS")}
        # stdout to a file, never a pipe nobody drains; own session so a terminal's Ctrl-C
        # reaches the owner first, which then stops the node by PID.
        with open(node.stdout_log, "ab") as out:
            node.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        node.launched_at = time.monotonic()
        logger.info("kafka: node %d pid %d (dir %s)", node.node_id, node.process.pid,
                    node.directory)

    def _wait_ready(self, node: _Node, deadline: float) -> None:
        """Until ``node`` answers ApiVersions and Metadata listing every running node.

        Any of those nodes exiting ends the wait at once with its log: a node that lost the
        race for its port exits while the others wait to see it, and the start retries on
        fresh ports only if that node's "Address already in use" reaches the error (waiting
        out the bound instead once cost a 3-node start its 120 s)."""
        expected = {n.node_id for n in self._nodes.values() if n.running}
        port = node.ports["INTERNAL"]
        last_problem = "no attempt yet"
        while True:
            for other in (self._nodes[i] for i in sorted(expected)):
                process = other.process
                if process is None or process.poll() is not None:
                    code = process.returncode if process is not None else None
                    raise KafkaClusterError(
                        f"kafka node {other.node_id} exited (code {code}) before node "
                        f"{node.node_id} was ready; logs in {other.directory}:\n"
                        f"{other.log_tail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaClusterError(
                    f"kafka node {node.node_id} not ready within startup_timeout="
                    f"{self.startup_timeout}s (last: {last_problem}); logs in "
                    f"{node.directory}:\n{node.log_tail()}")
            try:
                versions = self._api_versions(port, min(2.0, remaining))
                if MetadataRequest.API_KEY not in versions:
                    # a node still starting answers ApiVersions before it lists the client
                    # APIs (seen on a loaded machine: Fetch and the admin APIs, no Metadata)
                    raise _WireError(f"ApiVersions lists no Metadata API yet "
                                     f"({len(versions)} APIs)")
                response = _round_trip(port, MetadataRequest(
                    topics=[], allow_auto_topic_creation=False),
                    _version(versions, MetadataRequest), timeout=min(2.0, remaining))
            except _WireError as exc:
                last_problem = str(exc)
            else:
                seen = {b.node_id for b in response.brokers}
                if response.cluster_id != self.cluster_id:
                    last_problem = f"port answered by cluster {response.cluster_id!r}"
                elif not expected <= seen:
                    last_problem = f"metadata lists nodes {sorted(seen)}, want {sorted(expected)}"
                elif (problem := self._client_listeners_problem(node, remaining)) is not None:
                    last_problem = problem
                else:
                    if node.launched_at is not None:
                        node.start_seconds.append(time.monotonic() - node.launched_at)
                        node.launched_at = None
                    if not self.api_versions:
                        self.api_versions = versions
                    return
            # a probe round trip, not a blind sleep: the broker is asked again shortly
            time.sleep(0.05)

    def _client_listeners_problem(self, node: _Node, remaining: float) -> str | None:
        """Why a client listener of ``node`` does not serve yet, or None.

        Kafka opens the inter-broker listener first and the client listeners a moment later;
        a client listener whose port another process took never opens at all (the node then
        exits), while that process may well accept the TCP connection. So each listener must
        speak: ApiVersions on the plaintext ones (allowed before SASL), a TLS handshake with
        our server certificate on the SSL ones.
        """
        timeout = max(0.1, min(2.0, remaining))
        for name, port in node.ports.items():
            if name in ("CONTROLLER", "INTERNAL"):
                continue
            try:
                if name in ("SSL", "SASL_SSL"):
                    self._tls_handshake(port, timeout)
                else:
                    self._api_versions(port, timeout)
            except (_WireError, OSError) as exc:
                return f"listener {name} on port {port}: {exc}"
        return None

    def _tls_handshake(self, port: int, timeout: float) -> None:
        assert self.tls is not None
        context = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1"):
            pass

    @staticmethod
    def _api_versions(port: int, timeout: float) -> dict[int, tuple[int, int]]:
        response = _round_trip(port, ApiVersionsRequest(), 0, timeout=timeout)
        if response.error_code != 0:
            raise _WireError(f"ApiVersions error code {response.error_code}")
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    # -- addresses ---------------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    def running_node_ids(self) -> list[int]:
        return [i for i in self.node_ids if self._nodes[i].running]

    def port(self, node_id: int = 1, listener: str = "PLAINTEXT") -> int:
        """The port ``node_id`` binds for ``listener`` (PLAINTEXT, INTERNAL, SSL, ...)."""
        node = self._node(node_id)
        try:
            return node.ports[listener]
        except KeyError:
            raise KafkaClusterError(f"node {node_id} has no {listener} listener; it has "
                                    f"{sorted(node.ports)}") from None

    def bootstrap_for(self, listener: str = "PLAINTEXT") -> str:
        """Every node's address on ``listener``, comma-separated (a bootstrap.servers value)."""
        return ",".join(f"127.0.0.1:{self.port(i, listener)}" for i in self.node_ids)

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT client listeners of all nodes (bind ports, not a proxy's)."""
        return self.bootstrap_for("PLAINTEXT")

    def pid(self, node_id: int) -> int | None:
        process = self._node(node_id).process
        return process.pid if process is not None and process.poll() is None else None

    def start_seconds(self, node_id: int) -> list[float]:
        """Seconds from exec to ready, for each start of ``node_id``."""
        return list(self._node(node_id).start_seconds)

    def log_dir(self, node_id: int) -> Path:
        return self._node(node_id).directory

    def log_tail(self, node_id: int | None = None, lines: int = _TAIL_LINES) -> str:
        ids = [node_id] if node_id is not None else self.node_ids
        return "\n".join(self._node(i).log_tail(lines) for i in ids)

    def __repr__(self) -> str:
        states = []
        for node in self._nodes.values():
            if node.process is None:
                states.append(f"{node.node_id}:stopped")
            elif node.process.poll() is None:
                states.append(f"{node.node_id}:pid={node.process.pid}")
            else:
                states.append(f"{node.node_id}:exited={node.process.returncode}")
        return (f"<KafkaCluster {self.jars.version} brokers={self.brokers} "
                f"cluster={self.cluster_id} {' '.join(states) or 'not started'} "
                f"dir={self.work_dir}>")

    # -- topics --------------------------------------------------------------------------

    def _any_port(self) -> int:
        for node_id in self.running_node_ids():
            return self.port(node_id, "INTERNAL")
        raise KafkaClusterError(f"no node is running: {self!r}")

    def partitions(self, topic: str, *, node_id: int | None = None,
                   timeout: float = 5.0) -> list[KafkaPartition]:
        """The topic's partitions as ``node_id`` (default: any running node) sees them; empty if
        it does not know the topic."""
        port = self._any_port() if node_id is None else self.port(node_id, "INTERNAL")
        try:
            versions = self.api_versions or self._api_versions(port, timeout)
            response = _round_trip(port, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False),
                _version(versions, MetadataRequest), timeout=timeout)
        except _WireError as exc:
            raise KafkaClusterError(f"metadata from port {port} failed: {exc}") from exc
        for t in response.topics:
            if t.name == topic and t.error_code == 0:
                return sorted((KafkaPartition(p.partition_index, p.leader_id,
                                              tuple(p.replica_nodes), tuple(p.isr_nodes),
                                              p.error_code) for p in t.partitions),
                              key=lambda p: p.partition)
        return []

    def leader_of(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``-``partition`` now (-1 while there is none)."""
        for p in self.partitions(topic):
            if p.partition == partition:
                return p.leader
        raise KafkaClusterError(f"{topic}-{partition} unknown to the cluster")

    def wait_for_partitions(self, topic: str, *, count: int | None = None,
                            full_isr: bool = False, timeout: float = 30.0,
                            ) -> list[KafkaPartition]:
        """Until ``topic`` is usable everywhere; returns the partitions as last seen.

        Usable means: every running node's Metadata shows each partition with a leader (and,
        with ``full_isr``, every replica in sync), and each leader answers DescribeProducers
        for it without error. The last check matters: a node publishes a new leader in
        Metadata a moment before its replica manager accepts Produce requests for it (a raw
        Produce in that window gets NOT_LEADER_OR_FOLLOWER).
        """
        deadline = time.monotonic() + timeout
        while True:
            problem = self._partitions_problem(topic, count, full_isr)
            if problem is None:
                return self.partitions(topic)
            if time.monotonic() >= deadline:
                raise KafkaClusterError(f"topic {topic!r} not ready on every node within "
                                        f"{timeout}s: {problem}")
            time.sleep(0.05)

    def _partitions_problem(self, topic: str, count: int | None, full_isr: bool) -> str | None:
        """Why ``topic`` is not usable yet, or None if it is (see ``wait_for_partitions``)."""
        seen: list[KafkaPartition] = []
        try:
            for node_id in self.running_node_ids():
                seen = self.partitions(topic, node_id=node_id, timeout=2.0)
                if not seen or (count is not None and len(seen) != count):
                    return f"node {node_id} sees partitions {seen}"
                for p in seen:
                    if p.leader < 0 or p.error_code != 0:
                        return f"node {node_id} sees {p}"
                    if full_isr and set(p.isr) != set(p.replicas):
                        return f"node {node_id} sees {p}"
            by_leader: dict[int, list[int]] = {}
            for p in seen:
                by_leader.setdefault(p.leader, []).append(p.partition)
            for leader, indexes in by_leader.items():
                port = self.port(leader, "INTERNAL")
                response = _round_trip(port, DescribeProducersRequest(topics=[
                    DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=indexes)
                ]), _version(self.api_versions, DescribeProducersRequest), timeout=2.0)
                for t in response.topics:
                    for part in t.partitions:
                        if part.error_code != 0:
                            return (f"leader {leader} answers error {part.error_code} for "
                                    f"{topic}-{part.partition_index}")
        except (KafkaClusterError, _WireError) as exc:
            return str(exc)
        return None

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None,
                     *, config: Mapping[str, str] | None = None,
                     timeout: float = 30.0) -> list[KafkaPartition]:
        """CreateTopics over the protocol (no admin-tool JVM, which would cost seconds), then
        wait until every running node serves it with a leader per partition.

        ``replication_factor`` defaults to the cluster's size. Raises KafkaClusterError on any
        error code, including TOPIC_ALREADY_EXISTS.
        """
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        rf = self.brokers if replication_factor is None else replication_factor
        port = self._any_port()
        request = CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
                configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                         for k, v in (config or {}).items()])],
            timeout_ms=int(timeout * 1000), validate_only=False)
        try:
            versions = self.api_versions or self._api_versions(port, timeout)
            response = _round_trip(port, request, _version(versions, CreateTopicsRequest),
                                   timeout=timeout)
        except _WireError as exc:
            raise KafkaClusterError(f"CreateTopics {name!r} failed: {exc}") from exc
        for result in response.topics:
            if result.error_code != 0:
                raise KafkaClusterError(f"CreateTopics {name!r}: error {result.error_code} "
                                        f"({result.error_message})")
        return self.wait_for_partitions(name, count=partitions, timeout=timeout)

    def alter_client_metrics(self, name: str, configs: Mapping[str, str | None], *,
                             timeout: float = 30.0) -> None:
        """Set (or, with None, delete) configs of the CLIENT_METRICS resource ``name``: a
        KIP-714 metrics subscription (``metrics``, ``interval.ms``, ``match``), over
        IncrementalAlterConfigs like ``kafka-client-metrics.sh --alter`` (no admin-tool JVM)."""
        request = IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=_CLIENT_METRICS_RESOURCE, resource_name=name,
                configs=[IncrementalAlterConfigsRequest.AlterableConfig(
                    name=key, config_operation=_OP_DELETE if value is None else _OP_SET,
                    value=value) for key, value in configs.items()])],
            validate_only=False)
        port = self._any_port()
        try:
            versions = self.api_versions or self._api_versions(port, timeout)
            response = _round_trip(port, request,
                                   _version(versions, IncrementalAlterConfigsRequest),
                                   timeout=timeout)
        except _WireError as exc:
            raise KafkaClusterError(f"IncrementalAlterConfigs {name!r} failed: {exc}") from exc
        for result in response.responses:
            if result.error_code != 0:
                raise KafkaClusterError(f"IncrementalAlterConfigs {name!r}: error "
                                        f"{result.error_code} ({result.error_message})")

    def active_producers(self, topic: str, partition: int) -> list[tuple[int, int, int]]:
        """``(producer id, epoch, last sequence)`` of every producer the partition's leader
        keeps state for (DescribeProducers): what the broker, not the client, says it saw."""
        leader = self.leader_of(topic, partition)
        if leader < 0:
            raise KafkaClusterError(f"{topic}-{partition} has no leader")
        port = self.port(leader, "INTERNAL")
        try:
            response = _round_trip(port, DescribeProducersRequest(topics=[
                DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])
            ]), _version(self.api_versions, DescribeProducersRequest), timeout=5.0)
        except _WireError as exc:
            raise KafkaClusterError(f"DescribeProducers to node {leader} failed: {exc}") from exc
        for t in response.topics:
            for part in t.partitions:
                if part.error_code != 0:
                    raise KafkaClusterError(f"DescribeProducers {topic}-{partition}: error "
                                            f"{part.error_code} ({part.error_message})")
                return sorted((s.producer_id, s.producer_epoch, s.last_sequence)
                              for s in part.active_producers)
        return []


# -- class data sharing ----------------------------------------------------------------------


def _archive_name(jars: KafkaJars) -> str:
    """Unique per JVM build and classpath: an archive only serves the JVM that wrote it."""
    try:
        result = subprocess.run(["java", "-version"], stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=30, check=False)
        java = result.stderr
    except (OSError, subprocess.TimeoutExpired):
        java = b"unknown"
    digest = hashlib.sha256(java + jars.classpath.encode()).hexdigest()[:12]
    return f"classes-{digest}.jsa"


def with_class_archive(jars: KafkaJars, *, timeout: float = 120.0) -> KafkaJars:
    """``jars`` with a class-data-sharing archive of the broker's classes, made once.

    A JVM 17 start spends most of its time loading and verifying classes; an AppCDS archive
    (``-XX:ArchiveClassesAtExit`` on one throw-away node, then ``-XX:SharedArchiveFile``)
    takes ~40% off every later node and admin-tool start. The archive lives beside the jars,
    is named after the JVM build and classpath, and is made under the cache's lock by one run
    (~10 s, once). Any failure only costs the speed-up: ``jars`` is returned unchanged.
    ``AIOKPROD_KAFKA_CDS=0`` turns it off.
    """
    if os.environ.get("AIOKPROD_KAFKA_CDS", "1") == "0":
        return jars
    cache = jars.libs.parent
    archive = cache / _archive_name(jars)
    if not archive.is_file():
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not archive.is_file():
                    _dump_class_archive(jars, archive, timeout)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    return replace(jars, class_archive=archive) if archive.is_file() else jars


def _dump_class_archive(jars: KafkaJars, archive: Path, timeout: float) -> None:
    tmp = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    cluster = KafkaCluster(
        jars, jvm_options=(*DEFAULT_JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={tmp}"),
        startup_timeout=timeout, stop_grace=timeout)
    try:
        cluster.start()
        cluster.create_topic("class-archive-warm-up", 1)  # load the topic-creation classes too
    except KafkaClusterError as exc:
        logger.warning("kafka: no class archive (the warm-up node failed): %s", exc)
    finally:
        cluster.stop()  # SIGTERM: the JVM writes the archive as it exits
    try:
        if tmp.is_file() and tmp.stat().st_size > 0:
            tmp.rename(archive)
            logger.info("kafka: class archive %s made in %.1fs", archive,
                        time.monotonic() - started)
    finally:
        tmp.unlink(missing_ok=True)

