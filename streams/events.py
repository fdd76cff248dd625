"""Decoding Debezium change events (JSON converter, schemas disabled) into what appliers need."""
from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal

from core.state import FENCE_KEY_COLUMN


@dataclass(frozen=True)
class ChangeKey:
    """The primary key of one change event, or a fence marker."""

    pk: int | None
    fence_id: int | None = None

    @property
    def is_fence(self) -> bool:
        return self.fence_id is not None


def encode_key(column: str, value: int) -> bytes:
    """The exact key bytes Debezium's JSON converter writes for a one-column key."""
    return json.dumps({column: value}, separators=(",", ":")).encode()


def key_value(value: object) -> int:
    """A key field as an exact int: a JSON integer, a decimal number (an unsigned BIGINT sent precisely:
    parsed as Decimal, never through a float) or a string of digits."""
    if type(value) is int:   # the usual case, on the apply path
        return value
    if not isinstance(value, (Decimal, str)):
        raise ValueError(f"not an integer key: {value!r}")
    exact = Decimal(value)
    if exact != exact.to_integral_value():
        raise ValueError(f"not an integer key: {value!r}")
    return int(exact)


def decode_key(key: bytes | None, pk_column: str) -> ChangeKey | None:
    """Key bytes -> ChangeKey; None for records that are not row changes (e.g. no key)."""
    if not key:
        return None
    doc = json.loads(key, parse_float=Decimal)
    if not isinstance(doc, dict):
        return None
    if FENCE_KEY_COLUMN in doc:
        return ChangeKey(pk=None, fence_id=int(doc[FENCE_KEY_COLUMN]))
    if pk_column in doc:
        return ChangeKey(pk=key_value(doc[pk_column]))
    return None


def fence_token(value: bytes | None) -> str | None:
    """The token a fence row carried (its state after the change), if any."""
    if not value:
        return None
    after = json.loads(value).get("after") or {}
    return after.get("token")


@dataclass(frozen=True)
class ChangeEvent:
    """A decoded change event: operation, primary key and source position (for display and tests)."""

    op: str
    pk: int
    table: str
    gtid: str | None
    file: str | None
    pos: int | None


def decode_event(key: bytes, value: bytes, pk_column: str) -> ChangeEvent | None:
    """Full decode of one row-change event (slower than decode_key; not on the apply path)."""
    change_key = decode_key(key, pk_column)
    if change_key is None or change_key.is_fence or not value:
        return None
    doc = json.loads(value)
    source = doc.get("source") or {}
    return ChangeEvent(op=doc.get("op", "?"), pk=change_key.pk, table=source.get("table", ""),
                       gtid=source.get("gtid"), file=source.get("file"), pos=source.get("pos"))
