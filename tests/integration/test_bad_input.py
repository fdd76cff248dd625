"""Bad input: one clear error, a non-zero exit, and nothing left behind."""
import os
import subprocess
import sys

import pytest

from cli.main import main
from core.db import query
from core.spec import helper_table_name
from demo.traffic import create_sample_table
from tests.integration.helpers import leftovers

pytestmark = pytest.mark.integration

DB = "bad"


def run_migrate(capsys, table, alter, *extra):
    code = main(["migrate", "--table", f"{DB}.{table}", "--alter", alter, "--quiet", *extra])
    err = capsys.readouterr().err
    return code, err


def assert_refused(endpoints, capsys, table, alter, message, *extra):
    code, err = run_migrate(capsys, table, alter, *extra)
    assert code == 2
    assert err.startswith("stream-osc: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert leftovers(endpoints, DB, table) == []
    return err


def test_unknown_table(endpoints, conn, capsys):
    assert_refused(endpoints, capsys, "nope", "ADD COLUMN c INT", f"table {DB}.nope does not exist")


def test_table_without_primary_key(endpoints, conn, capsys):
    query(conn, f"DROP TABLE IF EXISTS {DB}.nopk")
    query(conn, f"CREATE TABLE {DB}.nopk (a INT)")
    assert_refused(endpoints, capsys, "nopk", "ADD COLUMN c INT", "has no primary key")


def test_a_table_other_tables_reference_is_refused_naming_every_child_across_schemas(endpoints, conn, capsys):
    """A rename swap would leave the children's keys pointing at the old table: without
    --alter-foreign-keys-method rebuild the table is refused, naming each child and its key, including a child in
    another schema (a table's own plain keys are kept: tests/integration/test_foreign_keys.py)."""
    drop_fk_tables(conn)
    query(conn, "CREATE DATABASE bad_other")
    query(conn, f"CREATE TABLE {DB}.fk_parent (id INT PRIMARY KEY)")
    query(conn, f"CREATE TABLE {DB}.fk_child (id INT PRIMARY KEY, pid INT, "
                f"CONSTRAINT fk_up FOREIGN KEY (pid) REFERENCES {DB}.fk_parent (id))")
    query(conn, "CREATE TABLE bad_other.fk_other_child (id INT PRIMARY KEY, pid INT, "
                f"CONSTRAINT fk_across FOREIGN KEY (pid) REFERENCES {DB}.fk_parent (id))")
    try:
        err = assert_refused(endpoints, capsys, "fk_parent", "ADD COLUMN c INT",
                             f"table {DB}.fk_parent is referenced by foreign keys of ")
        assert f"{DB}.fk_child (fk_up)" in err and "bad_other.fk_other_child (fk_across)" in err, err
        assert "--alter-foreign-keys-method rebuild" in err
    finally:
        drop_fk_tables(conn)


def drop_fk_tables(conn) -> None:
    """Children first; then the parents, with the original a wrongly run migration would have kept."""
    for table in ("bad_other.fk_other_child", f"{DB}.fk_child", f"{DB}.{helper_table_name('fk_child', 'old')}",
                  f"{DB}.fk_parent", f"{DB}.{helper_table_name('fk_parent', 'old')}"):
        query(conn, f"DROP TABLE IF EXISTS {table}")
    query(conn, "DROP DATABASE IF EXISTS bad_other")


@pytest.mark.parametrize("key_type, reason", [
    ("DOUBLE", "approximate values"),
    ("ENUM('b', 'a')", "ENUM sorts by member number"),
])
def test_a_key_type_that_cannot_be_matched_exactly_is_refused_with_the_reason(endpoints, conn, capsys, key_type,
                                                                                reason):
    query(conn, f"DROP TABLE IF EXISTS {DB}.oddpk")
    query(conn, f"CREATE TABLE {DB}.oddpk (a INT, b {key_type}, PRIMARY KEY (a, b))")
    assert_refused(endpoints, capsys, "oddpk", "ADD COLUMN c INT", "primary-key column b of type")
    assert_refused(endpoints, capsys, "oddpk", "ADD COLUMN c INT", reason)


@pytest.mark.parametrize("column, named", [
    ("c INET6", "column c of type inet6 (its DDL parser does not know the type)"),
    ("c INET4", "column c of type inet4 (its DDL parser does not know the type)"),
    ("c VARCHAR(40) COMPRESSED", "column c of type varchar(40) COMPRESSED (its binlog reader cannot decode"),
])
def test_a_column_the_connector_cannot_read_is_refused_by_name(endpoints, conn, capsys, column, named):
    """Such a table would pass init and stop the capture at its first change (docs/log/2026-12-07-connector-types.md);
    a UUID column, which the connector reads, is accepted."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.unread")
    query(conn, f"CREATE TABLE {DB}.unread (id INT PRIMARY KEY, u UUID, {column})")
    err = assert_refused(endpoints, capsys, "unread", "ADD COLUMN x INT", f"table {DB}.unread has {named}")
    assert "which the Debezium connector cannot read" in err
    query(conn, f"ALTER TABLE {DB}.unread DROP COLUMN c")
    code, err = run_migrate(capsys, "unread", "ADD COLUMN x INT", "--dry-run")
    assert code == 0, err


def test_a_compressed_column_of_another_table_is_refused_by_name(endpoints, conn, capsys):
    """The connector's binlog reader fails on a write to any table with a compressed column, captured or not."""
    create_sample_table(conn, DB, "plain", rows=10)
    query(conn, f"DROP TABLE IF EXISTS {DB}.squeezed")
    query(conn, f"CREATE TABLE {DB}.squeezed (id INT PRIMARY KEY, note TEXT COMPRESSED)")
    try:
        assert_refused(endpoints, capsys, "plain", "ADD COLUMN x INT",
                       f"the server has compressed columns ({DB}.squeezed.note)")
    finally:
        query(conn, f"DROP TABLE {DB}.squeezed")


@pytest.mark.parametrize("change, shown", [
    ("MODIFY k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL", "utf8mb4_general_ci -> varchar(20)"),
    ("MODIFY k VARBINARY(20) NOT NULL", "-> varbinary(20)"),
])
def test_an_alter_that_changes_how_the_key_compares_is_refused(endpoints, conn, capsys, change, shown):
    """Under another collation or type the same key range holds other rows in each table: validation
    could not compare them, and a re-copy could leave a row behind under its old spelling."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.cipk")
    query(conn, f"CREATE TABLE {DB}.cipk (k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci "
                "PRIMARY KEY, v INT)")
    assert_refused(endpoints, capsys, "cipk", change, "the ALTER changes how primary-key column k compares")
    assert_refused(endpoints, capsys, "cipk", change, shown)


@pytest.mark.parametrize("collation, refused", [("utf8mb4_nopad_bin", True), ("utf8mb4_bin", False)])
def test_a_key_made_char_is_refused_where_trailing_spaces_count(endpoints, conn, capsys, collation, refused):
    """CHAR drops trailing spaces: under a NO PAD collation the VARCHAR keys 'a ' and 'a' are two rows of the
    original and one key of the new table. Under PAD SPACE they are one key either way."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.spacedpk, {DB}.spacedpk_osc_old")
    query(conn, f"CREATE TABLE {DB}.spacedpk (k VARCHAR(20) CHARACTER SET utf8mb4 COLLATE {collation} PRIMARY KEY, "
                "v INT)")
    query(conn, f"INSERT INTO {DB}.spacedpk VALUES ('a', 1), ('b ', 2)")
    change = f"MODIFY k CHAR(20) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
    if refused:
        assert_refused(endpoints, capsys, "spacedpk", change, "the ALTER changes how primary-key column k compares")
    else:
        code, err = run_migrate(capsys, "spacedpk", change, "--dry-run")
        assert code == 0, err


@pytest.mark.parametrize("key, change", [
    ("k DECIMAL(12,4) NOT NULL", "MODIFY k DECIMAL(12,2) NOT NULL"),
    ("k DATETIME(6) NOT NULL", "MODIFY k DATETIME NOT NULL"),
    ("k VARBINARY(16) NOT NULL", "MODIFY k BINARY(20) NOT NULL"),
])
def test_an_alter_that_would_round_or_pad_the_key_is_refused(endpoints, conn, capsys, key, change):
    """The server rounds 10:00:00.4 to 10:00:00 and pads bytes without an error: a change key would then
    match no row of the new table."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.lossypk")
    query(conn, f"CREATE TABLE {DB}.lossypk ({key}, v INT, PRIMARY KEY (k))")
    assert_refused(endpoints, capsys, "lossypk", change, "the ALTER changes how primary-key column k compares")


def test_an_alter_widening_an_integer_key_is_accepted(endpoints, conn, capsys):
    create_sample_table(conn, DB, "widenpk", rows=10)
    code, err = run_migrate(capsys, "widenpk", "MODIFY id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT", "--dry-run")
    assert code == 0, err


def test_an_alter_that_changes_the_primary_key_columns_is_refused(endpoints, conn, capsys):
    query(conn, f"DROP TABLE IF EXISTS {DB}.newpk")
    query(conn, f"CREATE TABLE {DB}.newpk (a INT, b INT, PRIMARY KEY (a))")
    assert_refused(endpoints, capsys, "newpk", "DROP PRIMARY KEY, ADD PRIMARY KEY (a, b)",
                   "the ALTER changes the primary key (was a)")


@pytest.mark.parametrize("source_engine, alter, algorithm", [
    ("InnoDB", "ENGINE=MyISAM", "auto"), ("InnoDB", "ENGINE=Aria, ADD COLUMN c INT", "copy"),
    ("MyISAM", "ADD COLUMN c INT", "auto"),
], ids=["instant_to_myisam", "copy_to_aria", "from_myisam"])
def test_a_table_other_than_innodb_on_either_side_is_refused_and_left_as_it_was(endpoints, conn, capsys,
                                                                                source_engine, alter, algorithm):
    """An engine change is a copy of the table under its lock whatever ALGORITHM says (MariaDB accepts
    ALGORITHM=INSTANT, ENGINE=MyISAM and copies): never tried on the table itself."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.engines")
    query(conn, f"CREATE TABLE {DB}.engines (id INT PRIMARY KEY, v INT) ENGINE={source_engine}")
    query(conn, f"INSERT INTO {DB}.engines VALUES (1, 1), (2, 2)")
    assert_refused(endpoints, capsys, "engines", alter, "stream-osc migrates InnoDB tables into InnoDB tables only",
                   "--algorithm", algorithm)
    engine, = query(conn, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME='engines'",
                    (DB,))[0]
    columns = [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                         "AND TABLE_NAME='engines' ORDER BY ORDINAL_POSITION", (DB,))]
    assert (engine, columns) == (source_engine, ["id", "v"])


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)], ids=["migrate", "dry_run"])
def test_an_added_not_null_column_without_a_default_is_refused_before_any_row_is_copied(endpoints, conn, capsys,
                                                                                       dry_run):
    """A plain ALTER gives existing rows the type's implicit value; the copy, which names only the columns the
    source fills, would have the server refuse every row. Refused up front, naming the column and the fix."""
    create_sample_table(conn, DB, "nodefault", rows=10)
    assert_refused(endpoints, capsys, "nodefault", "ADD COLUMN qty INT NOT NULL, ADD COLUMN remark TEXT NULL",
                   "the ALTER adds column qty NOT NULL without a DEFAULT", *dry_run)
    code, err = run_migrate(capsys, "nodefault", "ADD COLUMN qty INT NOT NULL DEFAULT 0", "--dry-run")
    assert code == 0, err


def test_alter_syntax_error_reports_server_error(endpoints, conn, capsys):
    create_sample_table(conn, DB, "syn", rows=10)
    err = assert_refused(endpoints, capsys, "syn", "ADDD COLUMN c INT", "the ALTER is not valid")
    assert "1064" in err


def test_leftover_new_table(endpoints, conn, capsys):
    create_sample_table(conn, DB, "left", rows=10)
    query(conn, f"CREATE TABLE {DB}.left_osc_new (id INT PRIMARY KEY)")
    try:
        code, err = run_migrate(capsys, "left", "ADD COLUMN c INT")
        assert code == 2 and "left_osc_new already exists" in err
        assert leftovers(endpoints, DB, "left") == [f"table {DB}.left_osc_new"]   # the user's table is untouched
    finally:
        query(conn, f"DROP TABLE {DB}.left_osc_new")


@pytest.mark.exclusive   # it sets binlog_format for the whole server: every capture sees it
def test_binlog_not_row(endpoints, conn, capsys):
    create_sample_table(conn, DB, "stmt", rows=10)
    query(conn, "SET GLOBAL binlog_format = 'STATEMENT'")
    try:
        assert_refused(endpoints, capsys, "stmt", "ADD COLUMN c INT", "binlog_format is STATEMENT")
    finally:
        query(conn, "SET GLOBAL binlog_format = 'ROW'")


def test_unique_key_over_duplicates_fails_like_the_alter(endpoints, conn, capsys):
    create_sample_table(conn, DB, "dups", rows=2_000)
    query(conn, f"UPDATE {DB}.dups SET k = 5 WHERE id IN (1500, 1700)")
    err = assert_refused(endpoints, capsys, "dups", "ADD UNIQUE KEY uk (k)", "adds UNIQUE key 'uk'")
    assert "share the value (5)" in err


@pytest.mark.parametrize("variable, value, message", [
    ("STREAM_OSC_KAFKA_BOOTSTRAP", "127.0.0.1:1", "Kafka at 127.0.0.1:1 is unreachable"),
    ("STREAM_OSC_CONNECT_URL", "http://127.0.0.1:1", "Kafka Connect at http://127.0.0.1:1 is unreachable"),
    ("STREAM_OSC_REDIS_URL", "redis://127.0.0.1:1/0", "Redis at 127.0.0.1:1 is unreachable"),
])
def test_unreachable_service(endpoints, conn, capsys, monkeypatch, variable, value, message):
    create_sample_table(conn, DB, "svc", rows=10)
    monkeypatch.setenv(variable, value)
    assert_refused(endpoints, capsys, "svc", "ADD COLUMN c INT", message)


def test_wrong_password_is_not_echoed(endpoints, conn, capsys, monkeypatch):
    addr = endpoints.mysql
    monkeypatch.setenv("STREAM_OSC_MYSQL_DSN", f"mysql://{addr.user}:Wr0ngSecret@{addr.host}:{addr.port}/")
    code, err = run_migrate(capsys, "svc", "ADD COLUMN c INT")
    assert code == 2 and f"cannot connect to MySQL at {addr.host}:{addr.port}" in err
    assert "Wr0ngSecret" not in err


@pytest.mark.parametrize("variable", ["STREAM_OSC_MYSQL_DSN", "STREAM_OSC_CONNECT_URL"])
def test_an_empty_endpoint_is_refused_and_never_becomes_the_stacks(endpoints, conn, capsys, monkeypatch, variable):
    """The embedded stack runs and its other variables are set, yet an emptied one is not filled in from it."""
    create_sample_table(conn, DB, "unset", rows=10)
    monkeypatch.setenv(variable, "")
    err = assert_refused(endpoints, capsys, "unset", "ADD COLUMN c INT", f"no address for: {variable} (set but empty")
    assert endpoints.mysql.password not in err
    done = subprocess.run([sys.executable, "-m", "cli.main", "list"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, variable: ""}, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == "" and f"{variable} (set but empty" in done.stderr
