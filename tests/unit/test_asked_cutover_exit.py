"""The exit code of `stream-osc cutover` when the coordinator it asked stopped: the coordinator's own, where the
stored message tells it (what the facts tell first is tested in tests/integration/test_throttle.py)."""
from __future__ import annotations

from cli.exit_codes import ExitCode, exit_code_for
from throttle.load import critical_load_reached
from migration.resuming import stopped_coordinator_error


def test_a_coordinator_stopped_at_the_critical_load_gives_the_asking_command_exit_4():
    stored = str(critical_load_reached("Threads_running=63 >= 60"))
    assert exit_code_for(stopped_coordinator_error(stored)) == ExitCode.CRITICAL_LOAD


def test_a_move_stopped_at_the_target_servers_critical_load_gives_exit_4():
    stored = f"on the target server 10.0.0.2:3306: {critical_load_reached('Threads_running=63 >= 60')}"
    assert exit_code_for(stopped_coordinator_error(stored)) == ExitCode.CRITICAL_LOAD


def test_any_other_stop_of_the_coordinator_is_a_resumable_stop():
    error = stopped_coordinator_error("cutover did not fit the 2.0 s window in 5 attempts")
    assert exit_code_for(error) == ExitCode.STOPPED
    assert "the coordinator stopped before the swap: cutover did not fit" in str(error)


def test_a_message_that_only_quotes_a_critical_load_is_not_taken_for_one():
    error = stopped_coordinator_error("cannot connect: 'critical load reached (' is a table comment")
    assert exit_code_for(error) == ExitCode.STOPPED
