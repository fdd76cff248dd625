"""The Prometheus exporter of a migration: what it serves on /metrics, under which names and labels, and how
the throttle reason and stage follow the figures it is fed (no services: fed directly, scraped over HTTP)."""
from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.stages import Stage
from throttle.yielding import WINDOW, Yielding
from monitor.metrics import STAGES, MetricsUnavailable, MigrationMetrics

TABLE = "shop.orders"
OBSERVABILITY = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


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
    assert value(samples, "stream_osc_copy_rows_total") == 1_000
    assert value(samples, "stream_osc_copy_rows_estimated") == 2_000
    assert value(samples, "stream_osc_copy_progress_ratio") == 0.5
    assert value(samples, "stream_osc_apply_lag_events") == 250
    assert value(samples, "stream_osc_apply_lag_seconds") == 1.5
    assert value(samples, "stream_osc_applied_events_total") == 4_000
    assert value(samples, "stream_osc_cutover_attempts_total", outcome="rolled_back") == 1
    assert value(samples, "stream_osc_cutover_attempts_total", outcome="swapped") == 1
    assert value(samples, "stream_osc_cutover_blocked_seconds") == 0.042
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


def names(samples) -> set[str]:
    return {name for name, _ in samples}


def test_names_follow_prometheus_conventions(served, feed_every_figure):
    """Base units, counters as counters ending in _total, no automatic _created series (prometheus.io naming)."""
    feed_every_figure(served)
    families = {family.name: family for family in served.registry.collect()}
    served_names = names(scrape(served))
    assert not [name for name in served_names if "millisecond" in name], served_names
    assert not [name for name in served_names if name.endswith("_created")], served_names
    counters = {s.name for f in families.values() if f.type == "counter" for s in f.samples}
    assert counters == {"stream_osc_copy_rows_total", "stream_osc_applied_events_total",
                        "stream_osc_cutover_attempts_total"}
    assert not [name for name in served_names - counters if name.endswith("_total")], served_names


def test_counters_only_grow_and_a_chunk_copied_again_counts_again(served):
    served.copy(0.5, 2_000, 2, 4)
    served.copy(0.4, 1_500, 1, 4)      # a chunk copied again (its lease lost): the sum of the chunks falls
    served.copy(0.6, 2_500, 2, 4)      # its 500 rows again, and 500 new ones
    served.apply(0, 100, None)
    served.apply(0, 40, None)          # the applied count read lower (no counter ever goes down)
    served.apply(0, 140, None)
    samples = scrape(served)
    assert value(samples, "stream_osc_copy_rows_total") == 3_000
    assert value(samples, "stream_osc_applied_events_total") == 200


def test_unknown_figures_are_absent_not_a_sentinel(served):
    served.apply(5, 0, None)
    samples = scrape(served)
    assert "stream_osc_apply_lag_seconds" not in names(samples)
    assert value(samples, "stream_osc_apply_lag_events") == 5
    assert all(v >= 0 for v in samples.values()), samples
    served.apply(5, 0, 2.5)
    served.apply(5, 0, None)            # known, then not known again: removed, never left stale
    assert "stream_osc_apply_lag_seconds" not in names(scrape(served))


def test_every_served_series_is_documented(served, feed_every_figure):
    rows = [line.split(" | ") for line in OBSERVABILITY.read_text().splitlines() if line.startswith("| `stream_osc_")]
    documented = {name for row in rows if row[1].startswith(("gauge", "counter"))   # the table of metrics
                  for name in re.findall(r"`(stream_osc_[a-z_]+)", row[0])}
    assert names(scrape(feed_every_figure(served))) - documented == set()


def test_capture_lag_is_absent_until_measured_then_served_and_logged(served, caplog):
    samples = scrape(served)
    assert "stream_osc_capture_lag_seconds" not in names(samples)
    assert "stream_osc_capture_heartbeat_age_seconds" not in names(samples)
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


def test_copy_figures_not_known_yet_are_absent_not_zero(served):
    served.copy(0.0, 0, 0, 4)                # first sample, nothing copied: no rate, no estimate
    samples = scrape(served)
    assert {"stream_osc_copy_rows_estimated", "stream_osc_copy_rows_per_second",
            "stream_osc_copy_eta_seconds"} & names(samples) == set()
    assert value(samples, "stream_osc_copy_rows_total") == 0
    served.copy_rate.first = (served.copy_rate.first[0] - 10, 0.0, 0)   # the first sample 10 s ago
    served.copy(0.5, 1_000, 2, 4)
    samples = scrape(served)
    assert value(samples, "stream_osc_copy_rows_estimated") == 2_000
    assert 99 < value(samples, "stream_osc_copy_rows_per_second") <= 100
    assert value(samples, "stream_osc_copy_eta_seconds") >= 0


def test_the_latency_copy_and_validation_yield_to_is_served_each_second_it_is_judged(served, feed_every_figure):
    judged = {f"stream_osc_{name}" for name in (
        "app_write_latency_seconds", "app_write_latency_target_seconds", "app_write_latency_baseline_seconds",
        "app_statements_in_flight", "copy_statements_allowed", "copy_batch_time_ratio")}
    assert judged & names(scrape(served)) == set()   # before any second was judged
    samples = scrape(feed_every_figure(served))
    assert value(samples, "stream_osc_app_write_latency_seconds") == 0.031
    assert value(samples, "stream_osc_app_write_latency_target_seconds") == 0.004   # twice the 2 ms baseline
    assert value(samples, "stream_osc_app_write_latency_baseline_seconds") == 0.002
    assert value(samples, "stream_osc_app_statements_in_flight") == 1.0
    assert value(samples, "stream_osc_copy_statements_allowed") == 2   # halved: 31 ms is over 4 ms, busy
    assert value(samples, "stream_osc_copy_batch_time_ratio") == 0.5

    served.forget_app_latency()   # copy and validation are over: nothing stale is shown
    assert judged & names(scrape(served)) == set()


def test_a_failing_latency_display_is_logged_and_not_raised_into_the_probe(caplog):
    metrics = MigrationMetrics(TABLE)
    yielding = Yielding(4, None)   # off: the judgement leaves `allowed` as it is
    metrics.follow(yielding)
    yielding.allowed = "many"   # a value no gauge takes
    for i in range(WINDOW):
        yielding.sample(1.0, 0.1 * i)
    assert "application latency metrics not updated" in caplog.text
