"""The examples run as written: with the embedded broker from the development venv, and against
a real broker from a clean venv holding only what each example's docstring says to install.

The clean-venv runs (``support.example_venv``) are what catches an example that imports
something only the ``test`` extra brings: examples/fastapi_app.py once needed
opentelemetry-sdk and the Prometheus exporter while its instructions installed
``aiokprod[fastapi,otel]``, and failed at startup for every user who followed them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from aiokprod import Producer
from aiokprod.devbroker import TansuBroker
from support.example_venv import ROOT, CleanPython, example_install, prepare, wheel_sources
from support.processes import frozen
from support.reader import read_back
from support.schema_registry_server import RegistryServer
from support.spark_fixtures import JAVA_OPTIONS
from support.uvicorn_app import serve_fastapi_example

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPARK = ("spark_batch.py", "spark_streaming.py")


@pytest.mark.parametrize("name", ["produce.py", "app_lifespan.py", "transactional_copy.py"])
def test_example_runs(name: str) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()


# -- from a clean venv ------------------------------------------------------------------------


def _args(name: str, bootstrap: str, new_topic: Callable[..., str]) -> list[str]:
    """How a command-line example is pointed at the test's broker (its docstring's usage)."""
    if name == "transactional_copy.py":  # it copies what a consumer finds in the source
        source = new_topic(partitions=3)
        asyncio.run(_fill(bootstrap, source, 30))
        return [bootstrap, source, new_topic(partitions=3), f"copier-{source}"]
    return [bootstrap, new_topic(partitions=2)]


async def _fill(bootstrap: str, topic: str, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        await (await producer.send_many(topic, [b"order %d" % i for i in range(count)]))


COMMAND_LINE = ("produce.py", "app_lifespan.py", "transactional_copy.py", *SPARK)
SERVED = ("fastapi_app.py",)  # run by uvicorn, driven over HTTP
REGISTRY = ("schema_registry_avro.py",)  # needs the Schema Registry fixture


def test_every_example_is_run_from_a_clean_venv() -> None:
    """A new example must name its install in its docstring and be added here."""
    names = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert names == sorted(COMMAND_LINE + SERVED + REGISTRY)
    for name in names:
        example_install(EXAMPLES / name)


def test_the_examples_wheel_is_built_from_every_source_the_package_tracks() -> None:
    """What keys the cached wheel of the work tree, and is copied for its build, holds every
    file git tracks in the package: without the native extension's .pxi files, a change to one
    would keep the key, and the examples would run a wheel of the code before it."""
    tracked = subprocess.run(["git", "ls-files", "aiokprod"], cwd=ROOT, capture_output=True,
                             text=True, check=False, timeout=60)
    if tracked.returncode != 0:
        pytest.skip(f"not a git work tree: {tracked.stderr.strip()}")
    listed = {str(path.relative_to(ROOT)) for path in wheel_sources()}
    assert set(tracked.stdout.split()) - listed == set()


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this run installs the work tree's wheel (once, shared by the examples)."""
    return tmp_path_factory.mktemp("examples")


def _require_java() -> None:
    if shutil.which("java") or Path(os.environ.get("JAVA_HOME", "/nonexistent"),
                                    "bin", "java").exists():
        return
    reason = "the Spark examples need Java 17+ (no `java` on PATH and no JAVA_HOME)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.mark.parametrize("name", COMMAND_LINE)
def test_example_runs_from_a_clean_venv(name: str, site_dir: Path, tansu: TansuBroker,
                                        new_topic: Callable[..., str],
                                        tmp_path: Path) -> None:
    if name in SPARK:
        _require_java()
    clean = prepare(EXAMPLES / name, site_dir)
    args = _args(name, tansu.bootstrap, new_topic)
    # Spark's JVM as the test sessions run it (C1, serial collector: spark_fixtures), given
    # through the `java` launcher's environment, not the example: the two Spark examples'
    # machine CPU went from 43 s to 31 s (quiet machine); what they do and print is the same.
    # (its scratch in the test's directory, not in /tmp)
    jvm = {"JDK_JAVA_OPTIONS": f"{JAVA_OPTIONS} -Djava.io.tmpdir={tmp_path}"} \
        if name in SPARK else {}
    # 600 s: a Spark example takes 15-50 s; a loaded pair with a `make demo` beside it (three
    # suites' work on two cores) took the streaming one past 240 s
    done = subprocess.run([clean.python, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=600, check=False, cwd=tmp_path,
                          env=clean.env(**jvm), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, \
        f"pip install {' '.join(clean.install)}; python {name}:\n{done.stderr[-3000:]}"
    out = done.stdout.strip()
    assert out, done.stderr[-2000:]
    if name in SPARK:
        written = int(out.splitlines()[-1].split()[1])  # "wrote N rows to TOPIC"
        records = read_back(tansu.bootstrap, args[1], expected=written, timeout=60,
                            settle=0.3)
        assert len(records) >= written > 0


def test_schema_registry_example_runs_from_a_clean_venv(
        site_dir: Path, tansu: TansuBroker, new_topic: Callable[..., str],
        schema_registry: RegistryServer, tmp_path: Path) -> None:
    clean = prepare(EXAMPLES / "schema_registry_avro.py", site_dir)
    topic = new_topic()
    done = subprocess.run(
        [clean.python, str(EXAMPLES / "schema_registry_avro.py"), tansu.bootstrap, topic,
         schema_registry.url], capture_output=True, text=True, timeout=120, check=False,
        cwd=tmp_path, stdin=subprocess.DEVNULL,
        env=clean.env(SCHEMA_REGISTRY_USER_INFO=schema_registry.user_info))
    assert done.returncode == 0, \
        f"pip install {' '.join(clean.install)}; python schema_registry_avro.py:\n" \
        f"{done.stderr[-3000:]}"
    assert "100 orders" in done.stdout
    assert len(read_back(tansu.bootstrap, topic, expected=100)) == 100


@contextmanager
def _uvicorn(clean: CleanPython, bootstrap: str, cwd: Path) -> Iterator[str]:
    """The FastAPI example under uvicorn from the clean venv; ended by PID and reaped."""
    with serve_fastapi_example(clean.python, env=clean.env(KAFKA_BOOTSTRAP_SERVERS=bootstrap),
                               log_path=cwd / "uvicorn.log", cwd=cwd,
                               what=f"pip install {' '.join(clean.install)}") as (url, _):
        yield url


def test_fastapi_example_serves_from_a_clean_venv_and_bounds_a_stalled_request(
    site_dir: Path, tansu_factory: Callable[..., TansuBroker], tmp_path: Path
) -> None:
    # the example's own defaults (no AIOKPROD_* overrides): a request while the broker is
    # stalled is answered 503 within delivery.timeout.ms (5 s), not the producer default's 120 s
    clean = prepare(EXAMPLES / "fastapi_app.py", site_dir)
    broker = tansu_factory()
    broker.create_topic("events", 1)
    assert broker.pid is not None
    with _uvicorn(clean, broker.bootstrap, tmp_path) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        # the example's 2 s max.block.ms covers the first metadata fetch, and its 5 s delivery
        # timeout the first acknowledgement: on a loaded machine the first request may get
        # its 503, so it is asked again until the producer is warm (that is not the test)
        deadline = time.monotonic() + 60
        while (response := client.post("/events/events", content=b"hello",
                                        headers={"X-Key": "k"})).status_code != 200:
            assert response.status_code == 503 and time.monotonic() < deadline, response.text
            time.sleep(0.5)
        assert response.json()["topic"] == "events"
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert "kafka_producer_record_send_total" in metrics.text
        with frozen(broker.pid):
            started = time.monotonic()
            stalled = client.post("/events/events", content=b"stalled",
                                  headers={"Idempotency-Key": "stalled-1"})
            took = time.monotonic() - started
            ready = client.get("/readyz")
        assert stalled.status_code == 503, stalled.text
        assert stalled.headers.get("Retry-After") == "1"  # safe: it carries a key
        assert ready.status_code == 503, ready.text
        # delivery.timeout.ms (5 s) bounds it; unbounded, it would wait out the client's 60 s
        assert took < 5.0 + 10.0, took
