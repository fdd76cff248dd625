"""bench --topology: the database's CPU apart from everything else's; pinning reaches every thread."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.sysbench import BenchError
from bench.topology import pin, place, split_cpus, threads_of


def test_the_database_gets_the_first_cpu_and_the_others_the_rest():
    assert split_cpus([3, 1, 2]) == ({1}, {2, 3})


def test_split_needs_two_cpus():
    with pytest.raises(BenchError, match="two CPUs"):
        split_cpus([0])


def test_shared_moves_nothing():
    before = os.sched_getaffinity(0)
    place("shared", None, lambda text: None)()
    assert os.sched_getaffinity(0) == before


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pinning_reaches_every_thread_of_a_running_process():
    code = ("import threading, time\n"
            "[threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]\n"
            "print('ready', flush=True)\ntime.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        one = {min(os.sched_getaffinity(0))}
        pin(child.pid, one, 3)
        tids = threads_of(child.pid)
        assert len(tids) >= 4
        assert all(os.sched_getaffinity(tid) == one for tid in tids)
        assert all(os.getpriority(os.PRIO_PROCESS, tid) == 3 for tid in tids)
    finally:
        child.kill()
        child.wait()
