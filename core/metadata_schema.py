"""The tables of the metadata schema, and what brings a schema made by an earlier version up to date.

Apart from the store that reads and writes their rows (core/state.py): a table's definition and the upgrade that
brings an older one to it change together, and only here."""
from __future__ import annotations

import pymysql

from core.db import qualified, query, quote_ident

# columns added after the first release of the metadata schema: name -> definition
LATER_COLUMNS = {"coordinator": "VARCHAR(200) NULL", "heartbeat_at": "TIMESTAMP(6) NULL", "pk_columns": "TEXT NULL",
                 "cutover_requested_at": "TIMESTAMP(6) NULL", "protocol": "INT NULL"}

# Names and key positions are kept and compared byte for byte: `Orders` and `orders` are two tables (and two
# positions of a binary-collated key), and any name the server accepts fits.
NAME_CHARSET = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

# Chunk positions written by versions that planned integer keys only, and their conversion to keys:
# the inclusive [start_pk, end_pk] becomes the half-open [start_pk, end_pk + 1).
INTEGER_POSITIONS = ("start_pk", "end_pk", "next_pk")
POSITIONS_AS_KEYS = ("start_key = CONCAT('[', start_pk, ']'), "
                     "end_key = CONCAT('[', CAST(end_pk AS DECIMAL(21,0)) + 1, ']'), "
                     "next_key = CONCAT('[', next_pk, ']')")

ER_DUP_FIELDNAME = 1060


def create_tables(conn: pymysql.connections.Connection, schema: str) -> None:
    """Create the metadata schema and its tables (migrations, chunks) if missing."""
    query(conn, f"CREATE DATABASE IF NOT EXISTS {quote_ident(schema)} CHARACTER SET utf8mb4")
    query(conn, f"""CREATE TABLE IF NOT EXISTS {qualified(schema, 'migrations')} (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        db VARCHAR(64) {NAME_CHARSET} NOT NULL, tbl VARCHAR(64) {NAME_CHARSET} NOT NULL,
        alter_sql TEXT NOT NULL,
        stage VARCHAR(16) NOT NULL, status VARCHAR(16) NOT NULL,
        prefix VARCHAR(100) NOT NULL, pk_column VARCHAR(64) {NAME_CHARSET} NOT NULL, pk_columns TEXT NULL,
        error TEXT NULL, validation_diffs BIGINT NOT NULL DEFAULT 0,
        cutover_blocked_ms INT NULL, cutover_at DOUBLE NULL,
        options TEXT NOT NULL,
        active_key VARCHAR(140) {NAME_CHARSET} NULL,
        coordinator VARCHAR(200) NULL, heartbeat_at TIMESTAMP(6) NULL, cutover_requested_at TIMESTAMP(6) NULL,
        protocol INT NULL,
        created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
        updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
        UNIQUE KEY active_key (active_key)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""")
    query(conn, f"""CREATE TABLE IF NOT EXISTS {qualified(schema, 'chunks')} (
        migration_id BIGINT NOT NULL, chunk_no INT NOT NULL,
        start_key TEXT {NAME_CHARSET} NULL, end_key TEXT {NAME_CHARSET} NULL,
        next_key TEXT {NAME_CHARSET} NULL,
        rows_copied BIGINT NOT NULL DEFAULT 0, done TINYINT NOT NULL DEFAULT 0, checked_from TEXT NULL,
        batch_open TINYINT NOT NULL DEFAULT 0, batch_end TEXT {NAME_CHARSET} NULL,
        PRIMARY KEY (migration_id, chunk_no)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""")


def upgrade_earlier_schema(conn: pymysql.connections.Connection, schema: str) -> None:
    """Bring a metadata schema made by an earlier version to this one, keeping its migrations resumable:
    names kept byte for byte, integer chunk positions turned into keys."""
    migrations, chunks = qualified(schema, "migrations"), qualified(schema, "chunks")

    def columns(table: str) -> dict[str, str | None]:
        return {r[0]: r[1] for r in query(conn, "SELECT COLUMN_NAME, COLLATION_NAME FROM "
                                                "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                                                "TABLE_NAME=%s", (schema, table))}
    present = columns("migrations")
    for column, definition in LATER_COLUMNS.items():
        if column not in present:
            try:
                query(conn, f"ALTER TABLE {migrations} ADD COLUMN {quote_ident(column)} {definition}")
            except pymysql.err.OperationalError as exc:   # another process of this version added it first
                if exc.args[0] != ER_DUP_FIELDNAME:
                    raise
    if present.get("tbl") != "utf8mb4_bin":
        query(conn, f"ALTER TABLE {migrations} " + ", ".join(
            f"MODIFY {quote_ident(c)} VARCHAR({n}) {NAME_CHARSET} {null}"
            for c, n, null in (("db", 64, "NOT NULL"), ("tbl", 64, "NOT NULL"), ("pk_column", 64, "NOT NULL"),
                               ("active_key", 140, "NULL"))))
    chunk_columns = columns("chunks")
    if "start_pk" in chunk_columns:
        query(conn, f"ALTER TABLE {chunks} ADD COLUMN start_key TEXT NULL, "
                    "ADD COLUMN end_key TEXT NULL, ADD COLUMN next_key TEXT NULL")
        query(conn, f"UPDATE {chunks} SET {POSITIONS_AS_KEYS}")
        query(conn, f"ALTER TABLE {chunks} " + ", ".join(f"DROP COLUMN {c}" for c in INTEGER_POSITIONS))
    if "checked_from" not in chunk_columns:
        query(conn, f"ALTER TABLE {chunks} ADD COLUMN checked_from TEXT NULL")
    if "batch_open" not in chunk_columns:
        query(conn, f"ALTER TABLE {chunks} ADD COLUMN batch_open TINYINT NOT NULL DEFAULT 0, "
                    f"ADD COLUMN batch_end TEXT {NAME_CHARSET} NULL")
    positions = [c for c, collation in columns("chunks").items()
                 if c in ("start_key", "end_key", "next_key", "batch_end") and collation != "utf8mb4_bin"]
    if positions:   # compared byte for byte
        query(conn, f"ALTER TABLE {chunks} " + ", ".join(f"MODIFY {c} TEXT {NAME_CHARSET} NULL" for c in positions))
