"""Foreign keys (docs/foreign-keys.md): a table holding a plain (RESTRICT) key to a parent is migrated under
unthrottled writers on it and on the parent, with every acknowledged write kept, its constraint on the final table
under its documented name and enforced, and no application write on the parent refused or deadlocked because of
the tool; a family writer deletes child rows and then their parent, which a new table holding the constraint while
it lags would refuse. With --alter-foreign-keys-method rebuild the children's constraints reference the new table
after the swap, also when the run stops between the swap and the rebuild (resume and abort finish it, after a
SIGKILL too); an ALTER's
DROP FOREIGN KEY is kept; an attempt rolled back after adding the keys in its lock takes them off again, and a
resume those a coordinator stopped in its lock left.
(Refusals: tests/integration/test_bad_input_catalogue.py.)"""
from __future__ import annotations

import random
import signal
import time

import pymysql
import pytest

from core.db import connect, qualified, query
from core.endpoints import MySQLAddress
from core.foreign_keys import own_foreign_keys
from core.spec import MigrationSpec, helper_table_name
from cutover.outcome import CutoverAborted
from cutover.swap import Cutover
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.deadlocks import ConflictWatch, assert_no_tool_deadlock
from tests.integration.helpers import abort_leftover, cli, leftovers, start_cli, table_columns
from tests.integration.ledger import AcknowledgedWriter, Ledger, create_ledger_table
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

DB = "fkeys"
PARENTS = 200          # parent rows 1..PARENTS; every ledger row inserted references parent 1 (its default)
FAMILY_WRITER = 1000   # the `writer` of the family writers' child rows (the ledger's writers are 1..N, filler 0)


def fresh_family(conn, table: str, rows: int, writers: int) -> None:
    """`parent` <- `table` (a ledger table holding fk_<table>_parent, RESTRICT) <- `grand` (fk_grand, RESTRICT),
    made anew with whatever an earlier run left."""
    abort_leftover(conn, DB, table)
    query(conn, f"DROP DATABASE IF EXISTS {DB}")
    create_ledger_table(conn, DB, table, rows=rows, writers=writers)
    query(conn, f"CREATE TABLE {DB}.parent (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, counter BIGINT NOT NULL "
                "DEFAULT 0) ENGINE=InnoDB")
    query(conn, f"INSERT INTO {DB}.parent (id) SELECT seq FROM {DB}.seq_1_to_{PARENTS}")
    query(conn, f"ALTER TABLE {qualified(DB, table)} ADD COLUMN parent_id BIGINT NULL DEFAULT 1, ADD CONSTRAINT "
                f"fk_{table}_parent FOREIGN KEY (parent_id) REFERENCES {DB}.parent (id)")
    query(conn, f"UPDATE {qualified(DB, table)} SET parent_id = 1 + id % {PARENTS}")


class ParentWriter(AcknowledgedWriter):
    """An application session on the parent table: counter increments of a parent row children reference, inserts
    and deletes of parent rows of its own; `expected` is what it was told committed."""

    def __init__(self, addr: MySQLAddress, number: int, seed: int) -> None:
        super().__init__(addr, name=f"parent-writer-{number}")
        self.row = 1 + number   # a parent row of its own, referenced by filler rows
        self.rng = random.Random(seed + number)
        self.increments, self.inserted, self.deleted = 0, [], []

    def write(self, conn: pymysql.connections.Connection) -> None:
        roll = self.rng.random()
        if roll < 0.5:
            self.doing = f"increment parent {self.row}"
            query(conn, f"UPDATE {DB}.parent SET counter = counter + 1 WHERE id = %s", (self.row,))
            self.increments += 1
        elif roll < 0.8 or not self.inserted:
            self.doing = "insert parent"
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {DB}.parent () VALUES ()")
                self.inserted.append(cur.lastrowid)
        else:
            victim = self.inserted.pop(self.rng.randrange(len(self.inserted)))
            self.doing = f"delete parent {victim}"
            query(conn, f"DELETE FROM {DB}.parent WHERE id = %s", (victim,))
            self.deleted.append(victim)


class FamilyWriter(AcknowledgedWriter):
    """A parent row, a child row referencing it in the migrated table, then the child deleted and the parent
    deleted, each acknowledged: a new table holding the constraint while it lags the original would still hold the
    child and refuse the parent's delete (error 1451), or make it wait for an applier's lock."""

    def __init__(self, addr: MySQLAddress, table: str, number: int) -> None:
        super().__init__(addr, name=f"family-writer-{number}")
        self.table, self.writer, self.cycles = qualified(DB, table), FAMILY_WRITER + number, 0

    def write(self, conn: pymysql.connections.Connection) -> None:
        self.doing = "insert parent"
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {DB}.parent () VALUES ()")
            parent = cur.lastrowid
            self.doing = f"insert child of {parent}"
            cur.execute(f"INSERT INTO {self.table} (writer, seq, parent_id) VALUES (%s, %s, %s)",
                        (self.writer, self.cycles, parent))
            child = cur.lastrowid
        self.doing = f"delete child {child}"
        query(conn, f"DELETE FROM {self.table} WHERE id = %s", (child,))
        self.doing = f"delete parent {parent}"
        query(conn, f"DELETE FROM {DB}.parent WHERE id = %s", (parent,))
        self.cycles += 1


def spec_for(table: str, alter: str = "ADD COLUMN note VARCHAR(32) NULL", **options) -> MigrationSpec:
    return MigrationSpec(database=DB, table=table, alter=alter, algorithm="copy", copy_workers=2, apply_workers=2,
                         chunk_size=4_000, partitions=2, **options).validate()


def constraints(conn, table: str) -> dict[str, str]:
    """{name: parent table} of the table's foreign keys."""
    return {fk.name: fk.parent for fk in own_foreign_keys(conn, DB, table)}


def indexes(conn, table: str) -> list[tuple[str, str]]:
    """(index name, column) of the table's indexes."""
    return sorted(query(conn, "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                              "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table)))


def refused(conn, sql: str) -> int | None:
    """The server's error code for `sql`, or None when it ran."""
    try:
        query(conn, sql)
    except pymysql.err.MySQLError as exc:
        return exc.args[0]
    return None


def assert_parent_writers_kept(conn, writers: list[ParentWriter]) -> None:
    for w in writers:
        assert w.errors == [] and w.refusals == [], (w.errors[:3], [str(r) for r in w.refusals[:3]])
        assert query(conn, f"SELECT counter FROM {DB}.parent WHERE id = %s", (w.row,))[0][0] == w.increments
        present = {r[0] for r in query(conn, f"SELECT id FROM {DB}.parent WHERE id IN %s",
                                       (w.inserted + w.deleted or [0],))}
        assert present == set(w.inserted), (sorted(set(w.inserted) - present), sorted(present - set(w.inserted)))


def test_a_child_with_a_plain_key_keeps_it_enforced_under_writers_on_child_and_parent(endpoints, conn):
    table = "orders"
    fresh_family(conn, table, rows=5_000, writers=2)
    watch = ConflictWatch(endpoints.mysql, [DB], "parent and family writers")
    parents = [ParentWriter(endpoints.mysql, n, seed=7) for n in range(1, 3)]
    families = [FamilyWriter(endpoints.mysql, table, n) for n in range(1, 3)]
    with Ledger(endpoints.mysql, DB, table, writers=2, seed=31) as ledger:
        for writer in parents + families:
            writer.start()
        try:
            ledger.wait_for_writes(200)
            assert Runner(endpoints, spec_for(table), Progress(quiet=True)).run() == 0
            ledger.wait_for_writes(200)   # writes after the swap count as much as any other
        finally:
            for writer in parents + families:
                writer.stop_event.set()
            for writer in parents + families:
                writer.join()
    ledger.assert_kept(conn)
    assert_parent_writers_kept(conn, parents)
    # the new table holds no key while it lags: no parent DELETE is refused for its rows; the original, renamed,
    # holds its keys until they are dropped right after the swap: at most one cycle per writer meets them then
    assert all(f.refusals == [] and "_osc_new" not in " ".join(f.errors) for f in families), \
        [f.errors for f in families]
    at_swap = [e for f in families for e in f.errors]
    print(f"family cycles {sum(f.cycles for f in families)}; parent deletes refused at the swap: {at_swap}")
    assert len(at_swap) <= len(families) and all("1451" in e and "_osc_old" in e for e in at_swap), at_swap
    assert constraints(conn, spec_for(table).old_table) == {}   # the kept original refuses no parent delete
    assert sum(f.cycles for f in families) > 50
    assert query(conn, f"SELECT COUNT(*) FROM {DB}.{table} WHERE writer >= {FAMILY_WRITER}")[0][0] == 0
    assert_no_tool_deadlock(watch, [r for w in parents + families for r in w.refusals])
    assert constraints(conn, table) == {f"_fk_{table}_parent": "parent"}   # the documented name, on the new table
    # the index the server made for the original's key keeps its name (MariaDB renames it when a key is added)
    assert indexes(conn, table) == indexes(conn, spec_for(table).old_table)
    assert refused(conn, f"INSERT INTO {DB}.{table} (writer, seq, parent_id) VALUES (0, -5, 999999)") == 1452
    assert refused(conn, f"DELETE FROM {DB}.parent WHERE id = 2") == 1451
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{spec_for(table).old_table}"]


def fresh_three(conn, table: str) -> None:
    """parent <- table (two keys: fk_<table>_parent kept, fk_<table>_other dropped by the ALTER) <- grand."""
    fresh_family(conn, table, rows=2_000, writers=1)
    query(conn, f"ALTER TABLE {qualified(DB, table)} ADD COLUMN other_id BIGINT NULL, ADD CONSTRAINT "
                f"fk_{table}_other FOREIGN KEY (other_id) REFERENCES {DB}.parent (id)")
    query(conn, f"CREATE TABLE {DB}.grand (id INT PRIMARY KEY, ref BIGINT NOT NULL, CONSTRAINT fk_grand "
                f"FOREIGN KEY (ref) REFERENCES {qualified(DB, table)} (id)) ENGINE=InnoDB")
    query(conn, f"INSERT INTO {DB}.grand SELECT seq, seq FROM {DB}.seq_10_to_60")


def assert_children_on_the_new_table(conn, table: str) -> None:
    """grand's constraint, rebuilt under its new name, references the swapped-in table and is enforced there."""
    assert constraints(conn, "grand") == {"_fk_grand": table}
    top = query(conn, f"SELECT MAX(id) FROM {qualified(DB, table)}")[0][0]
    query(conn, f"INSERT INTO {qualified(DB, table)} (id, writer, seq) VALUES (%s, 0, -1)", (top + 1,))
    assert refused(conn, f"INSERT INTO {DB}.grand VALUES (1, {top + 1})") is None   # a row only the new table has
    assert refused(conn, f"DELETE FROM {qualified(DB, table)} WHERE id = 10") == 1451
    assert refused(conn, f"INSERT INTO {DB}.grand VALUES (2, {top + 50})") == 1452


def test_children_are_rebuilt_on_the_new_table_and_a_dropped_key_stays_dropped(endpoints, conn):
    table = "items"
    fresh_three(conn, table)
    alter = f"ADD COLUMN note VARCHAR(8) NULL, DROP FOREIGN KEY fk_{table}_other"
    spec = spec_for(table, alter, alter_foreign_keys_method="rebuild", keep_old=False)
    assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
    assert constraints(conn, table) == {f"_fk_{table}_parent": "parent"}
    assert_children_on_the_new_table(conn, table)
    assert leftovers(endpoints, DB, table) == []   # the old table dropped, once nothing referenced it


@pytest.mark.parametrize("finish", ["resume", "abort"])
def test_a_stop_between_the_swap_and_the_rebuild_is_finished_by_resume_or_abort(endpoints, conn, monkeypatch,
                                                                              finish):
    table = f"stopped_{finish}"
    fresh_three(conn, table)
    spec = spec_for(table, alter_foreign_keys_method="rebuild", keep_old=False)

    def stop(self, lock_conn) -> None:
        raise KeyboardInterrupt("stopped right after the swap")
    monkeypatch.setattr(Cutover, "_after_swap", stop)
    with pytest.raises(KeyboardInterrupt):
        Runner(endpoints, spec, Progress(quiet=True)).run()
    monkeypatch.undo()
    # the moment in between: InnoDB moved the child's constraint with the original
    assert constraints(conn, "grand") == {"fk_grand": spec.old_table}
    if finish == "resume":
        done = cli("resume", "--table", f"{DB}.{table}", "--quiet")
        assert done.returncode == 0, done.stderr
        assert leftovers(endpoints, DB, table) == []
    else:
        done = cli("abort", "--table", f"{DB}.{table}")
        assert done.returncode == 6, (done.stdout, done.stderr)   # ALREADY_SWAPPED: the cleanup finished
    assert_children_on_the_new_table(conn, table)


def test_an_attempt_rolled_back_after_adding_the_keys_takes_them_off_the_new_table_again(endpoints, conn,
                                                                                        monkeypatch):
    table = "retried"
    fresh_family(conn, table, rows=2_000, writers=1)
    spec = spec_for(table)
    seen: dict[str, list[dict[str, str]]] = {"in the lock": [], "after the roll-back": []}
    prove, roll_back = Cutover._prove_lease, Cutover._roll_back

    def give_up_once(self, lock_conn, coordinator) -> None:
        if not seen["in the lock"]:
            seen["in the lock"].append(constraints(lock_conn, spec.new_table))
            raise CutoverAborted("given up after the keys were added (test)")
        prove(self, lock_conn, coordinator)

    def rolled_back(self, lock_conn, renamer) -> None:
        roll_back(self, lock_conn, renamer)
        seen["after the roll-back"].append(constraints(lock_conn, spec.new_table))
    monkeypatch.setattr(Cutover, "_prove_lease", give_up_once)
    monkeypatch.setattr(Cutover, "_roll_back", rolled_back)
    assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
    assert seen == {"in the lock": [{f"_fk_{table}_parent": "parent"}], "after the roll-back": [{}]}
    assert constraints(conn, table) == {f"_fk_{table}_parent": "parent"}


def test_a_coordinator_killed_while_a_held_child_waits_for_its_rebuild_is_finished_by_resume(endpoints, conn,
                                                                                            tmp_path):
    table = "killed"
    fresh_three(conn, table)
    holder = connect(endpoints.mysql)   # a transaction that read the child: its rebuild waits for it
    query(holder, "BEGIN")
    query(holder, f"SELECT * FROM {DB}.grand LIMIT 1")
    migrate = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL", "--algorithm",
                        "copy", "--alter-foreign-keys-method", "rebuild", "--lock-wait-timeout", "4", "--lock-tries",
                        "5", "--drop-old", "--quiet", log=tmp_path / "migrate.log")
    try:
        wait_for(lambda: "note" in table_columns(conn, DB, table), 120, "the swap")
        time.sleep(1)   # its rebuild of the child is waiting for the holder
        assert constraints(conn, "grand") == {"fk_grand": helper_table_name(table, "old")}
        assert constraints(conn, helper_table_name(table, "old")) == {}   # dropped first, at once
    finally:
        migrate.send_signal(signal.SIGKILL)
        migrate.wait()
        holder.rollback()
        holder.close()
    done = cli("resume", "--table", f"{DB}.{table}", "--quiet")
    assert done.returncode == 0, (done.stdout, done.stderr, (tmp_path / "migrate.log").read_text())
    assert_children_on_the_new_table(conn, table)
    assert leftovers(endpoints, DB, table) == []


def test_keys_a_coordinator_stopped_in_its_lock_left_on_the_new_table_are_removed_when_it_resumes(endpoints, conn,
                                                                                                 monkeypatch):
    table = "crashed"
    fresh_family(conn, table, rows=2_000, writers=1)
    spec = spec_for(table)

    def crash(self, lock_conn, coordinator) -> None:
        raise KeyboardInterrupt("stopped in the lock, the keys added")
    monkeypatch.setattr(Cutover, "_prove_lease", crash)
    monkeypatch.setattr(Cutover, "_roll_back", lambda self, lock_conn, renamer: None)   # as a kill: nothing undone
    with pytest.raises(KeyboardInterrupt):
        Runner(endpoints, spec, Progress(quiet=True)).run()
    monkeypatch.undo()
    assert constraints(conn, spec.new_table) == {f"_fk_{table}_parent": "parent"}
    seen: list[dict[str, str]] = []
    attempt = Cutover.attempt

    def look_first(self, window_s, coordinator):
        seen.append(constraints(conn, spec.new_table))   # the appliers have run since the resume began
        return attempt(self, window_s, coordinator)
    monkeypatch.setattr(Cutover, "attempt", look_first)
    assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
    assert seen[0] == {}
    assert constraints(conn, table) == {f"_fk_{table}_parent": "parent"}
