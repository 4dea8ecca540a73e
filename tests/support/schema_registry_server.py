"""A real Schema Registry for the tests: Apicurio Registry, built once from Maven Central.

Confluent's Schema Registry is not on Maven Central; Apicurio Registry is, and serves the
Confluent API at ``/apis/ccompat/v7``. Its app jar is a Quarkus application, not a runnable
jar, so ``ensure_registry`` re-runs Quarkus' build over it with the small Maven project in
``tests/support/apicurio/`` (its pom says what Central lacks and how that is worked around)
into ``~/.cache/aiokprod/apicurio-registry-<version>/`` (``$AIOKPROD_KAFKA_CACHE`` moves the
root, as for the Kafka jars), under an exclusive ``flock`` with a ``.complete`` marker written
last. Version 2.4.2.Final is the newest whose modules Central has whole.

``RegistryServer`` runs it on free loopback ports: plain HTTP and HTTPS (a throw-away CA from
``kafka_security``) on one JVM, both behind HTTP basic auth, in-memory storage. Stopped by PID.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from support.kafka_cluster import free_ports
from support.kafka_jars import cache_dir, java_17_missing
from support.kafka_security import TlsMaterial, make_tls_material

__all__ = ["REGISTRY_VERSION", "RegistryServer", "ensure_registry"]

REGISTRY_VERSION = "2.4.2.Final"
_TEMPLATE = Path(__file__).resolve().parent / "apicurio"
_MARKER = ".complete"
_RUNNER = f"aiokprod-test-registry-{REGISTRY_VERSION}-runner.jar"
_MAVEN_FLAGS = ["-B", "-q", "-DskipDefault", "-DskipTests", "-Dcheckstyle.skip",
                "-Dmaven.source.skip", "-Dmaven.javadoc.skip", "-Djacoco.skip", "-Denforcer.skip"]


def _runner(cache: Path) -> Path | None:
    jar = cache / "project" / "target" / _RUNNER
    return jar if (cache / _MARKER).is_file() and jar.is_file() else None


def ensure_registry(*, timeout: float = 1200.0) -> Path | str:
    """The registry's runnable jar, built once into the cache; a reason string if impossible."""
    missing = java_17_missing("Schema Registry tests", "Apicurio Registry")
    if missing is not None:
        return missing
    cache = cache_dir(f"apicurio-registry-{REGISTRY_VERSION}")
    found = _runner(cache)
    if found is not None:
        return found
    mvn = shutil.which("mvn")
    if mvn is None:
        return "Schema Registry tests need Maven to build Apicurio Registry once: no `mvn`"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = _runner(cache)
            if found is not None:
                return found
            return _build(mvn, cache, timeout)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(mvn: str, cache: Path, timeout: float) -> Path | str:
    project = cache / "project"
    shutil.rmtree(project, ignore_errors=True)
    java_dir = project / "src" / "main" / "java" / "aiokprod" / "registry"
    resources = project / "src" / "main" / "resources"
    java_dir.mkdir(parents=True)
    resources.mkdir(parents=True)
    shutil.copy(_TEMPLATE / "pom.xml", project / "pom.xml")
    shutil.copy(_TEMPLATE / "DynamicConfigProperties.java", java_dir)
    started = time.monotonic()
    fetched = cache / "app"
    argv = [mvn, *_MAVEN_FLAGS, "-f", str(project / "pom.xml"), "dependency:copy",
            f"-Dartifact=io.apicurio:apicurio-registry-app:{REGISTRY_VERSION}",
            f"-DoutputDirectory={fetched}"]
    failed = _run(argv, timeout, "fetch the registry app jar")
    if failed:
        return failed
    app_jar = fetched / f"apicurio-registry-app-{REGISTRY_VERSION}.jar"
    with zipfile.ZipFile(app_jar) as jar:
        own = jar.read("application.properties").decode()
    (resources / "application.properties").write_text(
        own + "\n" + (_TEMPLATE / "overlay.properties").read_text())
    argv = [mvn, *_MAVEN_FLAGS, "-f", str(project / "pom.xml"), "package"]
    failed = _run(argv, timeout - (time.monotonic() - started), "build the registry")
    if failed:
        return failed
    if not (project / "target" / _RUNNER).is_file():
        return f"Maven finished but built no {_RUNNER}"
    (cache / _MARKER).write_text(f"built in {time.monotonic() - started:.1f}s\n")
    return project / "target" / _RUNNER


def _run(argv: list[str], timeout: float, what: str) -> str | None:
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=max(timeout, 1.0), check=False)
    except subprocess.TimeoutExpired:
        return f"Maven could not {what} within {timeout:.0f}s"
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
        errors = [line for line in output.splitlines() if "ERROR" in line]
        return f"Maven could not {what} (exit {result.returncode}): " \
               f"{(errors or output.splitlines() or ['no output'])[0][:500]}"
    return None


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
            "java", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
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
