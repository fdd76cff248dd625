"""Instant when the server can (core/instant.py, cutover/instant_alter.py): the statement that tries the change on
the table itself, which of the server's answers mean "not instantly", when the try is not made at all, and the
--algorithm option through the one options schema; a repeated --table is one clear refusal."""
from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pymysql
import pytest

from cli.command_spec import spec_from_args
from cli.main import build_parser, main
from core.endpoints import ConfigError
from core.instant import algorithm_clause, instant_statement, not_instant_reason, renames_table, why_not_instant
from core.options import option_named
from core.spec import MigrationSpec, load_migration_file
from cutover import instant_alter
from cutover.blockers import Blocker
from cutover.instant_alter import bounded_statement, lock_wait_setting, try_instant
from migration.resuming import resumed_values

NOON = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


def spec(alter: str = "ADD COLUMN note INT NULL", **values) -> MigrationSpec:
    return MigrationSpec(database="shop", table="orders", alter=alter, **values).validate()


@pytest.mark.parametrize("alter, statement", [
    ("ADD COLUMN note INT NULL", "ALTER TABLE `shop`.`orders` ALGORITHM=INSTANT, ADD COLUMN note INT NULL"),
    # a comment ending the ALTER cannot swallow the clause: it comes first
    ("ADD COLUMN note INT NULL -- for the new report", "ALTER TABLE `shop`.`orders` ALGORITHM=INSTANT, "
                                                       "ADD COLUMN note INT NULL -- for the new report"),
    ("ADD COLUMN note INT # why", "ALTER TABLE `shop`.`orders` ALGORITHM=INSTANT, ADD COLUMN note INT # why"),
    # the ALTER's own ALGORITHM=INSTANT is kept, not doubled
    ("ADD COLUMN note INT, ALGORITHM = INSTANT",
     "ALTER TABLE `shop`.`orders` ADD COLUMN note INT, ALGORITHM = INSTANT"),
    # its LOCK clause is kept as written
    ("ADD COLUMN note INT, LOCK=NONE", "ALTER TABLE `shop`.`orders` ALGORITHM=INSTANT, ADD COLUMN note INT, LOCK=NONE"),
])
def test_the_try_is_the_alter_on_the_table_itself_with_algorithm_instant_first(alter, statement):
    assert instant_statement("shop", "orders", alter) == statement


def test_names_are_quoted_in_the_statement():
    assert instant_statement("my.db", "or`ders", "ADD COLUMN c INT").startswith("ALTER TABLE `my.db`.`or``ders` ")


@pytest.mark.parametrize("alter, clause", [
    ("ADD COLUMN c INT, ALGORITHM=INPLACE", "INPLACE"),
    ("ALGORITHM copy, ADD COLUMN c INT", "COPY"),
    ("ADD COLUMN c INT, algorithm = nocopy", "NOCOPY"),
    ("ADD COLUMN c INT,ALGORITHM=INSTANT", "INSTANT"),
    ("ADD COLUMN algorithm INT", None),                              # a column named algorithm
    ("ADD COLUMN c INT COMMENT 'ALGORITHM=COPY'", None),             # a string
    ("ADD COLUMN c INT /* ALGORITHM=COPY */", None),                 # a comment
    ("ADD COLUMN `algorithm` VARCHAR(8) DEFAULT 'copy'", None),
])
def test_the_alters_own_algorithm_clause_is_read_as_the_server_reads_it(alter, clause):
    assert algorithm_clause(alter) == clause


@pytest.mark.parametrize("alter, renames", [
    ("RENAME TO orders_2024", True), ("RENAME AS orders_2024", True), ("ADD COLUMN c INT, RENAME `x`", True),
    ("RENAME COLUMN a TO b", False), ("RENAME INDEX a TO b", False), ("RENAME KEY a TO b", False),
    ("CHANGE a b INT", False),
])
def test_a_rename_of_the_table_itself_is_told_from_a_column_or_index_rename(alter, renames):
    assert renames_table(alter) is renames


@pytest.mark.parametrize("values, reason", [
    ({}, None),
    ({"alter": "ADD COLUMN c INT, ALGORITHM=INSTANT"}, None),
    ({"algorithm": "copy"}, "--algorithm copy"),
    ({"target_server": True, "target_dsn": "mysql://u@db2:3306/"}, "a move to another server (--target-dsn)"),
    ({"target_server": True, "where": "id > 5"}, "--where"),
    ({"defer_indexes": True}, "--defer-indexes"),
    ({"cutover": "manual"}, "--cutover manual"),
    ({"cutover_window_schedule": "02:00-04:00"}, "outside the cutover window 02:00-04:00"),
    ({"cutover_window_schedule": "11:00-13:00"}, None),
    ({"alter": "ADD COLUMN c INT, ALGORITHM=INPLACE"}, "the ALTER asks for ALGORITHM=INPLACE itself"),
    ({"alter": "ADD COLUMN c INT, ALGORITHM=COPY"}, "the ALTER asks for ALGORITHM=COPY itself"),
    ({"alter": "RENAME TO orders_old_2024"}, "the ALTER renames the table"),
    ({"alter": "ADD COLUMN c INT /*!50000 , ALGORITHM=COPY */"}, "executable comment"),
    ({"alter": "ADD COLUMN c INT /*M!100300 , ALGORITHM=COPY */"}, "executable comment"),
    ({"alter": "ADD COLUMN c INT COMMENT 'unterminated"}, "the ALTER could not be read"),
])
def test_when_the_instant_try_is_not_made_the_log_line_says_why(values, reason):
    found = why_not_instant(spec(**{"alter": "ADD COLUMN c INT", **values}), NOON)
    assert found == reason if reason is None else reason in found


@pytest.mark.parametrize("code, message, not_instant", [
    (1845, "ALGORITHM=INSTANT is not supported for this operation. Try ALGORITHM=COPY", True),
    (1846, "ALGORITHM=INSTANT is not supported. Reason: Cannot change column type. Try ALGORITHM=COPY", True),
    (4092, "Maximum row versions reached for table shop/orders. No more columns can be added or dropped instantly",
     True),
    (1060, "Duplicate column name 'note'", False),
    (1064, "You have an error in your SQL syntax", False),
    (1205, "Lock wait timeout exceeded", False),
])
def test_which_errors_mean_not_instantly(code, message, not_instant):
    reason = not_instant_reason(code, message)
    assert (reason is not None) is not_instant
    if not_instant:
        assert message in reason and f"server error {code}" in reason


def test_each_try_is_bounded_by_the_lock_wait_timeout_by_the_server_itself():
    assert lock_wait_setting(0.5) == 1 and lock_wait_setting(1.0) == 1 and lock_wait_setting(2.1) == 3
    assert bounded_statement("ALTER TABLE t ALGORITHM=INSTANT, ADD c INT", 0.5, True) == \
        "SET STATEMENT max_statement_time=0.500 FOR ALTER TABLE t ALGORITHM=INSTANT, ADD c INT"
    assert bounded_statement("ALTER TABLE t ALGORITHM=INSTANT, ADD c INT", 0.5, False) == \
        "ALTER TABLE t ALGORITHM=INSTANT, ADD c INT"


def answering(monkeypatch, error: Exception | None) -> list[str]:
    """The statements try_instant sends, answered with `error` (None: done)."""
    sent: list[str] = []

    def fake_query(conn, sql, args=None):
        sent.append(sql)
        if error is not None:
            raise error
        return ()
    monkeypatch.setattr(instant_alter, "query", fake_query)
    return sent


@pytest.mark.parametrize("error, outcome", [
    (None, "done"),
    (pymysql.err.OperationalError(1969, "Query execution was interrupted (max_statement_time exceeded)"), "timed_out"),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction"), "timed_out"),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), "lost"),
    (pymysql.err.NotSupportedError(1846, "ALGORITHM=INSTANT is not supported. Reason: x. Try ALGORITHM=COPY"),
     "refusal"),
    (pymysql.err.OperationalError(1060, "Duplicate column name 'note'"), "refusal"),
])
def test_a_try_ends_in_one_of_its_outcomes(monkeypatch, error, outcome):
    sent = answering(monkeypatch, error)
    result = try_instant(object(), "ALTER TABLE t ALGORITHM=INSTANT, ADD c INT", 0.5, True, lambda: [])
    assert len(sent) == 1 and sent[0].startswith("SET STATEMENT max_statement_time=0.500 FOR ALTER TABLE")
    assert [name for name in ("done", "timed_out", "lost") if getattr(result, name)] + \
        (["refusal"] if result.refusal else []) == [outcome]


def test_a_holder_of_the_table_seen_first_means_nothing_is_asked(monkeypatch):
    sent = answering(monkeypatch, None)
    holder = Blocker(42, "app", "10.0.0.5", 3.0, None, 0)
    result = try_instant(object(), "ALTER TABLE t ALGORITHM=INSTANT, ADD c INT", 0.5, True, lambda: [holder])
    assert sent == [] and result.blockers == (holder,) and not result.done


def test_algorithm_is_an_option_of_the_one_schema():
    option = option_named("algorithm")
    assert option.parse("copy", "--algorithm") == "copy" and option.parse("auto", "--algorithm") == "auto"
    with pytest.raises(ConfigError, match="--algorithm must be one of auto, copy, not 'instant'"):
        option.parse("instant", "--algorithm")
    assert MigrationSpec(database="a", table="b", alter="ADD c INT").algorithm == "auto"   # the default
    with pytest.raises(ConfigError, match="--algorithm must be auto or copy"):
        spec(algorithm="inplace")


def test_algorithm_comes_from_the_command_line_or_the_config_file(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text('[migration]\ntable = "shop.orders"\nalter = "ADD COLUMN c INT"\nalgorithm = "copy"\n')
    assert load_migration_file(path)["algorithm"] == "copy"
    assert spec_from_args(argparse.Namespace(config=str(path), table=None, alter=None)).algorithm == "copy"
    args = build_parser().parse_args(["migrate", "--table", "a.b", "--alter", "ADD c INT", "--algorithm", "copy"])
    assert spec_from_args(args).algorithm == "copy"
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[migration]\nalgorithm = true\n')
    with pytest.raises(ConfigError, match="algorithm in \\[migration\\] of .* must be a string"):
        load_migration_file(wrong)
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["migrate", "--table", "a.b", "--alter", "ADD c INT", "--algorithm", "fast"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "auto, copy" in err, err


def test_the_algorithm_is_kept_with_the_migration_and_restored_on_resume():
    assert resumed_values({"algorithm": "copy"}, frozenset()) == {"algorithm": "copy"}
    assert resumed_values({"algorithm": "copy"}, frozenset({"algorithm"})) == {"algorithm": "copy"}


@pytest.mark.parametrize("command", ["migrate", "resume", "cutover"])
def test_a_repeated_table_is_one_line_saying_why_and_exit_2(capsys, command):
    argv = [command, "--table", "shop.orders", "--table", "shop.items"]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--alter", "ADD COLUMN c INT"] if command == "migrate" else argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "--table given more than once" in err and "MariaDB" in err and "metadata-lock queue" in err, err
