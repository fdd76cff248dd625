"""Helper table names sort after the original in the server's metadata-lock order, for any name."""
from __future__ import annotations

import random
import string

import pytest

from cutover.renamer import rename_queues_on_original
from core.endpoints import ConfigError
from core.spec import MAX_NAME_CHARS, helper_table_name

ALPHABET = string.ascii_letters + string.digits + "_$" + "éß中"


def random_names(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, MAX_NAME_CHARS))) for _ in range(count)]


@pytest.mark.parametrize("table", ["orders", "Orders", "o" * 64, "Z" * 64, "t1", "a" * 57, "_x", "$"]
                         + random_names(300))
def test_helper_names_queue_the_rename_on_the_original(table):
    helpers = [helper_table_name(table, "new"), helper_table_name(table, "old")]
    assert rename_queues_on_original(table, helpers)
    assert all(len(h) <= MAX_NAME_CHARS for h in helpers)
    assert len({table, *helpers}) == 3 and len({table.lower(), *(h.lower() for h in helpers)}) == 3


def test_underscore_prefixed_helpers_would_not_queue_on_a_lowercase_original():
    assert not rename_queues_on_original("orders", ["_orders_new", "_orders_old"])
    assert rename_queues_on_original("Orders", ["_Orders_new", "_Orders_old"]) is False  # folded: '_' < 'o'


def test_a_name_with_no_room_and_no_lower_character_is_refused():
    with pytest.raises(ConfigError, match="no helper table name"):
        helper_table_name("中" * 64, "new")
