"""The Prometheus endpoint of a real migration: scraped while `stream-osc migrate --metrics-port` runs under
write traffic, it shows the stage moving through copy and apply to the end and the apply lag changing, and every
series it serves follows Prometheus' naming (base units, counters ending in `_total`, no `_created`, no
negative sentinel) and is documented in docs/observability.md."""
from __future__ import annotations

import http.client
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.db import query
from core.spec import helper_table_name
from demo.traffic import Traffic, create_sample_table
from monitor.metrics import STAGES
from stack.process import free_ports
from tests.integration.helpers import db_conn, scrape, start_cli

pytestmark = pytest.mark.integration

DB = "metrics"
OBSERVABILITY = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def sample_types(port: int) -> dict[str, str]:
    """{sample name: its family's type} of one scrape of /metrics ({} while nothing answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
        return {}
    return {s.name: family.type for family in text_string_to_metric_families(text) for s in family.samples}


def documented_series() -> set[str]:
    """The series names docs/observability.md's metric table lists (first column; its second is the type)."""
    rows = [line.split(" | ") for line in OBSERVABILITY.read_text().splitlines() if line.startswith("| `stream_osc_")]
    return {name for row in rows if row[1].startswith(("gauge", "counter"))
            for name in re.findall(r"`(stream_osc_[a-z_]+)", row[0])}


def test_metrics_endpoint_shows_stage_and_lag_moving_during_a_migration(endpoints, tmp_path):
    table = "scraped"
    qualified = f"{DB}.{table}"
    conn = db_conn(endpoints)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {DB}.{helper_table_name(table, 'old')}")
    original = create_sample_table(conn, DB, table, rows=20_000, seed=41)
    traffic = Traffic(endpoints.mysql, DB, table, original, seed=41, writers=2, rate=None)
    port = free_ports(1)[0]
    traffic.start()
    proc = start_cli("migrate", "--algorithm", "copy", "--table", qualified, "--alter", "ADD COLUMN flag INT NULL",
                     "--copy-workers", "2", "--chunk-size", "2000", "--batch-size", "200", "--target-batch-time", "0",
                     "--partitions", "2", "--metrics-port", str(port),
                     "--quiet", log=tmp_path / "cli.log")
    stages: list[int] = []
    lags: list[float] = []
    latencies: list[float] = []   # the application's write latency, as copy and validation judged it
    names: set[str] = set()
    negative: set[tuple[str, float]] = set()   # a gauge below zero: a sentinel in place of "not known"
    types: dict[str, str] = {}
    try:
        while proc.poll() is None:
            time.sleep(0.1)   # the scrape interval
            types |= sample_types(port)
            samples = scrape(port)
            if samples is None:
                continue
            names |= {name for name, _ in samples}
            negative |= {(name, v) for (name, _), v in samples.items() if v < 0}
            stage = samples.get(("stream_osc_stage_number", (("table", qualified),)))
            if stage is not None and (not stages or stages[-1] != stage):
                stages.append(stage)
            lag = samples.get(("stream_osc_apply_lag_events", (("table", qualified),)))
            if lag is not None and (not lags or lags[-1] != lag):
                lags.append(lag)
            judged = samples.get(("stream_osc_app_write_latency_seconds", (("table", qualified),)))
            if judged is not None:
                latencies.append(judged)
        assert proc.wait() == 0, (tmp_path / "cli.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        stats = traffic.stop()

    seen = [STAGES[int(n)].value for n in stages]
    assert seen == sorted(seen, key=lambda s: STAGES.index(s)), seen       # the stage only moves forward
    assert {"copy", "cutover"} <= set(seen), seen   # apply runs during the copy: its own stage may pass unseen
    assert len(lags) >= 2 and max(lags) > 0, lags                           # lag was seen at more than one value
    assert all(name.startswith("stream_osc_") for name in names), names
    assert latencies and all(s > 0 for s in latencies), "the latency copy and validation yield to was not served"
    # Prometheus' naming: base units, counters as counters with _total and without _created, no sentinel value
    assert not [name for name in names if "millisecond" in name], names
    assert not [name for name in names if name.endswith("_created")], names
    assert negative == set(), negative
    counters = {name for name, kind in types.items() if kind == "counter"}
    assert {"stream_osc_copy_rows_total", "stream_osc_applied_events_total",
            "stream_osc_cutover_attempts_total"} <= counters, counters
    assert all(name.endswith("_total") for name in counters), counters
    assert not [name for name in names - counters if name.endswith("_total")], names
    assert names - documented_series() == set(), "served, not in docs/observability.md's table"
    # serving metrics costs no write: the final table holds every acknowledged write and every untouched row
    try:
        assert stats.failures == [], stats.failures[:5]
        result = traffic.check(conn)
    finally:
        conn.close()
    assert result.mismatches == [], (len(result.mismatches), result.mismatches[:5])
    assert result.keys_written > 0 and result.rows > 15_000, result
