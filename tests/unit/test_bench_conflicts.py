"""The benchmark attributes the application's deadlocks from the server's reports and counts its refused transactions
by error code (bench/conflicts.py, bench/load.py), and reports them per tool, with the warm-up apart (bench/report.py).

sysbench_transactions_alone.log is the embedded MariaDB's report of a deadlock between two sessions of the
benchmark's load script (bench/oltp_write_only_attributed.lua) on a 20-row table, captured with the lines the
script printed (its sessions 4391 and 4403 among them).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench import run as bench_run
from bench.config import parse_args
from bench.conflicts import ERROR_LOG_ENV, ErrorLog, attribute, error_log_of, expected_alone, not_attributed
from bench.load import SysbenchLoad
from bench.report import summarise, write_markdown
from bench.run import UNRECORDED_REP, Schedule

DATA = Path(__file__).parent / "data" / "deadlocks"
SYSBENCH_ALONE = (DATA / "sysbench_transactions_alone.log").read_text()
TOOL_READ = (DATA / "tool_read_beside_applications.log").read_text()
TABLE = ("dlxprobe", "sbtest1")
LOAD = {4391, 4403}


# the load's output -------------------------------------------------------------------------------------
def load_with(lines: list[tuple[float, str]]) -> SysbenchLoad:
    load = SysbenchLoad(None, "sbtest", 1000, 10, 2)
    for at, line in lines:
        load.take(line + "\n", at)
    return load


def test_the_load_tells_its_sessions_and_each_refused_transactions_code_apart_from_its_reports():
    load = load_with([(0.1, "bench-load: session 4391"), (0.1, "bench-load: session 4403"),
                      (0.2, "Threads started!"),
                      (1.2, "bench-load: ignored error 1213"),
                      (1.5, "[ 1s ] thds: 2 tps: 441.56 qps: 2981.03 (r/w/o: 0.00/1944.06/1036.97) "
                            "lat (ms,99%): 116.80 err/s: 3.00 reconn/s: 0.00"),
                      (1.7, "bench-load: ignored error 1205"),
                      (2.5, "bench-load: ignored error 1213"),
                      (9.0, "bench-load: ignored error 1205")])
    assert load.sessions == LOAD
    assert load.lines == [(1, 441.56, 116.8, 3.0)]
    assert "bench-load" not in "\n".join(load.output)   # the tail shown when sysbench dies is its own
    window = load.window(0.5, 3.0)
    assert (window.deadlock_victims, window.lock_wait_timeouts) == (2, 1)
    figures = window.as_dict()
    assert figures["app_deadlock_victims"] == 2 and figures["app_lock_wait_timeouts"] == 1
    assert figures["app_errors"] == 3   # sysbench's err/s, every code together
    assert load.window(0.5, 10.0).as_dict()["app_lock_wait_timeouts"] == 2
    assert load_with([(1.0, "bench-load: ignored error 1146")]).window(0.0, 2.0).as_dict()["app_other_error_codes"] \
        == {"1146": 1}


def test_lock_wait_timeouts_of_the_load_alone_are_scaled_to_the_runs_length():
    assert expected_alone(2, 20.0, 50.0) == 5.0
    assert expected_alone(0, 20.0, 50.0) == 0.0
    assert expected_alone(3, 0.0, 50.0) is None


# attribution -----------------------------------------------------------------------------------------
def test_a_deadlock_between_the_loads_own_sessions_is_the_applications_alone():
    figures = attribute(SYSBENCH_ALONE, "pt-osc", LOAD, TABLE)
    assert figures == {"deadlocks_tool_app_victim": 0, "deadlocks_app_alone": 1, "deadlocks_other": 0}


def test_for_pt_osc_any_session_not_the_loads_is_the_tools():
    figures = attribute(SYSBENCH_ALONE, "pt-osc", {4391}, TABLE)   # 4403 as if it were pt-osc's copy
    assert figures["deadlocks_tool_app_victim"] == 1   # 4391 was rolled back
    [example] = figures["deadlocks_tool_app_victim_examples"]
    assert "ROLLED BACK application session 4391: DELETE FROM sbtest1 WHERE id=4" in example
    assert "pt-osc session 4403" in example
    # the other way round the tool's transaction gave way
    assert attribute(SYSBENCH_ALONE, "gh-ost", {4403}, TABLE)["deadlocks_other"] == 1


def test_for_stream_osc_only_a_tagged_statement_is_the_tools():
    # an untagged session outside the load (the benchmark's own probe, say) is neither's
    figures = attribute(SYSBENCH_ALONE, "stream-osc", {4391}, TABLE)
    assert figures["deadlocks_other"] == 1 and figures["deadlocks_tool_app_victim"] == 0
    assert "neither's session 4403" in figures["deadlocks_other_examples"][0]


def test_a_tagged_read_beside_the_loads_session_is_counted_by_who_was_rolled_back():
    # on dlcap.orders the server rolled back the application's DELETE (session 429) against the tagged read (431)
    figures = attribute(TOOL_READ, "stream-osc", {429}, ("dlcap", "orders"))
    assert (figures["deadlocks_tool_app_victim"], figures["deadlocks_other"]) == (1, 0)
    assert "ROLLED BACK application session 429: DELETE FROM dlcap.orders WHERE id = 100" in \
        figures["deadlocks_tool_app_victim_examples"][0]
    assert "stream-osc session 431: /* stream-osc */ SELECT id FROM dlcap.orders" in \
        figures["deadlocks_tool_app_victim_examples"][0]
    # on osc_gives_way.hot the server rolled back an UPDATE (440): the application's if the load opened its session
    assert attribute(TOOL_READ, "stream-osc-ahead", {440}, ("osc_gives_way", "hot"))["deadlocks_tool_app_victim"] == 1
    assert attribute(TOOL_READ, "stream-osc-ahead", set(), ("osc_gives_way", "hot"))["deadlocks_other"] == 1


def test_application_transactions_deadlocked_through_another_table_count_as_the_tools():
    # pt-osc's triggers write its new table from inside the application's transactions
    through_trigger = SYSBENCH_ALONE.replace(
        "`dlxprobe`.`sbtest1` trx id 2046110 lock_mode X locks rec but not gap waiting",
        "`dlxprobe`.`_sbtest1_new` trx id 2046110 lock_mode X locks rec but not gap waiting")
    figures = attribute(through_trigger, "pt-osc", LOAD, TABLE)
    assert figures["deadlocks_tool_app_victim"] == 1 and figures["deadlocks_app_alone"] == 0


def test_deadlocks_on_other_schemas_are_not_the_runs():
    assert attribute(SYSBENCH_ALONE, "pt-osc", set(), ("sbtest", "sbtest1")) == {
        "deadlocks_tool_app_victim": 0, "deadlocks_app_alone": 0, "deadlocks_other": 0}


def test_the_log_is_read_from_the_runs_position_and_whole_if_it_was_replaced(tmp_path: Path):
    path = tmp_path / "mariadb.log"
    path.write_text("before\n")
    log = ErrorLog(path)
    position = log.position()
    with open(path, "a") as file:
        file.write("during\n")
    assert log.since(position) == "during\n"
    path.write_text("new\n")
    assert log.since(position) == "new\n"


def test_without_a_readable_log_the_runs_are_not_attributed_and_say_why(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(ERROR_LOG_ENV, raising=False)
    monkeypatch.setenv("STREAM_OSC_MYSQL_DSN", "mysql://u:p@db.example:3306/")
    log = error_log_of(None)
    assert log.path is None and ERROR_LOG_ENV in log.why_not
    monkeypatch.setenv(ERROR_LOG_ENV, str(tmp_path / "absent.log"))
    assert "cannot read" in error_log_of(None).why_not
    figures = not_attributed("why")
    assert figures["deadlocks_tool_app_victim"] is None and figures["deadlocks_not_attributed"] == "why"


# the warm-up -----------------------------------------------------------------------------------------
class FakeTable:
    def __init__(self, addr, database, table, rows) -> None:
        self.rows, self.template = rows, f"{table}_tpl_{rows}"

    def ensure_template(self) -> None:
        pass


def test_the_warm_up_run_is_handed_over_apart_from_the_measured_runs(monkeypatch):
    config = dataclasses.replace(parse_args(["--rows", "1M", "--repetitions", "1", "--tools", "stream-osc",
                                             "--scenarios", "heavy"], "python -m bench"),
                                 fit_buffer_pool=False, fit_redo_log=False)
    recorded, warm = [], []
    monkeypatch.setattr(bench_run, "BenchTable", FakeTable)
    sched = Schedule(config, endpoints=type("E", (), {"mysql": None})(), record=recorded.append,
                     say=lambda _: None, record_warm_up=warm.append)
    monkeypatch.setattr(sched, "_baseline", lambda table, scenario: None)
    monkeypatch.setattr(sched, "_one", lambda table, tool, scenario, rep, baseline: {"tool": tool, "repetition": rep})
    sched.run()
    assert warm == [{"tool": "stream-osc", "repetition": UNRECORDED_REP}]
    assert recorded == [{"tool": "stream-osc", "repetition": 0}]


# the report ------------------------------------------------------------------------------------------
META = {"command": "python -m bench", "date": "d", "machine": "m", "server": "s", "sizes": [1000], "alter": "a",
        "light_rate": 1, "heavy_rate": 2, "load_threads": 1, "baseline_s": 1.0, "repetitions": 3,
        "time_limit_s": 1.0, "stream_osc_source": "abc1234"}


def loaded_run(tool: str, rep: int, tool_victims: int | None, **extra) -> dict:
    counts = not_attributed("no log") if tool_victims is None else {
        "deadlocks_tool_app_victim": tool_victims, "deadlocks_app_alone": 1, "deadlocks_other": 0}
    return {"tool": tool, "scenario": "heavy", "rows": 1000, "repetition": rep, "finished": True, "seconds": 10.0,
            "load_tx_per_s": 1000, "invocation": 0, "app_deadlock_victims": 2, "app_lock_wait_timeouts": 1,
            "app_lock_wait_timeouts_alone": 0.5, "app_other_errors": 0, "app_other_error_codes": {}, **counts,
            **extra}


def report(tmp_path: Path, runs: list[dict], warm_up: dict | None = None) -> str:
    meta = {**META, "warm_up": warm_up is not None, **({"warm_up_run": warm_up} if warm_up else {})}
    write_markdown(tmp_path / "benchmarks.md", [meta], runs, plots=[])
    return (tmp_path / "benchmarks.md").read_text()


def test_the_report_sums_each_tools_deadlocks_over_the_runs_and_shows_each_runs_count(tmp_path: Path):
    example = "deadlock at 2026-12-07 on sbtest.sbtest1\n  (1) ROLLED BACK application session 5: DELETE …"
    runs = [loaded_run("pt-osc", 0, 0), loaded_run("pt-osc", 1, 2, deadlocks_tool_app_victim_examples=[example]),
            loaded_run("pt-osc", 2, 1, app_other_errors=8, app_other_error_codes={"1146": 8}),
            *[loaded_run("stream-osc", rep, 0) for rep in range(3)]]
    [pt_osc] = [r for r in summarise(runs) if r["tool"] == "pt-osc"]
    assert pt_osc["deadlocks_tool_app_victim"] == 3 and pt_osc["deadlocks_tool_app_victim_per_run"] == [0, 2, 1]
    assert pt_osc["app_lock_wait_timeouts"] == 3 and pt_osc["app_lock_wait_timeouts_alone"] == 1.5
    text = report(tmp_path, runs)
    section = text.split("## The application's deadlocks and lock-wait timeouts")[1].split("## stream-osc")[0]
    assert "| 1,000 | heavy | pt-osc | 3 | 3 (0 + 2 + 1) | 3 | 0 | 6 | 3 | 1.5 | 8 (1146 × 8) |" in section
    assert "| 1,000 | heavy | stream-osc | 3 | 0 (0 + 0 + 0) | 3 | 0 | 6 | 3 | 1.5 | 0 |" in section
    assert "pt-osc, heavy, 1,000 rows, repetition 2: deadlock at 2026-12-07" in section
    assert "### The warm-up run" not in section


def test_the_warm_up_is_reported_apart_with_its_examples(tmp_path: Path):
    example = "deadlock at 2026-12-07 on sbtest.sbtest1\n  (2) ROLLED BACK application session 9: UPDATE …"
    warm = {**loaded_run("stream-osc", UNRECORDED_REP, 29, deadlocks_tool_app_victim_examples=[example]),
            "seconds": 120.0, "app_lock_wait_timeouts": 4}
    text = report(tmp_path, [loaded_run("stream-osc", 0, 0)], warm)
    warm_up = text.split("### The warm-up run")[1].split("## stream-osc")[0]
    assert "| 1,000 | heavy | stream-osc | 120 | yes | 29 | 1 | 0 | 2 | 4 | 0 |" in warm_up
    assert "stream-osc, heavy, 1,000 rows, warm-up: deadlock at 2026-12-07" in warm_up
    measured = text.split("## The application's deadlocks")[1].split("### The warm-up run")[0]
    assert "| 1,000 | heavy | stream-osc | 1 | 0 | 1 | 0 | 2 | 1 | 0.5 | 0 |" in measured


def test_runs_not_attributed_say_so_and_why(tmp_path: Path):
    text = report(tmp_path, [loaded_run("pt-osc", 0, None), loaded_run("pt-osc", 1, 0)])
    assert "| 1,000 | heavy | pt-osc | 1 of 2 attributed | 0 | 1 | 0 |" in text
    assert "Not attributed: no log." in text
    text = report(tmp_path, [loaded_run("pt-osc", 0, None)])
    assert "| 1,000 | heavy | pt-osc | 0 of 1 attributed | not attributed | not attributed | not attributed |" in text


@pytest.mark.parametrize("scenario", ["idle", "heavy"])
def test_runs_recorded_before_the_attribution_show_no_section(tmp_path: Path, scenario: str):
    old = {"tool": "pt-osc", "scenario": scenario, "rows": 1000, "repetition": 0, "finished": True,
           "seconds": 10.0, "load_tx_per_s": 0 if scenario == "idle" else 1000, "invocation": 0}
    assert "## The application's deadlocks" not in report(tmp_path, [old])
