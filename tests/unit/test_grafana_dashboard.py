"""docs/grafana-dashboard.json asks Prometheus only for metrics the exporter serves: a renamed or dropped
metric would leave a panel empty without any error, so every name in every query is checked."""
from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client import generate_latest

from core.stages import Stage
from monitor.metrics import MigrationMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\bstream_osc_[a-z_]+\b")


def served_names(feed_every_figure) -> set[str]:
    """Every sample name the exporter serves once it has been fed each kind of figure."""
    metrics = feed_every_figure(MigrationMetrics("shop.orders"))
    text = generate_latest(metrics.registry).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def queries(node: object) -> list[str]:
    """Every PromQL text in the dashboard: panel targets and template variable queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            elif key == "query" and isinstance(value, str) and "stream_osc_" in value:
                found.append(value)
            else:
                found += queries(value)
    elif isinstance(node, list):
        for item in node:
            found += queries(item)
    return found


def test_dashboard_uses_only_metrics_the_exporter_serves(feed_every_figure):
    dashboard = json.loads(DASHBOARD.read_text())
    used = {name for text in queries(dashboard) for name in METRIC.findall(text)}
    assert used, "the dashboard queries no stream_osc_ metric"
    assert used - served_names(feed_every_figure) == set()


def test_every_panel_queries_stream_osc_metrics_by_table():
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        exprs = [target["expr"] for target in panel["targets"]]
        assert exprs, panel["title"]
        assert all(METRIC.search(e) and 'table=~"$table"' in e for e in exprs), panel["title"]


def test_stage_panel_names_every_stage_by_its_number():
    dashboard = json.loads(DASHBOARD.read_text())
    stage = next(p for p in dashboard["panels"] if p["title"] == "Stage")
    mapped = {int(k): v["text"] for m in stage["fieldConfig"]["defaults"]["mappings"] for k, v in m["options"].items()}
    assert mapped == dict(enumerate(s.value for s in Stage))


def test_no_query_filters_out_a_sentinel():
    """A figure not known is absent from the exporter (no -1 to hide), so no query needs a `>= 0` filter."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert [text for text in queries(dashboard) if re.search(r">=?\s*0\b", text)] == []


def test_units_follow_the_metric_names():
    """A panel over `_seconds` metrics is in seconds (not milliseconds): the exporter serves base units."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        exprs = [target["expr"] for target in panel["targets"]]
        if all(re.search(r"_seconds\b", e) for e in exprs):
            assert panel["fieldConfig"]["defaults"].get("unit") == "s", panel["title"]
