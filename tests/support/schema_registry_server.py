"""A real Schema Registry for the tests: Apicurio Registry on loopback, stopped by PID.

``RegistryServer`` runs the jar ``support.registry_jar`` builds on free loopback ports: plain
HTTP and HTTPS (a throw-away CA from ``kafka_security``) on one JVM, both behind HTTP basic
auth, in-memory storage.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from support.kafka_cluster import free_ports
from support.kafka_jars import QUICK_JVM
from support.kafka_security import TlsMaterial, make_tls_material

__all__ = ["RegistryServer"]


@dataclass
class RegistryServer:
    """One Apicurio Registry JVM: ``url`` (HTTP) and ``tls_url`` (HTTPS), basic auth both."""

    runner: Path
    directory: Path
    user: str = "alice"
    password: str = "alice-secret"
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    tls_port: int = 0
    tls: TlsMaterial | None = None

    @property
    def ccompat(self) -> str:
        return "/apis/ccompat/v7"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.ccompat}"

    @property
    def tls_url(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}{self.ccompat}"

    @property
    def user_info(self) -> str:
        return f"{self.user}:{self.password}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, *, timeout: float = 120.0) -> None:
        """Start the JVM and wait (at most ``timeout``) until the registry answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tls = make_tls_material(self.directory / "tls")
        self.port, self.tls_port = free_ports(2)
        argv = [
            "java", "-Xmx512m", *QUICK_JVM, "-Xshare:auto",
            # Vert.x's file cache and other scratch in the registry's directory, not in /tmp
            f"-Djava.io.tmpdir={self.directory}",
            "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
            f"-Dquarkus.http.ssl-port={self.tls_port}",
            f"-Dquarkus.http.ssl.certificate.files={self.tls.server_chain}",
            f"-Dquarkus.http.ssl.certificate.key-files={self.tls.server_key}",
            "-Dquarkus.oidc.tenant-enabled=false",
            f"-Dquarkus.security.users.embedded.users.{self.user}={self.password}",
            "-Dquarkus.log.level=WARN", "-Dquarkus.log.category.\"io.apicurio\".level=WARN",
            "-jar", str(self.runner),
        ]
        log = open(self.directory / "registry.log", "wb")  # noqa: SIM115 -- the JVM's own
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, cwd=self.directory)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                tail = (self.directory / "registry.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the registry exited with {self.process.returncode}: {tail}")
            if self._answers():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the registry did not answer within {timeout:.0f}s")
            time.sleep(0.25)

    def _answers(self) -> bool:
        try:
            self.call("GET", "/subjects", timeout=2.0)
        except (OSError, urllib.error.URLError):
            return False
        return True

    def call(self, method: str, path: str, body: object = None, *, timeout: float = 10.0
             ) -> object:
        """One blocking admin call on the plain port (set-up and checks in tests)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        token = base64.b64encode(self.user_info.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
        return json.loads(raw) if raw else None

    def tls_context(self) -> ssl.SSLContext:
        assert self.tls is not None
        return ssl.create_default_context(cafile=str(self.tls.ca_cert))

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; reaped either way."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGCONT)  # a test may have left it stopped
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
