"""The Prometheus exporter of a migration: what it serves on /metrics, under which names and labels, and how
the throttle reason and stage follow the figures it is fed (no services: fed directly, scraped over HTTP)."""
from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.stages import Stage
from throttle.yielding import WINDOW, Yielding
from monitor.metrics import STAGES, MetricsUnavailable, MigrationMetrics

TABLE = "shop.orders"


@pytest.fixture
def served():
    metrics = MigrationMetrics(TABLE)
    metrics.serve(0)   # any free port on 127.0.0.1
    yield metrics
    metrics.close()


def scrape(metrics: MigrationMetrics) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset({"table": TABLE, **labels}.items()))]


def test_every_metric_is_named_stream_osc_and_labelled_with_the_table(served, feed_every_figure):
    samples = scrape(feed_every_figure(served))
    assert samples and all(name.startswith("stream_osc_") for name, _ in samples)
    assert all(dict(labels)["table"] == TABLE for _, labels in samples)


def test_figures_fed_are_the_figures_served(served):
    served.migration(7, "streamosc-orders-7", "streamosc_orders_7.shop.orders", "streamosc_orders_7.appliers")
    served.stage(Stage.APPLY)
    served.copy(0.5, 1_000, 2, 4)
    served.apply(250, 4_000, 1.5)
    served.cutover_attempt(False, 3_100.0)
    served.cutover_attempt(True, 42.0)
    served.validation(3)
    samples = scrape(served)
    assert value(samples, "stream_osc_migration_info", migration_id="7", connector="streamosc-orders-7",
                 topic="streamosc_orders_7.shop.orders", group="streamosc_orders_7.appliers") == 1
    assert value(samples, "stream_osc_stage_number") == STAGES.index(Stage.APPLY)
    assert value(samples, "stream_osc_stage", stage="apply") == 1
    assert sum(value(samples, "stream_osc_stage", stage=s.value) for s in STAGES) == 1
    assert value(samples, "stream_osc_copy_rows") == 1_000
    assert value(samples, "stream_osc_copy_rows_estimated") == 2_000
    assert value(samples, "stream_osc_copy_progress_ratio") == 0.5
    assert value(samples, "stream_osc_apply_lag_events") == 250
    assert value(samples, "stream_osc_apply_lag_seconds") == 1.5
    assert value(samples, "stream_osc_applied_events") == 4_000
    assert value(samples, "stream_osc_cutover_attempts_total", outcome="rolled_back") == 1
    assert value(samples, "stream_osc_cutover_attempts_total", outcome="swapped") == 1
    assert value(samples, "stream_osc_cutover_blocked_milliseconds") == 42
    assert value(samples, "stream_osc_validation_differences") == 3


def test_throttle_reason_is_served_only_while_throttled(served):
    served.throttle("Threads_running=31 >= 25")
    samples = scrape(served)
    assert value(samples, "stream_osc_throttled") == 1
    assert value(samples, "stream_osc_throttle_reason_info", reason="Threads_running=31 >= 25") == 1
    served.throttle("Threads_running=40 >= 25")
    served.throttle(None)
    samples = scrape(served)
    assert value(samples, "stream_osc_throttled") == 0
    assert not [key for key in samples if key[0] == "stream_osc_throttle_reason_info"]


def test_unknown_rate_and_eta_are_minus_one_not_missing(served):
    served.apply(5, 0, None)
    samples = scrape(served)
    assert value(samples, "stream_osc_apply_lag_seconds") == -1


def test_capture_lag_is_minus_one_until_measured_then_served_and_logged(served, caplog):
    samples = scrape(served)
    assert value(samples, "stream_osc_capture_lag_seconds") == -1
    assert value(samples, "stream_osc_capture_heartbeat_age_seconds") == -1
    served.capture(0.042, 0.7)
    served.apply_backlog(120)
    samples = scrape(served)
    assert value(samples, "stream_osc_capture_lag_seconds") == 0.042
    assert value(samples, "stream_osc_capture_heartbeat_age_seconds") == 0.7
    assert value(samples, "stream_osc_apply_lag_events") == 120
    with caplog.at_level("INFO", logger="stream_osc.metrics"):
        served.log_lag()
    assert [r.fields for r in caplog.records if r.getMessage() == "lag"] == [
        {"apply_lag_events": 120, "apply_lag_s": None, "applied_events": None, "capture_lag_s": 0.042,
         "heartbeat_age_s": 0.7}]


def test_a_taken_port_is_one_clear_error():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(MetricsUnavailable, match=f"cannot serve metrics on 127.0.0.1:{port}: "):
            MigrationMetrics(TABLE).serve(port)


def test_the_backlog_age_counts_from_the_last_figure_fed_by_either_reader():
    metrics = MigrationMetrics(TABLE)
    assert metrics.backlog_age() == float("inf")        # the lag watch reads at once
    metrics.apply(3, 10, None)                          # the coordinator's wait read it
    assert 0 <= metrics.backlog_age() < 1
    metrics.backlog_read_at -= 10
    metrics.apply_backlog(4)                            # the lag watch read it
    assert 0 <= metrics.backlog_age() < 1


def test_copy_figures_not_known_yet_are_minus_one_not_zero(served):
    served.copy(0.0, 0, 0, 4)                # first sample, nothing copied: no rate, no estimate
    samples = scrape(served)
    assert value(samples, "stream_osc_copy_rows_estimated") == -1
    assert value(samples, "stream_osc_copy_rows_per_second") == -1
    assert value(samples, "stream_osc_copy_eta_seconds") == -1
    served.copy_rate.first = (served.copy_rate.first[0] - 10, 0.0, 0)   # the first sample 10 s ago
    served.copy(0.5, 1_000, 2, 4)
    samples = scrape(served)
    assert value(samples, "stream_osc_copy_rows_estimated") == 2_000
    assert 99 < value(samples, "stream_osc_copy_rows_per_second") <= 100
    assert value(samples, "stream_osc_copy_eta_seconds") >= 0


def test_the_latency_copy_and_validation_yield_to_is_served_each_second_it_is_judged(served, feed_every_figure):
    samples = scrape(served)
    for name in ("app_write_latency_milliseconds", "app_write_latency_target_milliseconds",
                 "app_write_latency_baseline_milliseconds", "app_statements_in_flight", "copy_statements_allowed",
                 "copy_batch_time_ratio"):
        assert value(samples, f"stream_osc_{name}") == -1, name   # before any second was judged
    samples = scrape(feed_every_figure(served))
    assert value(samples, "stream_osc_app_write_latency_milliseconds") == 31.0
    assert value(samples, "stream_osc_app_write_latency_target_milliseconds") == 4.0   # twice the 2 ms baseline
    assert value(samples, "stream_osc_app_write_latency_baseline_milliseconds") == 2.0
    assert value(samples, "stream_osc_app_statements_in_flight") == 1.0
    assert value(samples, "stream_osc_copy_statements_allowed") == 2   # halved: 31 ms is over 4 ms, busy
    assert value(samples, "stream_osc_copy_batch_time_ratio") == 0.5

    served.forget_app_latency()   # copy and validation are over: nothing stale is shown
    samples = scrape(served)
    assert value(samples, "stream_osc_app_write_latency_milliseconds") == -1
    assert value(samples, "stream_osc_app_statements_in_flight") == -1


def test_a_failing_latency_display_is_logged_and_not_raised_into_the_probe(caplog):
    metrics = MigrationMetrics(TABLE)
    yielding = Yielding(4, None)   # off: the judgement leaves `allowed` as it is
    metrics.follow(yielding)
    yielding.allowed = "many"   # a value no gauge takes
    for i in range(WINDOW):
        yielding.sample(1.0, 0.1 * i)
    assert "application latency metrics not updated" in caplog.text
