"""Which server settings make the swap unsafe (core/swap_preconditions.py): pure logic over the global variables."""
from __future__ import annotations

import pytest

from core.swap_preconditions import MIN_WRITE_LOCK_COUNT, swap_setting_problem

DEFAULTS = {"max_write_lock_count": "4294967295", "wsrep_on": "OFF"}


@pytest.mark.parametrize("is_mariadb", [True, False])
def test_a_galera_node_is_refused_on_either_server(is_mariadb):
    problem = swap_setting_problem({**DEFAULTS, "wsrep_on": "ON"}, is_mariadb)
    assert problem is not None and "wsrep_on is ON" in problem


@pytest.mark.parametrize("count", ["1", "2", str(MIN_WRITE_LOCK_COUNT - 1)])
def test_a_low_max_write_lock_count_is_refused_on_mariadb(count):
    problem = swap_setting_problem({**DEFAULTS, "max_write_lock_count": count}, is_mariadb=True)
    assert problem is not None and f"max_write_lock_count is {count}" in problem


def test_mysql_renames_in_the_lock_session_so_its_max_write_lock_count_does_not_matter():
    assert swap_setting_problem({**DEFAULTS, "max_write_lock_count": "1"}, is_mariadb=False) is None


@pytest.mark.parametrize("variables", [DEFAULTS, {"max_write_lock_count": str(MIN_WRITE_LOCK_COUNT)},
                                       {"max_write_lock_count": "18446744073709551615"}, {}])
def test_the_defaults_and_a_server_without_galera_support_pass(variables):
    assert swap_setting_problem(variables, is_mariadb=True) is None
