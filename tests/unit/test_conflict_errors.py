"""A duplicate on the PRIMARY key is a race between two re-copies of one key (retried), never the new
table refusing a row (which stops the migration)."""
from __future__ import annotations

import pymysql

from applier.conflicts import primary_key_race, refused_by_new_table


def duplicate(key: str) -> pymysql.err.IntegrityError:
    return pymysql.err.IntegrityError(1062, f"Duplicate entry '5' for key '{key}'")


def test_primary_key_duplicate_is_a_race_not_a_refusal():
    for key in ("PRIMARY", "shop.orders_osc_new.PRIMARY"):     # MariaDB, MySQL 8 spelling
        assert primary_key_race(duplicate(key)) and not refused_by_new_table(duplicate(key))


def test_unique_key_duplicate_and_bad_value_are_refusals():
    assert refused_by_new_table(duplicate("uk")) and not primary_key_race(duplicate("uk"))
    assert refused_by_new_table(duplicate("primary_email")) and refused_by_new_table(duplicate("IS_PRIMARY"))
    assert refused_by_new_table(pymysql.err.IntegrityError(1048, "Column 'name' cannot be null"))
