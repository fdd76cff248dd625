"""Primary keys of any shape: one or more columns of integer, decimal, string, binary or temporal type.

Why this module exists: a key is compared, ordered and matched by the server only. Python never sorts
keys or decides two keys are the same row (a `_general_ci` key `User1@x` equals `uSER1@X`, `'a'`
equals `'a '` under PAD SPACE); it only carries the values the server or Debezium gave it back into
SQL, where the column's own collation decides. Keys are tuples of the values PyMySQL returns (int,
str, bytes, Decimal, date, datetime, timedelta), one per key column, in key order.

Ranges are half-open `[start, end)` over the key's index order, `None` meaning unbounded; the SQL
compares them lexicographically with a form both MariaDB's and MySQL's range optimizers turn into an
index range (MariaDB scans the whole table for a row-constructor `(a, b) >= (x, y)`).
"""
from __future__ import annotations

import base64
import functools
import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterable, Sequence

import pymysql

from core.db import query, quote_ident

Key = tuple[Any, ...]

INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
# what a change event gives for a zero date (or one with a zero year, month or day) in a NOT NULL column of each
# type that has no DEFAULT
EPOCH_BY_TYPE: dict[str, date] = {"date": date(1970, 1, 1), "datetime": datetime(1970, 1, 1),
                                  "timestamp": datetime(1970, 1, 1)}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
TEMPORAL_TYPES = {"date", "datetime", "timestamp", "time", "year"}
DECIMAL_TYPES = {"decimal", "numeric"}
SUPPORTED_TYPES = INTEGER_TYPES | STRING_TYPES | BINARY_TYPES | TEMPORAL_TYPES | DECIMAL_TYPES

# Key types refused, with the reason an operator is told.
UNSUPPORTED_TYPES = {
    "float": "approximate values: a key read back as a decimal literal may not equal the stored value",
    "double": "approximate values: a key read back as a decimal literal may not equal the stored value",
    "real": "approximate values: a key read back as a decimal literal may not equal the stored value",
    "enum": "ENUM sorts by member number but compares with strings by text, so key ranges cannot be cut",
    "set": "SET sorts by member number but compares with strings by text, so key ranges cannot be cut",
    "bit": "BIT values arrive from the binlog in a form that cannot be matched back exactly",
}

_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class KeyColumn:
    """One primary-key column as information_schema describes it."""

    name: str
    data_type: str
    column_type: str
    octet_length: int | None
    datetime_precision: int | None
    collation: str | None = None
    default: str | None = None   # COLUMN_DEFAULT as information_schema gives it

    @property
    def ident(self) -> str:
        return quote_ident(self.name)

    @property
    def comparison(self) -> str:
        """How the server compares, orders and stores this column's key values: two key columns with the
        same comparison hold the same value for a row and select the same rows for a key range. Integer
        widths and signedness, string lengths and VARBINARY lengths may differ; a DECIMAL scale, a
        fractional-seconds precision or a BINARY length may not (the server would round or pad the key)."""
        kind = self.data_type
        if kind in INTEGER_TYPES:
            return "integer"
        if kind in DECIMAL_TYPES:
            scale = re.search(r",\s*(\d+)\)", self.column_type)
            return f"decimal scale {scale.group(1) if scale else 0}"
        if kind in STRING_TYPES:
            # CHAR drops trailing spaces: 'a ' and 'a', two keys of a VARCHAR under a NO PAD collation, are one in a
            # CHAR (under PAD SPACE they are one key either way)
            dropped = ", trailing spaces dropped" if kind == "char" and pads_no_space(self.collation) else ""
            return f"text {self.collation}{dropped}"
        if kind == "binary":
            return f"binary({self.octet_length})"
        if kind in BINARY_TYPES:
            return "bytes"
        if kind in ("datetime", "timestamp", "time"):
            return f"{kind}({self.datetime_precision or 0})"
        return kind

    @functools.cached_property
    def zero_date_stand_ins(self) -> tuple[date, ...]:
        """What a change key holds in this column for a date with a zero year, month or day, which has no Java
        date: Debezium sends the column's DEFAULT in its place if it has one (DATE, DATETIME), else the epoch; a
        zero TIMESTAMP is the epoch second itself, no real TIMESTAMP holds (applier/zero_dates.py)."""
        if self.data_type not in EPOCH_BY_TYPE:
            return ()
        epoch = EPOCH_BY_TYPE[self.data_type]
        literal = (self.default or "").strip("'")
        if self.data_type == "timestamp" or not re.fullmatch(r"\d{4}-\d\d-\d\d( \d\d:\d\d:\d\d(\.\d+)?)?", literal):
            return (epoch,)
        try:
            default = (date.fromisoformat(literal[:10]) if self.data_type == "date"
                       else datetime.fromisoformat(literal if " " in literal else literal + " 00:00:00"))
        except ValueError:   # itself a zero date: sent as the epoch
            return (epoch,)
        return (epoch, default)

    def from_change(self, value: Any) -> Any:
        """A key field of a Debezium change key (JSON converter, schemas off) as the SQL parameter that
        matches the row: the encodings follow the connector settings in connectors/config.py."""
        kind = self.data_type
        if kind in INTEGER_TYPES or kind == "year":
            return exact_int(value)
        if kind in DECIMAL_TYPES:
            return Decimal(str(value))
        if kind in STRING_TYPES:
            return value
        if kind in BINARY_TYPES:
            raw = base64.b64decode(value)
            # BINARY(n) is stored padded with 0x00 and compared with every byte; the binlog drops the padding
            if kind == "binary" and self.octet_length and len(raw) < self.octet_length:
                raw = raw.ljust(self.octet_length, b"\0")
            return raw
        if kind == "date":                       # io.debezium.time.Date: days since the epoch
            return (_EPOCH + timedelta(days=int(value))).date()
        if kind == "datetime":                   # Timestamp (ms) up to 3 digits, MicroTimestamp (µs) above
            if (self.datetime_precision or 0) <= 3:
                return _EPOCH + timedelta(milliseconds=int(value))
            return _EPOCH + timedelta(microseconds=int(value))
        if kind == "timestamp":                  # ZonedTimestamp: ISO-8601 in UTC; sessions run in UTC
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(timezone.utc) \
                .replace(tzinfo=None)
        if kind == "time":                       # MicroTime: microseconds
            return timedelta(microseconds=int(value))
        raise ValueError(f"key column {self.name} has unsupported type {self.data_type}")


def exact_int(value: object) -> int:
    """An integer key field exactly: a JSON integer, or a decimal number or string (an unsigned BIGINT sent
    precisely), never through a float."""
    if type(value) is int:
        return value
    if not isinstance(value, (Decimal, str)):
        raise ValueError(f"not an integer key: {value!r}")
    exact = Decimal(value)
    if exact != exact.to_integral_value():
        raise ValueError(f"not an integer key: {value!r}")
    return int(exact)


@dataclass(frozen=True)
class PrimaryKey:
    """A table's primary key and the SQL that selects keys, key lists and key ranges of it."""

    columns: tuple[KeyColumn, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column_list(self, table: str | None = None) -> str:
        """`a`, `b` (qualified by `table` if given): for SELECT lists and ORDER BY in index order."""
        prefix = f"{table}." if table else ""
        return ", ".join(prefix + c.ident for c in self.columns)

    def in_list(self, count: int, table: str | None = None) -> str:
        """`a` IN (%s, …) or (`a`, `b`) IN ((%s, %s), …) for `count` keys; parameters from flat()."""
        if len(self.columns) == 1:
            return f"{self.column_list(table)} IN ({', '.join(['%s'] * count)})"
        row = "(" + ", ".join(["%s"] * len(self.columns)) + ")"
        return f"({self.column_list(table)}) IN ({', '.join([row] * count)})"

    def equals(self, table: str | None = None) -> str:
        """`a` = %s AND `b` = %s: one key."""
        prefix = f"{table}." if table else ""
        return " AND ".join(f"{prefix}{c.ident} = %s" for c in self.columns)

    @staticmethod
    def flat(keys: Iterable[Key]) -> list[Any]:
        return [value for key in keys for value in key]

    def in_range(self, start: Key | None, end: Key | None, last: Key | None = None) -> tuple[str, list[Any]]:
        """SQL and parameters for `start <= key < end` (and `key <= last`) in index order; None bounds are open."""
        parts: list[str] = []
        params: list[Any] = []
        for bound, strict, first in ((start, ">", ">="), (end, "<", "<"), (last, "<", "<=")):
            if bound is None:
                continue
            sql, values = self._compare(bound, strict, first)
            parts.append(sql)
            params += values
        return (" AND ".join(parts) or "TRUE"), params

    def after(self, bound: Key) -> tuple[str, list[Any]]:
        """SQL and parameters for `key > bound` in index order."""
        return self._compare(bound, ">", ">")

    def _compare(self, bound: Key, strict: str, last: str) -> tuple[str, list[Any]]:
        """key <op> bound, lexicographically: c1 > v1 OR (c1 = v1 AND c2 > v2) OR … (c1..cn-1 equal, cn
        `last` vn), led by a plain bound on the first column for the range optimizer."""
        cols = [c.ident for c in self.columns]
        if len(cols) == 1:
            return f"{cols[0]} {last} %s", [bound[0]]
        disjuncts: list[str] = []
        params: list[Any] = []
        for i in range(len(cols)):
            op = last if i == len(cols) - 1 else strict
            terms = [f"{cols[j]} = %s" for j in range(i)] + [f"{cols[i]} {op} %s"]
            disjuncts.append("(" + " AND ".join(terms) + ")")
            params += list(bound[:i + 1])
        lead = ">=" if strict == ">" else "<="
        return f"({cols[0]} {lead} %s AND ({' OR '.join(disjuncts)}))", [bound[0], *params]

    @property
    def has_date_columns(self) -> bool:
        """Whether a change key of this table can hold a zero date's stand-in at all (applier/zero_dates.py)."""
        return any(column.data_type in EPOCH_BY_TYPE for column in self.columns)

    def zero_date_positions(self, key: Key) -> tuple[int, ...]:
        """The positions of `key`'s date columns holding a value that stands in for zero dates there (the epoch,
        or the column's DEFAULT: KeyColumn.zero_date_stand_ins)."""
        return tuple(i for i, (column, value) in enumerate(zip(self.columns, key))
                     if any(type(value) is type(stand_in) and value == stand_in
                            for stand_in in column.zero_date_stand_ins))

    def zero_date_family(self, keys: Sequence[Key]) -> tuple[str, list[Any]]:
        """SQL and parameters selecting every row each of `keys` may stand for: in a column where the key holds
        a stand-in, that value or any date with a zero year, month or day; in the others, the key's value."""
        disjuncts: list[str] = []
        params: list[Any] = []
        for key in keys:
            zero = set(self.zero_date_positions(key))
            terms = [f"({c.ident} = %s OR YEAR({c.ident}) = 0 OR MONTH({c.ident}) = 0 OR DAYOFMONTH({c.ident}) = 0)"
                     if i in zero else f"{c.ident} = %s" for i, c in enumerate(self.columns)]
            disjuncts.append("(" + " AND ".join(terms) + ")")
            params += list(key)
        return " OR ".join(disjuncts), params

    @functools.cached_property
    def integer_change_key_prefix(self) -> bytes | None:
        """What a change key opens with when this key is one integer column with a plain name (`{"id":`, the JSON
        converter writing no spaces), the digits and `}` following: appliers read such a key without a JSON
        parser (streams/events.py). None for any other key."""
        if len(self.columns) != 1:
            return None
        column = self.columns[0]
        if not (column.data_type in INTEGER_TYPES or column.data_type == "year") \
                or not re.fullmatch(r"[A-Za-z0-9_]+", column.name):
            return None
        return b'{"' + column.name.encode("ascii") + b'":'

    def from_change(self, doc: dict[str, Any]) -> Key | None:
        """The key of a Debezium change key document, or None if it is not this table's key."""
        try:
            return tuple(c.from_change(doc[c.name]) for c in self.columns)
        except KeyError:
            return None


class KeyUnreadable(Exception):
    """The primary key's columns could not all be described."""

    user_facing = True


def primary_key(conn: pymysql.connections.Connection, database: str, table: str) -> PrimaryKey:
    """The table's primary key in key order (no columns when it has none).

    Two lookups joined here, not one SQL join: MariaDB answers each information_schema query by schema and
    table name from that table's definition alone, but a join of two such views opens every table of the
    server (0.15 s at 10,000 tables, on every run context and worker start)."""
    names = [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
                                       "TABLE_SCHEMA=%s AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY' "
                                       "ORDER BY ORDINAL_POSITION", (database, table))]
    if not names:
        return PrimaryKey(())
    columns = query(conn, "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_OCTET_LENGTH, DATETIME_PRECISION, "
                          "COLLATION_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND "
                          "TABLE_NAME=%s", (database, table))
    described = {r[0].lower(): r[1:] for r in columns}
    undescribed = [name for name in names if name.lower() not in described]
    if undescribed:   # changed between the two reads, or hidden from COLUMNS: no key is better than a wrong one
        raise KeyUnreadable(f"the primary key of {database}.{table} names columns information_schema.COLUMNS "
                            f"does not show ({', '.join(undescribed)}); was the table changed just now?")
    key = []
    for name in names:
        data_type, column_type, octets, precision, collation, default = described[name.lower()]
        key.append(KeyColumn(name, data_type.lower(), column_type.lower(), None if octets is None else int(octets),
                             None if precision is None else int(precision), collation, default))
    return PrimaryKey(tuple(key))


# Keys in the metadata schema (chunk bounds): JSON, exact for every value type PyMySQL returns.
def dump_key(key: Sequence[Any] | None) -> str | None:
    """A key as JSON text that load_key turns back into the same values (None stays None)."""
    return None if key is None else json.dumps([_dump_value(v) for v in key], separators=(",", ":"))


def load_key(text: str | bytes | None) -> Key | None:
    return None if text is None else tuple(_load_value(v) for v in json.loads(text))


def _dump_value(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"not a key value: {value!r}")
    if isinstance(value, (int, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Decimal):
        return {"n": str(value)}
    if isinstance(value, datetime):
        return {"dt": value.isoformat()}
    if isinstance(value, date):
        return {"d": value.isoformat()}
    if isinstance(value, timedelta):
        return {"us": (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds}
    raise ValueError(f"not a key value: {value!r}")


def _load_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    (tag, payload), = value.items()
    if tag == "b":
        return base64.b64decode(payload)
    if tag == "n":
        return Decimal(payload)
    if tag == "dt":
        return datetime.fromisoformat(payload)
    if tag == "d":
        return date.fromisoformat(payload)
    if tag == "us":
        return timedelta(microseconds=payload)
    raise ValueError(f"unknown key value tag {tag!r}")


def pads_no_space(collation: str | None) -> bool:
    """Whether a collation compares trailing spaces ('a ' and 'a' differ): MariaDB's `*_nopad_*` ones and MySQL 8's
    UCA 9.0.0 ones (`utf8mb4_0900_*`, `utf8mb4_ja_0900_*`, …), which are NO PAD."""
    name = (collation or "").lower()
    return "nopad" in name or "_0900_" in name


def show_key(pk: PrimaryKey, key: Key) -> str:
    """A key for messages: `a=1, b='x'`."""
    return ", ".join(f"{name}={value!r}" for name, value in zip(pk.names, key))
