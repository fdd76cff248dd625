"""Rules the ALTER adds are enforced as the server's ALTER would: refused with one clear error, a
non-zero exit and nothing left behind, and never by deleting a row (invariants 6, 7 and 9)."""
import pytest

from applier import copy as copy_module
from cli.main import main
from core.db import query
from migration.runner import Runner
from core.spec import MigrationSpec
from monitor.progress import Progress
from tests.integration.helpers import db_conn, leftovers, migration_row, waiting_for_cutover

pytestmark = pytest.mark.integration

DB = "constraints"


def make_table(conn, table: str, ddl: str, rows: list[tuple]) -> None:
    """A fresh DB.table (whatever an earlier run left of its migration removed) holding `rows`."""
    main(["abort", "--table", f"{DB}.{table}"])
    for name in (table, f"{table}_osc_new", f"{table}_osc_old"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{name}")
    query(conn, f"CREATE TABLE {DB}.{table} ({ddl})")
    if rows:
        marks = ", ".join(["%s"] * len(rows[0]))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {DB}.{table} VALUES ({marks})", rows)


def snapshot(conn, table: str) -> tuple[str, list[tuple]]:
    """The table's definition and rows, to prove a refused migration changed nothing."""
    return (query(conn, f"SHOW CREATE TABLE {DB}.{table}")[0][1],
            [tuple(r) for r in query(conn, f"SELECT * FROM {DB}.{table} ORDER BY id")])


def assert_refused(endpoints, conn, capsys, table: str, alter: str, *extra: str) -> str:
    """The migration fails with one clear line, exit 2, nothing left behind and the table unchanged."""
    before = snapshot(conn, table)
    capsys.readouterr()
    code = main(["migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter", alter, "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("stream-osc: error: ") and len(err.strip().splitlines()) == 1, err
    assert leftovers(endpoints, DB, table) == []
    assert snapshot(conn, table) == before
    return err


@pytest.mark.parametrize("batch", ["1", "100"], ids=["rows_in_different_batches", "rows_in_one_batch"])
def test_prefix_unique_key_over_duplicates_is_refused_and_keeps_both_rows(endpoints, conn, capsys, batch):
    make_table(conn, "prefix", "id INT PRIMARY KEY, name VARCHAR(40)", [(1, "abcdefghij-1"), (2, "abcdefghij-2")])
    err = assert_refused(endpoints, conn, capsys, "prefix", "ADD UNIQUE KEY uk (name(10))",
                         "--chunk-size", batch, "--batch-size", batch,
                         "--target-batch-time", "0")
    assert "UNIQUE key 'uk' (name(10))" in err and "share the value ('abcdefghij')" in err
    assert "id=1 (name='abcdefghij-1')" in err and "id=2 (name='abcdefghij-2')" in err


def test_unique_key_under_a_case_insensitive_collation_is_refused_and_keeps_both_rows(endpoints, conn, capsys):
    make_table(conn, "coll", "id INT PRIMARY KEY, name VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, "
                             "UNIQUE KEY uk (name)", [(1, "abc"), (2, "ABC"), (3, "other")])
    err = assert_refused(endpoints, conn, capsys, "coll",
                         "MODIFY name VARCHAR(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
    assert "UNIQUE key 'uk' (name)" in err and "id=1 (name='abc')" in err and "id=2 (name='ABC')" in err


def test_not_null_over_a_null_is_refused_and_keeps_the_row(endpoints, conn, capsys):
    make_table(conn, "nulls", "id INT PRIMARY KEY, name VARCHAR(40)", [(1, "a"), (2, None), (3, "c")])
    err = assert_refused(endpoints, conn, capsys, "nulls", "MODIFY name VARCHAR(40) NOT NULL")
    assert "id=2 (name=NULL): Column 'name' cannot be null (error 1048)" in err


@pytest.mark.parametrize("ddl, alter, row, expected", [
    ("id INT PRIMARY KEY, name VARCHAR(40)", "MODIFY name VARCHAR(5)", (2, "far too long"),
     "id=2 (name='far too long'): Data too long for column 'name' (error 1406)"),
    ("id INT PRIMARY KEY, qty INT", "MODIFY qty TINYINT", (2, 300),
     "id=2 (qty=300): Out of range value for column 'qty' (error 1264)"),
], ids=["varchar_too_long", "int_out_of_range"])
def test_narrowing_type_over_a_value_that_does_not_fit_is_refused(endpoints, conn, capsys, ddl, alter, row, expected):
    make_table(conn, "narrow", ddl, [(1, "ok" if "VARCHAR" in ddl else 1), row])
    err = assert_refused(endpoints, conn, capsys, "narrow", alter)
    assert expected in err


def test_check_constraint_over_a_violating_row_is_refused(endpoints, conn, capsys):
    make_table(conn, "checked", "id INT PRIMARY KEY, qty INT", [(1, 5), (2, -3), (3, 7)])
    err = assert_refused(endpoints, conn, capsys, "checked", "ADD CONSTRAINT qty_positive CHECK (qty >= 0)")
    assert "id=2 (id=2, qty=-3): CONSTRAINT `qty_positive` failed for `constraints`.`checked`" in err


def migrate_in_ten_row_batches(endpoints, table: str, alter: str) -> None:
    """Migrate DB.table with one copy worker in 10-row chunks and batches: its batches come in key order."""
    spec = MigrationSpec(algorithm="copy", database=DB, table=table, alter=alter, copy_workers=1, apply_workers=1,
                         chunk_size=10, batch_size=10, partitions=1).validate()
    assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0


def migrate_moving_a_copied_value(endpoints, monkeypatch, table: str, alter: str) -> list[tuple]:
    """migrate_in_ten_row_batches, with the application moving 'u-5' from row 5 (copied: its copy in the new
    table goes stale) to row 30 just before row 30's batch. Returns row 5 of the new table at the move."""
    app = db_conn(endpoints)
    original = copy_module.copy_batch
    stale_copy: list[tuple] = []
    moved: list[bool] = []

    def copy_after_the_move(c, ctx, chunk_no, lo, hi, last, target=None):
        if (lo is None or lo[0] <= 30) and (hi is None or 30 < hi[0]) and not moved:
            stale_copy.extend(tuple(r) for r in query(c, f"SELECT id, u FROM {DB}.{table}_osc_new WHERE id = 5"))
            query(app, f"UPDATE {DB}.{table} SET u = 'moved' WHERE id = 5")
            query(app, f"UPDATE {DB}.{table} SET u = 'u-5' WHERE id = 30")
            moved.append(True)
        return original(c, ctx, chunk_no, lo, hi, last, target)

    monkeypatch.setattr(copy_module, "copy_batch", copy_after_the_move)
    try:
        migrate_in_ten_row_batches(endpoints, table, alter)
    finally:
        app.close()
    return stale_copy


def test_stale_copied_row_colliding_under_a_new_unique_key_is_not_a_duplicate(endpoints, conn, monkeypatch):
    """Row 5 is copied with u='u-5'; then the application moves 'u-5' to row 30, before row 30's chunk is
    copied. The collision is with a stale copy, not in the data: the migration completes, every row right."""
    rows = [(i, f"u-{i}") for i in range(1, 41)]
    make_table(conn, "stale", "id INT PRIMARY KEY, u VARCHAR(20)", rows)
    stale_copy = migrate_moving_a_copied_value(endpoints, monkeypatch, "stale", "ADD UNIQUE KEY uk (u)")
    assert stale_copy == [(5, "u-5")]   # the collision did happen with a stale copy
    expected = dict(rows) | {5: "moved", 30: "u-5"}
    assert dict(query(conn, f"SELECT id, u FROM {DB}.stale")) == expected
    assert query(conn, f"SHOW INDEX FROM {DB}.stale WHERE Key_name = 'uk'")
    assert migration_row(conn, DB, "stale").status == "done"


def test_a_stale_collision_is_resolved_in_a_table_whose_auto_increment_column_has_only_a_unique_key(
        endpoints, conn, monkeypatch):
    """A key other than the primary one that is AUTO_INCREMENT and indexed only by a UNIQUE key (a UUID-keyed
    table with a counter beside it): the probe drops the UNIQUE keys, and the server then refuses the probe's
    definition (an AUTO_INCREMENT column must be indexed) unless that column keeps a plain index. A stale
    collision (as in the test above) must resolve, and every row keep its counter value."""
    rows = [(i, i * 3, f"u-{i}") for i in range(1, 41)]
    make_table(conn, "autoinc", "id INT PRIMARY KEY, seq BIGINT NOT NULL AUTO_INCREMENT, u VARCHAR(20), "
                                "UNIQUE KEY seq (seq), UNIQUE KEY uk (u)", rows)
    stale_copy = migrate_moving_a_copied_value(endpoints, monkeypatch, "autoinc",
                                               "ADD COLUMN extra INT NOT NULL DEFAULT 7")
    assert stale_copy == [(5, "u-5")]   # the collision did happen with a stale copy
    expected = {i: (s, u) for i, s, u in rows} | {5: (15, "moved"), 30: (90, "u-5")}
    assert {r[0]: (r[1], r[2]) for r in query(conn, f"SELECT id, seq, u FROM {DB}.autoinc")} == expected
    assert migration_row(conn, DB, "autoinc").status == "done"


def test_a_copy_batch_completes_while_every_round_meets_a_value_moved_out_of_a_copied_row(endpoints, conn,
                                                                                           monkeypatch):
    """The application keeps moving UNIQUE values out of copied rows into row 30, whose batch is being copied:
    each time the batch has checked its rows, 'u-j' leaves row j (copied, its new-table copy now stale) for
    row 30. A round that wrote the source's rows read again, not the rows it checked, met row j's stale copy
    in every round and stopped the migration; the batch must complete, and every write must be in the table."""
    from applier.conflicts import ConstraintCheck
    rows = [(i, f"u-{i}") for i in range(1, 41)]
    make_table(conn, "movedin", "id INT PRIMARY KEY, u VARCHAR(20), UNIQUE KEY uk (u)", rows)
    app = db_conn(endpoints)
    expected = dict(rows)
    original_batch, original_remove = copy_module.copy_batch, ConstraintCheck.remove_stale_collisions
    moved_in: list[int] = []

    def move_into_30(j: int) -> None:
        """Value 'u-j' leaves copied row j for row 30 (row 30's own value is freed)."""
        query(app, f"UPDATE {DB}.movedin SET u = %s WHERE id = %s", (f"gone-{j}", j))
        query(app, f"UPDATE {DB}.movedin SET u = %s WHERE id = 30", (f"u-{j}",))
        expected.update({j: f"gone-{j}", 30: f"u-{j}"})
        moved_in.append(j)

    def copy_after_a_move(c, ctx, chunk_no, lo, hi, last, target=None):
        if (lo is None or lo[0] <= 30) and (hi is None or 30 < hi[0]) and not moved_in:
            move_into_30(1)   # the batch's first write meets row 1's stale copy: its careful rounds begin
        return original_batch(c, ctx, chunk_no, lo, hi, last, target)

    def remove_then_move(constraint_check, keys):
        removed = original_remove(constraint_check, keys)
        if not constraint_check.during_apply and (30,) in keys and len(moved_in) < 12:
            move_into_30(len(moved_in) + 1)
        return removed

    monkeypatch.setattr(copy_module, "copy_batch", copy_after_a_move)
    monkeypatch.setattr(ConstraintCheck, "remove_stale_collisions", remove_then_move)
    try:
        migrate_in_ten_row_batches(endpoints, "movedin", "ADD COLUMN extra INT NOT NULL DEFAULT 7")
    finally:
        app.close()
    assert len(moved_in) >= 2   # the careful round ran, and a value moved after its check
    assert dict(query(conn, f"SELECT id, u FROM {DB}.movedin")) == expected
    assert set(query(conn, f"SELECT extra FROM {DB}.movedin")) == {(7,)}
    assert migration_row(conn, DB, "movedin").status == "done"


def _careful_round(endpoints, conn, table: str, keys: list[tuple], monkeypatch, between_reads) -> tuple[str, list]:
    """One careful round of the copy for `keys` of DB.table: the ConstraintCheck removes the stale collisions in a
    transaction, and `between_reads(app)` commits the application's write right after its first read of the source.
    Returns how the round ended ('cleared', 'moved' or the ConstraintViolated text) and the new table's rows
    after the transaction ended (committed when cleared, else rolled back)."""
    from applier.conflicts import ConstraintCheck, ConstraintViolated, RowsMoved
    from core.table import load_pair
    pair = load_pair(conn, DB, table, f"{table}_osc_new")
    worker, app = db_conn(endpoints), db_conn(endpoints)
    original, reads = ConstraintCheck._insert_source_rows, []

    def write_after_the_first_read(constraint_check, ks):
        found = original(constraint_check, ks)
        reads.append(list(ks))
        if len(reads) == 1:
            between_reads(app)
        return found

    monkeypatch.setattr(ConstraintCheck, "_insert_source_rows", write_after_the_first_read)
    try:
        with ConstraintCheck(worker, pair, during_apply=False) as constraint_check:
            worker.begin()
            try:
                constraint_check.remove_stale_collisions(keys)
                worker.commit()
                outcome = "cleared"
            except RowsMoved:
                worker.rollback()
                outcome = "moved"
            except ConstraintViolated as exc:
                worker.rollback()
                outcome = str(exc)
    finally:
        worker.close()
        app.close()
    assert reads[0] == keys
    rows = sorted(tuple(r) for r in query(conn, f"SELECT * FROM {DB}.{table}_osc_new"))
    query(conn, f"DROP TABLE {DB}.{table}_osc_new")
    return outcome, rows


def test_two_rows_exchanging_a_unique_value_between_the_probes_reads_are_not_a_duplicate(endpoints, conn,
                                                                                         monkeypatch):
    """The copy's batch reads row 2 (u='b'); row 1 of the new table, a stale copy holding 'b', is in its way.
    Before row 1's source row is read, the application swaps the two rows' values in one transaction. The
    source never held 'b' twice: no refusal; the round is tried again, and row 1 is kept until then."""
    make_table(conn, "swapread", "id INT PRIMARY KEY, u VARCHAR(20), UNIQUE KEY uk (u)", [(1, "a"), (2, "b")])
    query(conn, f"CREATE TABLE {DB}.swapread_osc_new LIKE {DB}.swapread")
    query(conn, f"INSERT INTO {DB}.swapread_osc_new VALUES (1, 'b')")   # copied before 1 and 2 swapped twice

    def swap(app):
        app.begin()
        query(app, f"UPDATE {DB}.swapread SET u = NULL WHERE id = 2")
        query(app, f"UPDATE {DB}.swapread SET u = 'b' WHERE id = 1")
        query(app, f"UPDATE {DB}.swapread SET u = 'a' WHERE id = 2")
        app.commit()

    assert _careful_round(endpoints, conn, "swapread", [(2,)], monkeypatch, swap) == ("moved", [(1, "b")])
    assert dict(query(conn, f"SELECT id, u FROM {DB}.swapread")) == {1: "b", 2: "a"}


def test_a_real_duplicate_that_moves_away_between_the_probes_reads_keeps_the_other_row(endpoints, conn,
                                                                                      monkeypatch):
    """Rows 1 and 900 both hold 'x' (the ALTER adds the UNIQUE key); 900 was copied and has not changed, so
    no change of it will come. The probe reads row 1 ('x'), and row 900 of the new table is in its way. Before
    900's source row is read, the application moves row 1 to 'y'. Row 900 is not stale: it must stay."""
    make_table(conn, "realmove", "id INT PRIMARY KEY, u VARCHAR(20)", [(1, "x"), (900, "x")])
    query(conn, f"CREATE TABLE {DB}.realmove_osc_new (id INT PRIMARY KEY, u VARCHAR(20), UNIQUE KEY uk (u))")
    query(conn, f"INSERT INTO {DB}.realmove_osc_new VALUES (900, 'x')")

    def move_away(app):
        query(app, f"UPDATE {DB}.realmove SET u = 'y' WHERE id = 1")

    assert _careful_round(endpoints, conn, "realmove", [(1,)], monkeypatch, move_away) == ("moved", [(900, "x")])


def test_a_real_duplicate_that_stays_between_the_probes_reads_is_refused(endpoints, conn, monkeypatch):
    """As above, but row 1 keeps 'x': the source holds 'x' twice at one moment, and the round refuses."""
    make_table(conn, "realstay", "id INT PRIMARY KEY, u VARCHAR(20)", [(1, "x"), (900, "x")])
    query(conn, f"CREATE TABLE {DB}.realstay_osc_new (id INT PRIMARY KEY, u VARCHAR(20), UNIQUE KEY uk (u))")
    query(conn, f"INSERT INTO {DB}.realstay_osc_new VALUES (900, 'x')")
    outcome, rows = _careful_round(endpoints, conn, "realstay", [(1,)], monkeypatch, lambda app: None)
    assert "share the value ('x'): id=1 (u='x'), id=900 (u='x')" in outcome
    assert rows == [(900, "x")]


@pytest.mark.parametrize("alter, write, expected", [
    ("ADD UNIQUE KEY uk (name(10))", "INSERT INTO {t} VALUES (100, 'abcdefghij-100')",
     ["during the migration breaks UNIQUE key 'uk' (name(10))", "id=1 (name='abcdefghij-1')",
      "id=100 (name='abcdefghij-100')"]),
    ("MODIFY name VARCHAR(40) NOT NULL", "UPDATE {t} SET name = NULL WHERE id = 2",
     ["refuses rows of constraints.appwrite written during the migration",
      "id=2 (name=NULL): Column 'name' cannot be null (error 1048)"]),
], ids=["duplicate_under_new_unique_key", "null_under_new_not_null"])
def test_application_write_breaking_a_new_rule_stops_the_migration_and_deletes_no_row(endpoints, conn, cli_log,
                                                                                       alter, write, expected):
    """The application writes, while the migration waits in sync for its cutover, a row the new definition
    refuses (here: a duplicate of row 1 under the new key, or a NULL): the applier must not replace row 1
    with it nor fail obscurely; the migration stops with one clear error and leaves the table as it is."""
    make_table(conn, "appwrite", "id INT PRIMARY KEY, name VARCHAR(40)",
               [(1, "abcdefghij-1"), (2, "other"), (3, "third")])
    table = f"{DB}.appwrite"
    coordinator = waiting_for_cutover(conn, DB, "appwrite", "--alter", alter, "--quiet", log=cli_log)
    try:
        query(conn, write.format(t=table))
        before = snapshot(conn, "appwrite")
        code = coordinator.wait(120)   # its appliers meet the row
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(30)
    err = cli_log.read_text()
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("stream-osc: error: ")]
    assert len(errors) == 1, err
    for part in expected:
        assert part in errors[0]
    assert leftovers(endpoints, DB, "appwrite") == []
    assert snapshot(conn, "appwrite") == before


def test_lock_session_recopy_resolves_a_stale_collision_and_keeps_its_table_locks(endpoints, conn):
    """recopy_keys in the cutover's lock session (in_transaction=False): a stale row of the new table is
    removed, no other row is touched, and the session still holds its LOCK TABLES afterwards."""
    from applier.recopy import recopy_keys
    from core.table import load_pair
    make_table(conn, "locked", "id INT PRIMARY KEY, u VARCHAR(20)", [(5, "moved"), (7, "seven"), (900, "x")])
    query(conn, f"CREATE TABLE {DB}.locked_osc_new (id INT PRIMARY KEY, u VARCHAR(20), UNIQUE KEY uk (u))")
    query(conn, f"INSERT INTO {DB}.locked_osc_new VALUES (5, 'x'), (7, 'seven')")   # 5 is stale
    pair = load_pair(conn, DB, "locked", "locked_osc_new")
    lock = db_conn(endpoints)
    other = db_conn(endpoints)
    try:
        query(lock, f"LOCK TABLES {DB}.locked WRITE, {DB}.locked_osc_new WRITE")
        assert recopy_keys(lock, pair, [(900,)], in_transaction=False) == (1, 0)
        query(other, "SET SESSION lock_wait_timeout = 1")
        with pytest.raises(Exception, match="Lock wait timeout"):
            query(other, f"INSERT INTO {DB}.locked VALUES (1000, 'blocked')")
        assert [tuple(r) for r in query(lock, f"SELECT id, u FROM {DB}.locked_osc_new ORDER BY id")] == \
               [(7, "seven"), (900, "x")]
        query(lock, "UNLOCK TABLES")
    finally:
        lock.close()
        other.close()
    query(conn, f"DROP TABLE {DB}.locked_osc_new")


def test_recopy_of_a_real_duplicate_deletes_no_row(endpoints, conn):
    """Rows 5 and 900 both hold 'x' in the source: re-copying 900 must refuse, not replace row 5."""
    from applier.conflicts import ConstraintViolated
    from applier.recopy import recopy_keys
    from core.table import load_pair
    make_table(conn, "realdup", "id INT PRIMARY KEY, u VARCHAR(20)", [(5, "x"), (900, "X")])
    query(conn, f"CREATE TABLE {DB}.realdup_osc_new (id INT PRIMARY KEY, "
                f"u VARCHAR(20) COLLATE utf8mb4_general_ci, UNIQUE KEY uk (u))")
    query(conn, f"INSERT INTO {DB}.realdup_osc_new VALUES (5, 'x')")
    pair = load_pair(conn, DB, "realdup", "realdup_osc_new")
    worker = db_conn(endpoints)
    try:
        with pytest.raises(ConstraintViolated,
                           match=r"breaks UNIQUE key 'uk' \(u\) that the ALTER adds: 2 rows share the value "
                                 r"\('[xX]'\): id=5 \(u='x'\), id=900 \(u='X'\)"):
            recopy_keys(worker, pair, [(900,)])
    finally:
        worker.close()
    assert [tuple(r) for r in query(conn, f"SELECT id, u FROM {DB}.realdup_osc_new")] == [(5, "x")]
    query(conn, f"DROP TABLE {DB}.realdup_osc_new")
