"""``aiokprod perf`` end to end: a real process, the embedded Tansu broker, the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_perf_json_against_the_embedded_broker() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aiokprod", "perf", "--num-records", "2000", "--record-size",
         "50", "--json", "--producer-config", "linger.ms=2"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["records"] == 2000
    assert report["acked"] == 2000 and report["errors"] == 0 and report["first_error"] is None
    assert report["payload_bytes"] == 2000 * 50
    assert report["records_per_sec"] > 0 and report["mb_per_sec"] > 0
    assert report["cpu_us_per_record"] > 0 and report["max_rss_kib"] > 0
    latency = report["latency_ms"]
    assert set(latency) == {"avg", "p50", "p95", "p99", "p999", "max"}
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p999"] \
        <= latency["max"]
    assert report["latency_samples"] == 2000 // 16  # every 16th record is measured
    assert report["config"]["linger.ms"] == 2 and report["config"]["enable.idempotence"]
    # The producer's own count: the 2000 measured records plus the one warm-up record.
    assert report["metrics"]["producer-metrics:record-send-total"] == 2001
    assert report["metrics"]["producer-metrics:record-error-total"] == 0
    # No progress bar: stderr is not a terminal and --progress was not given.
    assert "[" not in proc.stderr


def test_per_record_benchmark_runs_every_workload_shape(tmp_path: Path) -> None:
    """benchmarks/per_record.py in --quick mode (tiny counts, one round), run the way `make
    bench` runs it (benchmarks/run.py's per-record section, which writes the table
    docs/performance.md shows): the machinery works for both aiokprod paths and every row it
    writes is a run that delivered every record."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick",
         "--skip", "compare", "latency", "window", "memory",
         "--per-record-clients", "aiokprod,aiokprod-py", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| confirm-gather | 16 | 100 B | asyncio |" in (
        tmp_path / "per_record.md").read_text()
    rows = json.loads((tmp_path / "per_record.json").read_text())
    workloads = {(r["client"], r["workload"]) for r in rows}
    for client in ("aiokprod", "aiokprod-py"):
        for workload in ("confirm-gather", "fire-and-forget", "send-many"):
            assert (client, workload) in workloads
    assert {"latency", "queued"} <= {r["workload"] for r in rows}
    assert all(not r.get("failed") and r["errors"] == 0 for r in rows), rows
    assert "| confirm-gather | 16 | 100 B | asyncio |" in proc.stdout


def test_asyncio_floor_benchmark_prints_every_part() -> None:
    """benchmarks/asyncio_floor.py with few futures: every part and the floor are printed, for
    asyncio.Future (the C future beside it only where Cython is installed)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "asyncio_floor.py"), "--records", "2000"],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "asyncio.Future gc on" in proc.stdout
    for part in ("create, kept alive", "RecordMetadata + set_result", "gather (its own part)",
                 "await each (done)", "a coroutine call + await", "= confirm-gather floor"):
        assert part in proc.stdout, proc.stdout
