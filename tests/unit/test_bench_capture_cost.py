"""What the capture alone costs the application (bench/capture_cost.py) is reported against the load alone of the
same repetition, so that a machine slowing down between repetitions does not pass for the capture's cost; what the
database paid is per row the load changed, from the server's own counters."""
from __future__ import annotations

from bench.capture_cost import PHASES, Phase, cost_per_change, report

NO_COST = {"db_cpu_ms": None, "row_writes": None, "binlog_bytes": None}


def phases(*p99s: float) -> list[Phase]:
    return [Phase(name, 1000.0, p99, {"cpu_cores_kafka": 0.1 * i}, NO_COST)
            for i, (name, p99) in enumerate(zip(PHASES, p99s))]


def row(table: str, phase: str) -> list[str]:
    return next(line for line in table.splitlines() if line.startswith(f"| {phase} |")).strip("|").split(" | ")


def test_each_phase_is_a_ratio_to_the_mean_of_its_own_repetitions_two_load_alone_phases():
    fast, slow = phases(4.0, 40.0, 12.0, 30.0, 6.0), phases(20.0, 100.0, 60.0, 80.0, 20.0)
    table = report([fast, slow])
    assert row(table, "in sync")[3].strip() == "8.0, 5.0"         # 40 / mean(4, 6); 100 / mean(20, 20)
    assert row(table, "capture only")[3].strip() == "2.4, 3.0"
    assert row(table, "pt-osc triggers")[3].strip() == "6.0, 4.0"
    assert row(table, "alone")[3].strip() == "0.8, 1.0"


def test_the_tables_figures_are_medians_over_repetitions_and_a_role_never_seen_is_a_dash():
    table = report([phases(4.0, 40.0, 12.0, 9.0, 6.0), phases(20.0, 100.0, 60.0, 9.0, 20.0),
                    phases(8.0, 50.0, 30.0, 9.0, 8.0)])
    cells = row(table, "in sync")
    assert cells[2] == "50.0"                     # median of 40, 100, 50 (their mean is 63.3)
    assert cells[6] == "0.10"                     # kafka cores of the phase
    assert cells[4] == "–"                        # no database figure was recorded
    assert [c.strip() for c in cells[-3:]] == ["–", "–", "–"]


def test_the_database_pays_per_row_the_load_changed():
    before = {"handler_write": 100, "handler_update": 50, "handler_delete": 10,
              "binlog_bytes_written": 1_000}
    after = {"handler_write": 300, "handler_update": 250, "handler_delete": 110,
             "binlog_bytes_written": 41_000}
    assert cost_per_change(before, after, 2.0, 200) == {"db_cpu_ms": 10.0, "row_writes": 2.5, "binlog_bytes": 200.0}


def test_a_server_without_a_binlog_counter_and_a_phase_without_changes_are_unknown_not_zero():
    counters = {"handler_write": 1, "handler_update": 1, "handler_delete": 1}
    assert cost_per_change(counters, counters, None, 10)["binlog_bytes"] is None
    assert cost_per_change(counters, counters, 1.0, 0) == NO_COST
