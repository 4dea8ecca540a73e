"""The Apache Kafka broker's jars for the test fixtures: resolved once from Maven Central.

``ensure_kafka_jars`` runs ``mvn dependency:copy-dependencies`` on ``tests/support/kafka/pom.xml``
into ``~/.cache/aiokprod/kafka-<version>/libs`` (outside the repository: no jar is committed).
An exclusive ``flock`` on ``<cache>/.lock`` makes parallel test runs wait for one resolution
instead of racing Maven into the same directory, and a ``.complete`` marker written last means
an interrupted resolution is started over next time. Later runs need only ``java``.

Anything that makes the broker impossible to run (no Java 17+, no Maven and no complete cache,
Maven Central unreachable) is returned as a one-line reason, which the fixtures turn into a
skip (or, with ``CI=true``, a failure).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CACHE_ENV", "KAFKA_VERSION", "POM", "QUICK_JVM", "KafkaJars", "cache_dir",
           "ensure_kafka_jars", "java_17_missing", "kafka_cache_dir", "maven_env"]

logger = logging.getLogger(__name__)

#: Keep equal to ``kafka.version`` in tests/support/kafka/pom.xml.
KAFKA_VERSION = "4.4.0"
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
#: Overrides the cache root (default ``$XDG_CACHE_HOME/aiokprod`` or ``~/.cache/aiokprod``).
CACHE_ENV = "AIOKPROD_KAFKA_CACHE"

_MARKER = ".complete"


@dataclass(frozen=True)
class KafkaJars:
    """The resolved broker jars: what ``java -cp`` needs."""

    version: str
    libs: Path
    jars: tuple[Path, ...]
    # A class-data-sharing archive of the broker's classes (``kafka_cluster.with_class_archive``):
    # JVMs started with it skip most class loading and verification, ~40% of a node's start.
    class_archive: Path | None = None

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(jar) for jar in self.jars)


#: How every JVM the tests start runs (Kafka nodes, Maven, javac, the registry, Spark's driver
#: and executors): the serial collector and C1 alone. They live for seconds to minutes on two
#: shared cores, where C2's compiler threads and a parallel collector spend CPU they never earn
#: back. Maven's builds (cold local repository, nothing else running): the registry's 48.7 s of
#: CPU without them, 30.3 s with them (wall 61-63 s, 34-42 s); a Kafka release's jars 9.7 s and
#: 7.5 s. javac: 2.1 s and 0.9 s.
QUICK_JVM: tuple[str, ...] = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# put before the caller's MAVEN_OPTS, whose own flags come later and win
_MAVEN_JVM = " ".join((*QUICK_JVM, "-Xshare:auto"))


def maven_env() -> dict[str, str]:
    """The environment for ``mvn``: this process's, with the quick-start JVM flags first in
    ``MAVEN_OPTS`` (a user's own MAVEN_OPTS, a local repository say, follow and win)."""
    own = os.environ.get("MAVEN_OPTS", "").strip()
    return {**os.environ, "MAVEN_OPTS": f"{_MAVEN_JVM} {own}".strip()}


def kafka_cache_dir(version: str = KAFKA_VERSION) -> Path:
    """``~/.cache/aiokprod/kafka-<version>`` (or under ``$AIOKPROD_KAFKA_CACHE``)."""
    return cache_dir(f"kafka-{version}")


def cache_dir(name: str) -> Path:
    """``~/.cache/aiokprod/<name>``: where what the tests build from Maven Central is kept
    (``$AIOKPROD_KAFKA_CACHE`` moves the root, ``$XDG_CACHE_HOME`` the ``~/.cache``)."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser() / name
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "aiokprod" / name


def _complete_jars(cache: Path, version: str) -> KafkaJars | None:
    libs = cache / "libs"
    if not (cache / _MARKER).is_file():
        return None
    jars = tuple(sorted(libs.glob("*.jar")))
    if not any(j.name == f"kafka_2.13-{version}.jar" for j in jars):
        return None
    return KafkaJars(version, libs, jars)


def java_17_missing(tests: str, program: str) -> str | None:
    """Why ``program`` cannot run here (no ``java`` on PATH, or one older than 17), naming the
    ``tests`` that need it; None when Java 17+ is there."""
    java = shutil.which("java")
    if java is None:
        return f"{tests} need Java 17+: `java` is not on PATH"
    major = _java_major(java)
    if major is None or major < 17:
        return f"{program} needs Java 17+; `{java} -version` says {major or '?'}"
    return None


def _java_major(java: str) -> int | None:
    """The major version ``java -version`` reports (8 for "1.8.0_x"), None if unreadable."""
    try:
        result = subprocess.run([java, "-version"], stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr.decode("utf-8", "replace"))
    if match is None:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


def ensure_kafka_jars(*, version: str = KAFKA_VERSION, timeout: float = 900.0) -> KafkaJars | str:
    """The broker's jars, resolved once into the cache; a reason string if that is impossible.

    Holds an exclusive ``flock`` on ``<cache>/.lock`` while checking and resolving, so parallel
    test runs wait for one resolution instead of racing Maven into the same directory. A
    resolution that fails or is interrupted leaves no marker, so the next run starts over.
    """
    missing = java_17_missing("Apache Kafka tests", f"Apache Kafka {version}")
    if missing is not None:
        return missing
    cache = kafka_cache_dir(version)
    found = _complete_jars(cache, version)
    if found is not None:
        return found
    mvn = shutil.which("mvn")
    if mvn is None:
        return f"Apache Kafka tests need Maven to fetch the broker jars once: `mvn` not on PATH " \
               f"(or put a complete copy in {cache})"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = _complete_jars(cache, version)  # another run may have finished meanwhile
            if found is not None:
                return found
            libs = cache / "libs"
            shutil.rmtree(libs, ignore_errors=True)
            argv = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                    f"-DoutputDirectory={libs}", f"-Dkafka.version={version}"]
            started = time.monotonic()
            try:
                result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                        timeout=timeout, check=False, env=maven_env())
            except subprocess.TimeoutExpired:  # run() killed and reaped mvn
                return f"`mvn dependency:copy-dependencies` for Kafka {version} did not " \
                       f"finish within {timeout:.0f}s"
            if result.returncode != 0:
                output = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
                last = output.splitlines()[-1] if output else "no output"
                return f"Maven could not resolve Kafka {version} (exit {result.returncode}): {last}"
            (cache / _MARKER).write_text(f"resolved in {time.monotonic() - started:.1f}s\n")
            logger.info("kafka: resolved %s into %s in %.1fs", version, libs,
                        time.monotonic() - started)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    found = _complete_jars(cache, version)
    if found is None:
        return f"Maven finished but {cache / 'libs'} holds no kafka_2.13-{version}.jar"
    return found
