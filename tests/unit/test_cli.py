"""``aiokprod perf``: argument parsing, --producer-config parsing, and the measurement maths."""

from __future__ import annotations

import asyncio
import io
import math
from pathlib import Path

import pytest

from aiokprod._perf import (
    LatencyRecorder,
    LatencyStats,
    PerfResult,
    Progress,
    Throttle,
    format_report,
    make_payloads,
    parse_producer_config,
    percentile,
    select_key_metrics,
)
from aiokprod.cli import build_parser, main, perf_producer_config

# -- argument parsing ------------------------------------------------------------------------


def test_perf_defaults() -> None:
    args = build_parser().parse_args(["perf"])
    assert args.bootstrap_servers is None  # the embedded broker
    assert args.num_records == 100_000
    assert args.record_size is None and args.payload_file is None  # 100 bytes, chosen later
    assert args.throughput == -1
    assert args.idempotence is None and args.acks is None and args.linger_ms is None
    assert args.json is False and args.progress is None
    assert perf_producer_config(args) == {}  # the producer's own (Java) defaults apply


def test_perf_flags_become_java_names() -> None:
    args = build_parser().parse_args([
        "perf", "--bootstrap-servers", "h:1", "--topic", "t", "--num-records", "10",
        "--record-size", "7", "--throughput", "500", "--acks", "1", "--compression-type", "lz4",
        "--linger-ms", "3", "--batch-size", "1000", "--no-idempotence", "--json",
    ])
    assert (args.bootstrap_servers, args.topic, args.num_records, args.record_size) == (
        "h:1", "t", 10, 7)
    assert args.throughput == 500 and args.json
    assert perf_producer_config(args) == {
        "acks": "1", "compression.type": "lz4", "linger.ms": "3", "batch.size": "1000",
        "enable.idempotence": "false"}


def test_dedicated_flags_win_over_producer_config() -> None:
    args = build_parser().parse_args([
        "perf", "--producer-config", "linger.ms=50", "max.in.flight.requests.per.connection=10",
        "--linger-ms", "2", "--producer-config", "retries=3", "--idempotence"])
    assert perf_producer_config(args) == {
        "linger.ms": "2", "max.in.flight.requests.per.connection": "10", "retries": "3",
        "enable.idempotence": "true"}


@pytest.mark.parametrize("argv", [
    ["perf", "--record-size", "10", "--payload-file", "x"],  # mutually exclusive
    ["perf", "--num-records", "0"],
    ["perf", "--record-size", "-1"],
    ["perf", "--acks", "2"],
    ["perf", "--compression-type", "brotli"],
])
def test_perf_rejects_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_demo_subcommand_still_parses() -> None:
    args = build_parser().parse_args(["demo", "--count", "3"])
    assert args.count == 3 and args.topic == "aiokprod-demo"


# -- --producer-config -----------------------------------------------------------------------


def test_parse_producer_config() -> None:
    assert parse_producer_config(["linger.ms=5", " acks = all ", "client.id=a=b"]) == {
        "linger.ms": "5", "acks": "all", "client.id": "a=b"}
    assert parse_producer_config(["linger.ms=5", "linger.ms=5"]) == {"linger.ms": "5"}


@pytest.mark.parametrize(("item", "named"), [
    ("linger.ms", "'linger.ms'"),  # no '='
    ("=5", "'=5'"),  # no key
])
def test_parse_producer_config_errors_name_the_key(item: str, named: str) -> None:
    with pytest.raises(ValueError, match="--producer-config") as exc:
        parse_producer_config([item])
    assert named in str(exc.value)


def test_parse_producer_config_conflicting_duplicate_names_the_key() -> None:
    with pytest.raises(ValueError, match="'batch.size' given twice"):
        parse_producer_config(["batch.size=1", "batch.size=2"])


@pytest.mark.parametrize(("item", "named"), [
    ("lingr.ms=5", "lingr.ms"),  # unknown key: the config layer suggests linger.ms
    ("linger.ms=soon", "linger.ms"),  # bad value
    ("bootstrap.servers=h:1", "bootstrap.servers"),  # has its own flag
])
def test_perf_reports_bad_producer_config_before_starting_a_broker(
        item: str, named: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "--producer-config", item]) == 2
    err = capsys.readouterr().err
    assert named in err and err.startswith("aiokprod perf: error:")


# -- percentiles and latency statistics ------------------------------------------------------


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 95) == 95
    assert percentile(values, 99) == 99
    assert percentile(values, 99.9) == 100
    assert percentile(values, 100) == 100
    assert percentile(values, 0.5) == 1
    assert percentile([7.0], 99.9) == 7.0
    assert percentile([1.0, 2.0], 50) == 1.0  # never interpolated: an observed value
    assert math.isnan(percentile([], 50))


@pytest.mark.parametrize("q", [0, -1, 100.1])
def test_percentile_rejects_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0], q)


def test_latency_stats_in_milliseconds() -> None:
    seconds = [0.004, 0.001, 0.003, 0.002]  # unsorted on purpose
    stats = LatencyStats.of(seconds)
    assert stats.count == 4
    assert stats.avg == pytest.approx(2.5)
    assert (stats.p50, stats.p99, stats.max) == pytest.approx((2.0, 4.0, 4.0))
    assert math.isnan(LatencyStats.of([]).p99)


async def test_latency_recorder_counts_successes_and_failures() -> None:
    loop = asyncio.get_running_loop()
    recorder = LatencyRecorder()
    ok, failed, cancelled = loop.create_future(), loop.create_future(), loop.create_future()
    for future in (ok, failed, cancelled):
        recorder.track(future, 0.0)
    ok.set_result("md")
    failed.set_exception(RuntimeError("boom"))
    cancelled.cancel()
    await asyncio.sleep(0)  # done callbacks run on the next loop iteration
    assert recorder.acked == 3 and recorder.errors == 2 and len(recorder.latencies) == 1
    assert isinstance(recorder.first_error, RuntimeError)


def test_throttle_delays_only_when_ahead() -> None:
    now = [100.0]
    throttle = Throttle(1000, clock=lambda: now[0])  # 1 record per ms
    assert throttle.delay(0) == 0
    assert throttle.delay(10) == pytest.approx(0.010)  # 10 records at t=0: wait 10 ms
    now[0] += 0.0105
    assert throttle.delay(10) == 0  # behind schedule: go
    assert throttle.delay(11) == 0  # 0.5 ms ahead: below the 1 ms sleep granularity
    with pytest.raises(ValueError):
        Throttle(0)


# -- payloads, metrics, report ---------------------------------------------------------------


def test_make_payloads(tmp_path: Path) -> None:
    [payload] = make_payloads(16, None)
    assert len(payload) == 16 and payload.isupper()
    file = tmp_path / "p.txt"
    file.write_bytes(b"a\nbb\n\nccc\n")
    assert make_payloads(None, str(file)) == [b"a", b"bb", b"ccc"]
    assert make_payloads(None, str(file), delimiter="b") == [b"a\n", b"\n\nccc\n"]
    file.write_bytes(b"\n\n")
    with pytest.raises(ValueError, match="holds no records"):
        make_payloads(None, str(file))
    with pytest.raises(ValueError, match="exactly one"):
        make_payloads(1, str(file))


def test_select_key_metrics_keeps_the_producer_group_in_order() -> None:
    metrics = {
        "producer-metrics:batch-size-avg": 10.0,
        "producer-metrics:record-send-rate{client-id=c}": 5.0,
        "producer-topic-metrics:record-send-rate{client-id=c,topic=t}": 5.0,
        "producer-node-metrics:request-latency-avg{client-id=c,node-id=node-1}": 1.0,
        "producer-metrics:io-ratio": 0.1,
    }
    assert list(select_key_metrics(metrics)) == [
        "producer-metrics:record-send-rate{client-id=c}", "producer-metrics:batch-size-avg"]


def test_format_report_and_json_fields() -> None:
    result = PerfResult(
        topic="t", bootstrap_servers="h:1", records=1000, errors=0, first_error=None,
        payload_bytes=100_000, elapsed_s=0.5, cpu_s=0.25, max_rss_kib=1024,
        latency=LatencyStats.of([0.001, 0.002]), config={"linger.ms": 5},
        metrics={"producer-metrics:record-send-total": 1000.0})
    text = format_report(result)
    assert text.startswith("1,000 records sent, 2,000.0 records/sec (0.20 MB/sec)")
    assert "p99.9" in text and "250.00 µs/record" in text
    assert "producer-metrics:record-send-total" in text
    doc = result.as_dict()
    assert doc["records_per_sec"] == 2000 and doc["mb_per_sec"] == pytest.approx(0.2)
    assert set(doc["latency_ms"]) == {"avg", "p50", "p95", "p99", "p999", "max"}
    assert doc["acked"] == 1000 and doc["latency_samples"] == 2


def test_a_windowed_rate_of_a_short_run_is_explained_beside_the_run_rate() -> None:
    # make demo: 100,000 records in 0.2 s printed record-send-rate 3,311 beside 498,198
    # records/s, because Java's rate divides by at least one 30 s window
    def report(elapsed_s: float) -> str:
        return format_report(PerfResult(
            topic="t", bootstrap_servers="h:1", records=100_000, errors=0, first_error=None,
            payload_bytes=10_000_000, elapsed_s=elapsed_s, cpu_s=0.2, max_rss_kib=1024,
            latency=LatencyStats.of([0.001]),
            config={"metrics.sample.window.ms": 30000, "metrics.num.samples": 2},
            metrics={"producer-metrics:record-send-rate": 100_000 / 30}))

    short = report(0.2)
    assert "record-send-rate" in short
    assert "per second over the last 30 s at least" in short
    assert "this 0.20 s run sent 500,000 records/sec" in short
    assert "per second over" not in report(60.0)  # a run longer than the window reads true


def test_progress_bar_draws_in_place() -> None:
    stream = io.StringIO()
    progress = Progress(100, stream, interval=0)
    progress.update(50, 25)
    progress.close(100, 100)
    out = stream.getvalue()
    assert out.startswith("\r[") and "acked 25/100" in out and out.endswith("\n")
    assert "100.0%" in out
