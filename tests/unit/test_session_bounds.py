"""The server-side bounds of the cutover's sessions, in logic: what ends a frozen coordinator's lock, and when; a
move's counter raised before the lock and only checked under it; holders on two servers kept apart."""
import pymysql
import pytest

from cutover.blocker_wait import BlockerClock
from cutover.blockers import SOURCE, TARGET, Blocker
from cutover.counters import raise_to, short_of
from cutover.session_bounds import MARGIN_S, idle_limit_s, lock_session_settings, remaining_statement_settings
from cutover.swap import CutoverAborted, within_window


@pytest.mark.parametrize("window_s, idle", [(3.0, 3 + MARGIN_S), (2.5, 3 + MARGIN_S), (0.001, 1 + MARGIN_S)])
def test_a_lock_session_may_stay_idle_the_window_rounded_up_plus_the_margin(window_s, idle):
    assert idle_limit_s(window_s) == idle
    assert idle_limit_s(window_s) > window_s   # no wait under the lock (at most the window) ends a live attempt


def test_the_idle_bound_covers_a_stopped_reader_and_writer_too():
    settings = lock_session_settings(3.0, is_mariadb=False)
    assert settings == {"wait_timeout": 5, "net_read_timeout": 5, "net_write_timeout": 5}


def test_mariadb_also_stops_any_statement_under_the_lock_after_the_window_and_margin():
    assert lock_session_settings(3.0, is_mariadb=True)["max_statement_time"] == 3.0 + MARGIN_S


def test_a_target_statement_is_limited_to_what_remains_of_the_window():
    maria = remaining_statement_settings(1.25, is_mariadb=True)
    assert maria["max_statement_time"] == 1.25                       # any fraction, lock waits included
    assert maria["lock_wait_timeout"] == maria["innodb_lock_wait_timeout"] == 2   # whole seconds: a backstop
    mysql = remaining_statement_settings(0.2, is_mariadb=False)
    assert "max_statement_time" not in mysql and mysql["lock_wait_timeout"] == 1   # the watchdog does the rest
    assert remaining_statement_settings(-0.5, is_mariadb=True)["max_statement_time"] > 0   # never 0: unlimited


def test_the_target_counter_is_raised_before_the_lock_only_when_short_of_the_margin():
    assert raise_to(source=101, target=100, margin=1_000) == 1_101
    assert raise_to(source=101, target=1_101, margin=1_000) is None   # already far enough ahead
    assert raise_to(source=None, target=100, margin=1_000) is None    # no AUTO_INCREMENT column
    assert raise_to(source=101, target=None, margin=1_000) is None


def test_under_the_lock_a_target_counter_behind_the_source_fails_the_attempt():
    assert short_of(source=102, target=101)
    assert not short_of(source=102, target=102)
    assert not short_of(source=None, target=1)


@pytest.mark.parametrize("code", [1317, 1969, 3024])
def test_a_statement_stopped_at_the_window_rolls_the_attempt_back(code):
    with pytest.raises(CutoverAborted, match="did not fit the window"):
        with within_window("on the target"):
            raise pymysql.err.OperationalError(code, "Query execution was interrupted")


def test_other_errors_under_the_lock_are_not_taken_for_the_window():
    with pytest.raises(pymysql.err.OperationalError):
        with within_window("on the target"):
            raise pymysql.err.OperationalError(2013, "Lost connection to server during query")


def test_the_same_connection_id_on_two_servers_is_two_holders():
    clock = BlockerClock()
    on_source = Blocker(7, "app", "h", 1.0, None, rows_modified=0, transaction="421", server=SOURCE)
    on_target = Blocker(7, "app", "h", 1.0, None, rows_modified=0, transaction="421", server=TARGET)
    clock.note([on_source], now=100.0)
    clock.note([on_source, on_target], now=104.0)
    assert clock.held_up_s(on_source, now=105.0) == 5.0
    assert clock.held_up_s(on_target, now=105.0) == 1.0
    assert "on the target server" in on_target.describe() and "target" not in on_source.describe()
    assert Blocker(**on_target.as_dict()) == on_target   # `status` rebuilds it from its note
