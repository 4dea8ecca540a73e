"""The Spark sessions the sink's tests run under (a plugin registered by tests/conftest.py).

* ``spark`` — a ``local[2,2]`` SparkSession with the ``aiokprod`` data source registered,
  shared by every module that asks for it: the JVM start is the expensive part (~6 s).
  ``local[N, F]`` lets each task run F times, so a failed task is retried as
  ``spark.task.maxFailures`` does on a cluster (plain ``local[N]`` never retries). Tasks run in
  Python workers forked by the one JVM.
* ``spark_cluster`` — a ``local-cluster[2,1,1024]`` SparkSession for one module: a standalone
  Master and two Workers inside the driver's JVM, each Worker starting its own executor JVM
  (one core, 1 GiB), whose Python workers run the tasks — separate processes as on a real
  cluster, so nothing a task does reaches the driver's memory or another executor's. It ships
  what the executors run the two ways docs/spark.md ("Shipping the sink to a cluster") says:
  the interpreter in an archive (``spark.archives``, ``PYSPARK_PYTHON=./environment/bin/python``,
  the archive also unpacked in the driver's working directory for the driver host's Python
  workers), and the ``aiokprod`` package of this checkout as a ``--py-files`` zip (the
  pure-Python path: ``zipimport`` cannot load the native extension). The archive's
  ``bin/python`` stands in for a packed venv: a script that marks its workers with
  ``AIOKPROD_SHIPPED_ENVIRONMENT`` and runs this venv's Python (packing a venv that holds
  pyarrow takes minutes).

pyspark holds one SparkContext per Python process, so the two cannot run at once:
``SparkSessions`` keeps the one asked for last and stops the other first (a module takes one
or the other, never both). Both fixtures are module-scoped so that a switch happens before
the leak guard's per-test snapshot. Stopping ends the driver JVM by PID after
``SparkSession.stop``; with it go the in-JVM Master and Workers, and the Workers kill their
executor JVMs when the application stops (``ps`` shows none after a run). Spark's Python
workers are children of the JVMs, not of pytest, so the leak guard does not see them.

pyspark is imported inside the fixtures: the plugin loads in every run, with or without it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from support.kafka_jars import QUICK_JVM

LOCAL = "local[2,2]"
# two Workers of one core and 1 GiB each: one executor JVM per Worker
CLUSTER = "local-cluster[2,1,1024]"
SHIPPED_ZIP = "aiokprod.zip"
# set by the shipped environment's bin/python, so a test sees its workers came through it
SHIPPED_MARK = "AIOKPROD_SHIPPED_ENVIRONMENT"
# The JVMs of the tests' Spark sessions (driver and executors) compile with C1 alone and
# collect with one thread: they live for a module and move a few thousand rows, so C2's
# compiler threads and the parallel collector only spend CPU the two cores lack. Measured on
# test_spark_exactly_once.py and test_spark_cluster.py (quiet machine): 124 s of CPU without,
# 95 s with (wall 224 s and 212 s); test_spark_sink.py 33 s and 23 s. test_examples.py gives
# the Spark examples the same through JDK_JAVA_OPTIONS; the benchmarks keep Spark's defaults.
JAVA_OPTIONS = " ".join(QUICK_JVM)
JVM_CONFIG = {"spark.driver.extraJavaOptions": JAVA_OPTIONS,
              "spark.executor.extraJavaOptions": JAVA_OPTIONS}


def jvm_config(scratch: Path) -> dict[str, str]:
    """``JVM_CONFIG`` with every scratch file of the session's JVMs in ``scratch``: Spark's
    block manager and its spark-* and artifacts-* directories, and the native libraries the
    JVMs unpack. In /tmp a JVM ended by force (a killed driver, a session stopped on a bound)
    left them there for good, a few every run."""
    config = {name: f"{options} -Djava.io.tmpdir={scratch}"
              for name, options in JVM_CONFIG.items()}
    return {**config, "spark.local.dir": str(scratch)}


def require_java() -> None:
    """Spark needs a JVM: skip without one, except under ``CI=true`` where that is a failure."""
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") or (java_home and Path(java_home, "bin", "java").exists()):
        return
    reason = "Spark needs Java 17+ (no `java` on PATH and no JAVA_HOME)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"Spark tests cannot run on CI: {reason}", pytrace=False)
    pytest.skip(reason)


def zip_package(destination: Path) -> Path:
    """A ``--py-files`` zip of the ``aiokprod`` package this process imported.

    Sources only: ``zipimport`` loads no extension module, so the ``.so`` files would be dead
    weight (executors fall back to the pure-Python path, as the docs say for this route).
    """
    import aiokprod

    package = Path(aiokprod.__file__).parent
    with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if (path.is_file() and "__pycache__" not in path.parts
                    and path.suffix in (".py", ".pyi", ".typed")):
                archive.write(path, path.relative_to(package.parent))
    return destination


def pack_environment(destination: Path, driver_dir: Path) -> Path:
    """A ``spark.archives`` tarball whose ``bin/python`` runs this Python, also unpacked in
    ``driver_dir/environment`` for the driver host's Python workers (see the docs)."""
    script = f'#!/bin/sh\nexport {SHIPPED_MARK}="$PWD"\nexec {sys.executable} "$@"\n'
    unpacked = driver_dir / "environment"
    (unpacked / "bin").mkdir(parents=True)
    python = unpacked / "bin" / "python"
    python.write_text(script)
    python.chmod(0o755)
    with tarfile.open(destination, "w:gz") as archive:
        archive.add(unpacked / "bin", arcname="bin")
    return destination


def spark_home_for_cluster(directory: Path) -> Path:
    """A SPARK_HOME made of links to the pyspark wheel's own files, but for a compiled
    ``python/lib/pyspark.zip`` (``compiled_pyspark_zip``).

    local-cluster's Workers start executors with ``$SPARK_HOME/jars`` on the class path and
    write each executor's directory (the shipped files, its stdout/stderr) under
    ``$SPARK_HOME/work``: pointing SPARK_HOME at the installed package would write there, into
    the venv. The wheel has everything else the launch needs (``bin/spark-class``, ``jars/``).
    """
    import pyspark

    package = Path(pyspark.__file__).parent
    _link_entries(package, directory, skip=("work", "__pycache__", "python"))
    _link_entries(package / "python", directory / "python", skip=("lib",))
    lib = directory / "python" / "lib"
    _link_entries(package / "python" / "lib", lib, skip=("pyspark.zip",))
    if not (lib / "pyspark.zip").exists():
        compiled_pyspark_zip(package / "python" / "lib" / "pyspark.zip", lib / "pyspark.zip")
    return directory


def _link_entries(source: Path, target: Path, skip: tuple[str, ...]) -> None:
    """A link in ``target`` to each entry of ``source`` but those named in ``skip``."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name not in skip and not (target / entry.name).exists():
            (target / entry.name).symlink_to(entry)


def compiled_pyspark_zip(source: Path, target: Path) -> None:
    """``source`` (the wheel's pyspark.zip, sources only) with each runtime module's bytecode
    beside it (unchecked hash-based ``.pyc``, which ``zipimport`` takes as it is).

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python workers' path, and
    a module imported from a zip without bytecode is compiled at every import: a Python worker
    started without Spark's daemon then spends 0.9 s of CPU compiling pyspark before it
    connects back to its executor, which waits for it 10 s (hard-coded in Spark 4.2's
    ``PythonWorkerFactory``); on a loaded 2-core machine that was missed. With the bytecode the
    imports take 0.25 s. pyspark's own tests inside the zip are left uncompiled.
    """
    import importlib._bootstrap_external as bootstrap
    import importlib.util
    import warnings

    partial = target.with_name(target.name + ".part")
    to_pyc = bootstrap._code_to_hash_pyc  # type: ignore[attr-defined]
    with zipfile.ZipFile(source) as zin, \
            zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as zout, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's sources raise SyntaxWarnings when compiled
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, data)
            if info.filename.endswith(".py") and "/tests/" not in info.filename:
                code = compile(data, info.filename, "exec", dont_inherit=True)
                zout.writestr(info.filename + "c",
                              to_pyc(code, importlib.util.source_hash(data), False))
    partial.replace(target)


@dataclass
class _Running:
    master: str
    session: Any
    jvm: subprocess.Popen[bytes]
    saved_env: dict[str, str | None]
    # the session's scratch (spark.local.dir, java.io.tmpdir): removed once its JVMs ended
    scratch: Path
    added_path: list[str] = field(default_factory=list)


class SparkSessions:
    """The one SparkSession of this process, by master; switching stops the other first."""

    def __init__(self) -> None:
        self._running: _Running | None = None

    def get(self, master: str, env: dict[str, str] | None = None,
            config: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
        """The running session if it has ``master``, else a new one (the old JVM ended).

        ``env`` is set while the JVM launches and the session lives (the JVM keeps the copy
        it started with; pyspark reads ``PYSPARK_PYTHON`` and ``PYSPARK_SUBMIT_ARGS`` at
        start), then restored. ``cwd`` is the JVM's working directory (this process's only
        while it launches).
        """
        if self._running is not None and self._running.master == master:
            return self._running.session
        self.stop()
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        from aiokprod.spark import KafkaDataSource

        # Spark's Python workers (data source planning, tasks) must run this venv's interpreter
        wanted = {"PYSPARK_PYTHON": sys.executable, **(env or {})}
        saved = {name: os.environ.get(name) for name in wanted}
        os.environ.update(wanted)
        path_before = list(sys.path)
        builder = (
            SparkSession.builder.master(master)
            .appName("aiokprod-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.python.worker.reuse", "true")
        )
        scratch = Path(tempfile.mkdtemp(prefix="aiokprod-spark-"))
        for name, value in {**jvm_config(scratch), **(config or {})}.items():
            builder = builder.config(name, value)
        here = os.getcwd()
        try:
            if cwd is not None:
                os.chdir(cwd)
            session = builder.getOrCreate()
        except BaseException:
            # a JVM that launched but whose SparkContext failed to start is ended too
            gateway = SparkContext._gateway
            if gateway is not None:
                _end_jvm(gateway.proc)
                SparkContext._gateway = None
                SparkContext._jvm = None
            _restore(saved)
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        finally:
            os.chdir(here)
        gateway = SparkContext._gateway
        assert gateway is not None
        # --py-files puts the shipped zip on the driver's sys.path too; taken out at stop
        added = [p for p in sys.path if p not in path_before]
        self._running = _Running(master, session, gateway.proc, saved, scratch, added)
        session.sparkContext.setLogLevel("ERROR")
        session.dataSource.register(KafkaDataSource)
        return session

    def stop(self) -> None:
        """Stop the session and end its JVM by PID (bounded waits), then restore the env."""
        running, self._running = self._running, None
        if running is None:
            return
        from pyspark import SparkContext

        jvm = running.jvm
        try:
            running.session.stop()
            if SparkContext._gateway is not None:
                SparkContext._gateway.shutdown()
        finally:
            _end_jvm(jvm)
            shutil.rmtree(running.scratch, ignore_errors=True)
            SparkContext._gateway = None
            SparkContext._jvm = None
            for entry in running.added_path:
                if entry in sys.path:
                    sys.path.remove(entry)
            _restore(running.saved_env)


def _end_jvm(jvm: subprocess.Popen[bytes]) -> None:
    """End the gateway JVM: it exits when its stdin closes; killed after 30 s."""
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(timeout=30)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait(timeout=10)


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def _spark_sessions() -> Iterator[SparkSessions]:
    sessions = SparkSessions()
    try:
        yield sessions
    finally:
        sessions.stop()


@pytest.fixture(scope="module")
def spark(_spark_sessions: SparkSessions) -> Any:
    """The local[2,2] SparkSession, our data source registered (shared across modules)."""
    require_java()
    return _spark_sessions.get(LOCAL)


@pytest.fixture(scope="module")
def spark_cluster(_spark_sessions: SparkSessions,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local-cluster[2,1,1024] SparkSession for this module: the interpreter shipped by
    ``spark.archives``, aiokprod by ``--py-files``.

    Stopped at the module's end, so its executor JVMs do not outlive the module.
    """
    yield from _cluster_session(_spark_sessions, tmp_path_factory, {})


@pytest.fixture(scope="module")
def spark_cluster_without_daemon(_spark_sessions: SparkSessions,
                                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``spark_cluster`` with ``spark.python.use.daemon=false``: every Python worker is
    started by its executor JVM directly (how Spark always runs them on Windows), so a worker
    outlives a killed executor instead of dying with the daemon."""
    yield from _cluster_session(_spark_sessions, tmp_path_factory,
                                {"spark.python.use.daemon": "false"})


def _cluster_session(sessions: SparkSessions, tmp_path_factory: pytest.TempPathFactory,
                     config: dict[str, str]) -> Iterator[Any]:
    require_java()
    sessions.stop()  # one SparkContext per process: a session of another shape ends first
    base = tmp_path_factory.mktemp("spark-cluster")
    shipped = zip_package(base / SHIPPED_ZIP)
    driver_dir = base / "driver"
    environment = pack_environment(base / "environment.tar.gz", driver_dir)
    env = {
        "SPARK_HOME": str(spark_home_for_cluster(base / "spark-home")),
        # the standalone Master and Workers bind to this address, not the host's name
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the Python of every worker Spark starts: relative, so inside the unpacked archive
        # (executors) or the driver's working directory (the driver host's workers)
        "PYSPARK_PYTHON": "./environment/bin/python",
        # what `spark-submit --py-files aiokprod.zip app.py` does, for a session made in Python
        "PYSPARK_SUBMIT_ARGS": f"--py-files {shipped} pyspark-shell",
    }
    session = sessions.get(CLUSTER, env, {"spark.archives": f"{environment}#environment",
                                          **config}, cwd=driver_dir)
    try:
        yield session
    finally:
        sessions.stop()


def wait_for_executors(session: Any, executors: int = 2) -> Any:
    """``session`` once ``executors`` executors have registered (bounded: 300 s; each is a
    JVM of its own, started by a worker JVM, which a loaded machine can make slow)."""
    tracker = session.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + 300
    # getExecutorInfos lists the driver too
    while len(tracker.getExecutorInfos()) < executors + 1:
        if time.monotonic() > deadline:
            pytest.fail(f"local-cluster: {executors} executors did not register within 300 s",
                        pytrace=False)
        time.sleep(0.2)
    return session

