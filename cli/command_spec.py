"""A command's migration spec: its arguments over the config file's [migration] section, and, for `resume` and
`cutover`, the ALTER and options stored with the table's unfinished migration."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from cli.arguments import STORED_ONLY, metadata_schema
from cli.endpoints import command_endpoints
from core.db import connect
from core.endpoints import refuse_password_on_command_line
from core.options import BY_FIELD
from core.spec import TARGET_OPTIONS, MigrationSpec, load_migration_file
from core.state import StateStore
from migration.checks import PreflightError

# The spec fields an option or the config file's [migration] section may set (each option's dest is the field).
SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(MigrationSpec)) - {"database", "table", "alter"}


def config_file(args: argparse.Namespace) -> str | None:
    """The config file of this command: --config, else STREAM_OSC_CONFIG, else none."""
    return getattr(args, "config", None) or os.environ.get("STREAM_OSC_CONFIG") or None


def spec_from_args(args: argparse.Namespace, alter_required: bool = True) -> MigrationSpec:
    path = config_file(args)
    file_values = load_migration_file(path) if path else {}
    table = args.table or file_values.pop("table", None)
    file_values.pop("table", None)
    if not table:
        raise PreflightError("--table DB.TABLE is required")
    alter = getattr(args, "alter", None) or file_values.pop("alter", None)
    file_values.pop("alter", None)
    values = dict(file_values)
    if alter is None and (getattr(args, "target_dsn", None) is not None or file_values.get("target_server")):
        alter = ""   # a move to another server may leave the table's definition as it is
    if alter is None:
        if alter_required:
            raise PreflightError("--alter is required")
        alter, stored = _stored_migration(args, table, file_values.get("metadata_schema"))
        values.update({k: stored[k] for k in TARGET_OPTIONS if k in stored})
        for field in STORED_ONLY:   # said once: a config file shared with `migrate` may hold them
            if field in file_values and field in stored and file_values[field] != stored[field]:
                print(f"stream-osc: {BY_FIELD[field].key} = {file_values[field]!r} in [migration] of {path} is "
                      f"not used: the migration keeps {stored[field]!r} from `stream-osc migrate`", file=sys.stderr)
    for name in SPEC_FIELDS:   # --cutover, --keep-old/--drop-old and --dry-run (migrate only) included
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    if getattr(args, "target_dsn", None) is not None:
        if args.target_dsn:
            refuse_password_on_command_line(args.target_dsn)
        values["target_server"] = True
    return MigrationSpec.from_table_arg(table, alter, **values)


def given_options(args: argparse.Namespace) -> frozenset[str]:
    """Spec fields set for this run, on the command line or in the config file: on `resume` they replace the
    values stored with the migration where that is allowed (migration/resuming.py, KEPT_UNLESS_GIVEN)."""
    path = config_file(args)
    file_keys = set(load_migration_file(path)) if path else set()
    return frozenset(file_keys | {name for name in SPEC_FIELDS if getattr(args, name, None) is not None})


def _stored_migration(args: argparse.Namespace, table: str, schema: str | None) -> tuple[str, dict]:
    """The ALTER and options of the table's unfinished migration (for resume/cutover/abort)."""
    endpoints = command_endpoints(args)
    db, tbl = spec_table(table)
    conn = connect(endpoints.mysql)
    try:
        migration = StateStore(conn, metadata_schema(args, schema)).active(db, tbl)
    finally:
        conn.close()
    if migration is None:
        raise PreflightError(f"no unfinished migration of {table}")
    return migration.alter_sql, migration.options


def spec_table(table: str) -> tuple[str, str]:
    """DB.TABLE -> (db, table), with the same error as migrate."""
    spec = MigrationSpec.from_table_arg(table, "-")
    return spec.database, spec.table
