"""Apicurio Registry's runnable jar for the tests, built once from Maven Central.

Confluent's Schema Registry is not on Maven Central; Apicurio Registry is, and serves the
Confluent API at ``/apis/ccompat/v7``. Its app jar is a Quarkus application, not a runnable
jar, so ``ensure_registry`` re-runs Quarkus' build over it with the small Maven project in
``tests/support/apicurio/`` (its pom says what Central lacks and how that is worked around)
into ``~/.cache/aiokprod/apicurio-registry-<version>/`` (``$AIOKPROD_KAFKA_CACHE`` moves the
root, as for the Kafka jars), under an exclusive ``flock`` with a ``.complete`` marker written
last. Version 2.4.2.Final is the newest whose modules Central has whole.

Standard library only, like ``kafka_jars``: ``support.warm_caches`` builds it with the
Python that makes ``.venv`` while uv fills it (``schema_registry_server`` runs the jar).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

from support.kafka_jars import cache_dir, java_17_missing, maven_env

__all__ = ["REGISTRY_VERSION", "ensure_registry"]

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
                                timeout=max(timeout, 1.0), check=False, env=maven_env())
    except subprocess.TimeoutExpired:
        return f"Maven could not {what} within {timeout:.0f}s"
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
        errors = [line for line in output.splitlines() if "ERROR" in line]
        return f"Maven could not {what} (exit {result.returncode}): " \
               f"{(errors or output.splitlines() or ['no output'])[0][:500]}"
    return None
