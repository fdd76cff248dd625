"""Looking before locking, in logic: who counts as holding the table, who may be killed, how a lock try is bounded."""
import pytest

from cli.main import build_parser
from cli.command_spec import spec_from_args
from core.db import STATEMENT_TAG
from core.endpoints import ConfigError
from core.spec import MigrationSpec, parse_duration
from cutover.blocker_wait import BlockerClock, kill_refusal
from core.sql_names import names_table
from cutover.blockers import MIN_AGE_S, Blocker, Session, _age, _counts, suspected
from cutover.short_lock import MAX_BACKOFF_S, backoff_s, lock_statement, try_seconds


def session(**changes) -> Session:
    values = dict(connection_id=7, user="app", host="10.0.0.5:4100", command="Sleep", seconds=30.0, statement=None,
                  schema="shop", in_transaction=True, rows_modified=0)
    values.update(changes)
    return Session(**values)


@pytest.mark.parametrize("statement", ["SELECT * FROM orders", "select * from `shop`.`orders` o",
                                       "UPDATE Orders SET a=1", "SELECT 1 FROM shop.orders\nWHERE id=1"])
def test_a_statement_naming_the_table_is_recognised(statement):
    assert names_table(statement, "shop", "orders", "shop")


@pytest.mark.parametrize("statement", ["SELECT * FROM orders_osc_new", "SELECT * FROM myorders", "SELECT 'x'", None])
def test_a_statement_on_another_table_is_not_taken_for_it(statement):
    assert not names_table(statement, "shop", "orders", "shop")


@pytest.mark.parametrize("table", ["stream", "osc", "STREAM"])
def test_the_tool_s_tag_is_not_taken_for_a_table_it_names(table):
    """Every statement of the tool opens with `/* stream-osc */`: a table named after one of its words is not
    held by every session of the tool (another migration's, a worker's)."""
    assert not names_table(STATEMENT_TAG + "SELECT * FROM shop.orders", "shop", table, "shop")
    assert names_table(STATEMENT_TAG + f"SELECT * FROM shop.{table}", "shop", table, "shop")


def test_the_fallback_suspects_open_transactions_in_the_schema_or_naming_the_table():
    assert suspected(session(), "shop", "orders")                                    # idle in a transaction in shop
    assert suspected(session(schema="SHOP"), "shop", "orders")
    assert suspected(session(schema=None, command="Query", in_transaction=False,
                             statement="SELECT SLEEP(100) FROM shop.orders"), "shop", "orders")
    assert not suspected(session(schema="billing"), "shop", "orders")                # another schema, idle
    assert not suspected(session(schema=None), "shop", "orders")
    assert not suspected(session(in_transaction=False, command="Query", statement="SELECT 1"), "shop", "orders")


def test_only_sessions_holding_for_a_while_count():
    assert _counts(session(seconds=MIN_AGE_S))
    assert not _counts(session(seconds=MIN_AGE_S / 10))      # an application statement in flight
    assert not _counts(session(user="system user"))
    assert not _counts(session(command="Binlog Dump GTID"))   # the change capture's own session


def test_a_session_is_at_least_as_old_as_its_command_or_its_transaction():
    assert _age(40.0, 12.0) == 40.0    # idle for 40 s (or running a statement that long)
    assert _age(0.2, 12.0) == 11.0     # the transaction's start is known to the second only
    assert _age(0.005, 1.004) == 0.005   # a statement begun just before a second boundary is not a second old
    assert _age(3.0, None) == 3.0 and _age(None, None) == 0.0


def test_a_transaction_with_many_changes_is_never_killed():
    blocker = Blocker(7, "app", "h", 30.0, None, rows_modified=10_001)
    assert "10001 rows" in kill_refusal(blocker, 10_000)
    assert kill_refusal(Blocker(7, "app", "h", 30.0, None, rows_modified=10_000), 10_000) is None
    assert kill_refusal(Blocker(7, "app", "h", 30.0, "SELECT SLEEP(60)", rows_modified=None), 0) is None


def test_a_lock_try_is_bounded_per_statement_on_mariadb_and_by_whole_seconds_on_mysql():
    tables = ["`shop`.`orders`", "`shop`.`orders_osc_new`"]
    assert lock_statement(tables, 0.25, True) == ("SET STATEMENT max_statement_time=0.250 FOR "
                                                  "LOCK TABLES `shop`.`orders` WRITE, `shop`.`orders_osc_new` WRITE")
    assert lock_statement(tables, 0.25, False) == "LOCK TABLES `shop`.`orders` WRITE, `shop`.`orders_osc_new` WRITE"
    assert (try_seconds(0.25, True), try_seconds(0.25, False), try_seconds(1.5, False)) == (0.25, 1.0, 2.0)


def test_backoff_between_tries_grows_and_is_capped():
    pauses = [backoff_s(n, 0.5) for n in range(1, 8)]
    assert pauses == sorted(pauses) and pauses[0] == 0.5 and pauses[-1] == MAX_BACKOFF_S


@pytest.mark.parametrize("text, seconds", [("5s", 5.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("7", 7.0),
                                           ("1.5s", 1.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["five", "5x", "-1s", ""])
def test_a_malformed_duration_is_refused(text):
    with pytest.raises(ConfigError, match="invalid duration"):
        parse_duration(text)


def test_lock_options_reach_the_spec_and_bad_values_are_refused():
    args = build_parser().parse_args(["migrate", "--table", "shop.orders", "--alter", "ADD COLUMN c INT",
                                      "--lock-wait-timeout", "0.25", "--lock-tries", "3",
                                      "--force-kill-blockers-after", "5s", "--force-kill-max-rows", "100"])
    spec = spec_from_args(args)
    assert (spec.lock_wait_s, spec.lock_tries, spec.force_kill_blockers_after_s, spec.force_kill_max_rows) == \
        (0.25, 3, 5.0, 100)
    defaults = MigrationSpec("shop", "orders", "ADD COLUMN c INT").validate()
    assert defaults.lock_wait_s < 1 and defaults.force_kill_blockers_after_s is None
    for option, message in (({"lock_wait_s": 0}, "lock-wait-timeout"), ({"lock_tries": 0}, "lock-tries"),
                            ({"force_kill_blockers_after_s": -1}, "force-kill-blockers-after"),
                            ({"force_kill_max_rows": -1}, "force-kill-max-rows")):
        with pytest.raises(ConfigError, match=message):
            MigrationSpec.from_table_arg("shop.orders", "ADD COLUMN c INT", **option)


def test_a_malformed_kill_delay_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["migrate", "--table", "shop.orders", "--force-kill-blockers-after", "soon"])
    assert exit_.value.code == 2
    assert "'soon' is not a duration such as 5s" in capsys.readouterr().err


def test_the_kill_clock_runs_from_the_first_sighting_across_waits_and_attempts():
    clock = BlockerClock()
    held = Blocker(7, "app", "h", 1.0, None, rows_modified=0, transaction="421")
    clock.note([held], now=100.0)
    clock.note([held], now=103.0)           # the same holder seen by a later wait (another attempt)
    assert clock.held_up_s(held, now=106.0) == 6.0
    next_transaction = Blocker(7, "app", "h", 1.0, None, rows_modified=0, transaction="422")
    clock.note([next_transaction], now=107.0)   # the connection's next transaction is a new holder
    assert clock.held_up_s(next_transaction, now=107.0) == 0.0
    clock.note([], now=108.0)
    clock.note([next_transaction], now=110.0)   # gone and seen again: its clock starts again
    assert clock.held_up_s(next_transaction, now=111.0) == 1.0


def test_a_holder_seen_by_an_attempt_starts_the_clock_that_the_next_wait_keeps():
    clock = BlockerClock()
    held = Blocker(7, "app", "h", 1.0, None, rows_modified=0, transaction="421")
    clock.saw([held], now=50.0)              # an attempt's look, before any wait
    clock.saw([held], now=52.0)              # seen again: the first sighting stands
    clock.note([held], now=53.0)             # the wait that follows
    assert clock.held_up_s(held, now=55.0) == 5.0


def test_the_same_named_table_of_another_schema_is_not_taken_for_it():
    """One rule with the statements queued beside the RENAME (core/sql_names.py): the schema counts."""
    assert not suspected(session(statement="SELECT * FROM other.orders", schema="other"), "shop", "orders")
    assert suspected(session(statement="SELECT * FROM shop.orders", schema="other", in_transaction=False),
                     "shop", "orders")
