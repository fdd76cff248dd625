"""A lease holder is judged dead only by a pid looked up in the pid space it was named in (core/process_owner.py)."""
from __future__ import annotations

import socket
import subprocess
import sys

import core.process_owner as process_owner
from core.process_owner import UNKNOWN_PLACE, is_dead_here, owner_name, pid_space


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def name_of(pid: int) -> str:
    """owner_name's form, for process `pid` of this pid space."""
    return f"{socket.gethostname()}:{pid}:a1b2c3:{pid_space()}"


def test_a_holder_named_in_this_pid_space_is_dead_only_once_its_process_is_gone():
    assert is_dead_here(name_of(dead_pid()))
    assert not is_dead_here(owner_name())


def test_a_holder_named_in_another_pid_space_on_a_host_of_the_same_name_is_never_judged_dead():
    host, pid, nonce, _ = name_of(dead_pid()).split(":")
    assert not is_dead_here(f"{host}:{pid}:{nonce}:{'f' * 12}")


def test_where_no_pid_space_is_readable_every_holder_is_waited_out(monkeypatch):
    gone = name_of(dead_pid())
    monkeypatch.setattr(process_owner, "pid_space", lambda: UNKNOWN_PLACE)
    assert not is_dead_here(gone)
    assert not is_dead_here(name_of(dead_pid()))
