"""The benchmark says where the machine's cores went during a run (bench/cpu.py): by process role, from /proc."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench.cpu import CpuSnapshot, cores_by_role, role_of, snapshot
from bench.report import write_markdown
from bench.tools import run_process
from tests.unit.test_bench_report import META, run

SPIN = "import time\nwhile time.process_time() < {seconds}:\n    pass\n"   # CPU time, whatever the machine's load


def test_processes_are_attributed_to_their_role():
    assert role_of("/usr/sbin/mariadbd --defaults-file=/x/my.cnf") == "database"
    assert role_of("java -cp … org.apache.kafka.connect.cli.ConnectDistributed /x/connect.properties") == \
        "kafka_connect"
    assert role_of("java -cp … kafka.Kafka /x/server.properties") == "kafka"
    assert role_of("redis-server 127.0.0.1:16379") == "redis"
    assert role_of("sysbench oltp_write_only --rate=1000 run") == "load"
    assert role_of("bash") is None


def test_cores_are_cpu_seconds_over_wall_seconds_and_a_reused_pid_is_another_process():
    before = CpuSnapshot(10.0, {(1, 50, "database"): 5.0, (2, 60, "kafka"): 1.0, (3, 70, "load"): 9.0}, 100, 400,
                         uptime_ticks=1_000)
    after = CpuSnapshot(12.0, {(1, 50, "database"): 7.0, (2, 60, "kafka"): 1.5,
                               (3, 1_100, "load"): 0.6,             # pid 3 again, a new process since
                               (4, 900, "redis"): 30.0},            # older than the run, unseen at its start
                        400, 800, uptime_ticks=1_200)
    figures = cores_by_role(before, after)
    assert figures["cpu_cores_database"] == 1.0 and figures["cpu_cores_kafka"] == 0.25
    assert figures["cpu_cores_load"] == 0.3          # the new process's CPU, all spent during the run
    assert figures["cpu_cores_redis"] is None and figures["cpu_cores_kafka_connect"] is None
    assert figures["cpu_machine_busy"] == 0.75


def test_a_busy_process_is_measured_from_proc(tmp_path: Path):
    """A process whose command line marks it as the load generator, spinning, shows with its CPU seconds."""
    spin = tmp_path / "sysbench_spin.py"
    spin.write_text(SPIN.format(seconds=30))
    proc = subprocess.Popen([sys.executable, str(spin)])
    try:
        deadline = time.monotonic() + 10
        while b"sysbench" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)                             # until the new process shows its command line
        before = snapshot()
        time.sleep(1.0)                                  # the interval measured
        after = snapshot()
    finally:
        proc.kill()
        proc.wait(30)
    ours = [key for key in before.by_process if key[0] == proc.pid]
    assert [key[2] for key in ours] == ["load"]
    assert after.by_process[ours[0]] > before.by_process[ours[0]]
    assert cores_by_role(before, after)["cpu_cores_load"] > 0.05
    assert 0 < cores_by_role(before, after)["cpu_machine_busy"] <= 1


def test_the_tool_process_cpu_comes_from_its_rusage():
    result = run_process([sys.executable, "-c", SPIN.format(seconds=0.3)], 60.0)
    assert result.code == 0 and result.cpu_s >= 0.3


def test_the_report_shows_where_the_cpu_went(tmp_path: Path):
    figures = {"cpu_cores_database": 1.1, "cpu_cores_kafka_connect": 0.4, "cpu_cores_kafka": 0.2,
               "cpu_cores_redis": None, "cpu_cores_tool": 0.15, "cpu_cores_load": 0.2, "cpu_machine_busy": 0.96}
    path = tmp_path / "benchmarks.md"
    write_markdown(path, [{**META, "stream_osc_source": "abc"}], [{**run("stream-osc", 12.0, 0), **figures}], [])
    assert "| 1,000 | idle | stream-osc | 1.10 | 0.40 | 0.20 | – | 0.15 | 0.20 | 96% |" in path.read_text()
