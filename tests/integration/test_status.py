"""`status`, `status --watch` and `list` against a real migration: a coordinator killed mid-copy makes the
migration `stopped` with exit code 3 at once; `resume` continues it and `status --watch` follows it to
`done`, one typed JSON document per line, then exits 0; `list` shows its progress, ETA and lag meanwhile."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.integration.helpers import (chunk_progress, cli, fresh_table, latest_migration_id,
                                       new_migration_row, start_cli, wait_for)

pytestmark = pytest.mark.integration

DB = "statusdb"


def test_killed_coordinator_is_stopped_with_exit_3_and_watch_follows_the_resume_to_done(endpoints, conn, tmp_path):
    table = "watched"
    qualified = f"{DB}.{table}"
    fresh_table(conn, DB, table, rows=60_000, seed=43)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--algorithm", "copy", "--table", qualified, "--alter", "ADD COLUMN flag INT NULL",
                     "--copy-workers", "1", "--chunk-size", "2000", "--batch-size", "50", "--target-batch-time", "0",
                     "--partitions", "2", log=tmp_path / "cli.log")
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        wait_for(lambda: chunk_progress(conn, migration.id)[0] > 0, 60, "the copy to start")
        running = cli("status", "--table", qualified, "--json")
        assert running.returncode == 0, running.stderr
        doc = json.loads(running.stdout)
        assert (doc["migration"], doc["stage"], doc["state"]) == (migration.id, "copy", "running")
        assert doc["coordinator"] and doc["copy"]["rows"] > 0 and isinstance(doc["copy"]["rows_per_s"], float)
        # list: progress, ETA and lag of the running migration, seconds in JSON and durations on a terminal
        [entry] = [r for r in json.loads(cli("list", "--json").stdout) if r["migration"] == migration.id]
        assert 0 < entry["progress"] <= 1 and isinstance(entry["apply_lag_events"], int), entry
        assert entry["eta_s"] is None or isinstance(entry["eta_s"], float), entry
        [line] = [line for line in cli("list").stdout.splitlines() if line.split()[:1] == [str(migration.id)]]
        assert re.search(r" \d+\.\d% ", line) and re.search(r" \d[\d,]* events ", line), line
        assert re.search(r" (\d+d\d\dh|\d+h\d\dm|\d+m\d\ds|\d+s)$", line), line   # the age, as a duration
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()

    stopped = cli("status", "--table", qualified, "--json")
    assert stopped.returncode == 3, stopped.stderr
    assert json.loads(stopped.stdout)["state"] == "stopped"
    listed = json.loads(cli("list", "--json").stdout)
    assert [(r["table"], r["state"]) for r in listed if r["migration"] == migration.id] == [(qualified, "stopped")]

    resumed = start_cli("resume", "--table", qualified, "--quiet", log=tmp_path / "resume.log")
    try:
        wait_for(lambda: json.loads(cli("status", "--table", qualified, "--json").stdout)["state"] != "stopped", 60,
                 "the resumed coordinator to take over")
        watch = subprocess.run([sys.executable, "-m", "cli.main", "status", "--table", qualified, "--watch", "--json",
                                "--interval", "0.5"], capture_output=True, text=True, timeout=300,
                               stdin=subprocess.DEVNULL)
        assert resumed.wait(120) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    finally:
        if resumed.poll() is None:
            resumed.kill()
    assert watch.returncode == 0, watch.stderr
    docs = [json.loads(line) for line in watch.stdout.splitlines()]
    assert len(docs) >= 2 and docs[-1]["state"] == "done" and docs[-1]["stage"] == "done"
    assert all(d["migration"] == migration.id for d in docs)
