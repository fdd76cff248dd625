"""Which server settings make the swap unsafe (core/swap_preconditions.py): pure logic over the global variables."""
from __future__ import annotations

import pytest

from core.swap_preconditions import MIN_WRITE_LOCK_COUNT, swap_setting_problem

DEFAULTS = {"max_write_lock_count": "4294967295", "wsrep_on": "OFF", "wsrep_provider": "none"}


@pytest.mark.parametrize("is_mariadb", [True, False])
@pytest.mark.parametrize("galera", [{"wsrep_on": "ON"}, {"wsrep_provider": "/usr/lib/galera/libgalera_smm.so"},
                                    {"wsrep_on": "OFF", "wsrep_provider": "/usr/lib64/galera-4/libgalera_smm.so"}])
def test_a_galera_node_is_refused_on_either_server_even_with_wsrep_off(galera, is_mariadb):
    problem = swap_setting_problem({**DEFAULTS, **galera}, is_mariadb)
    assert problem is not None and "Galera node" in problem


def test_group_replication_in_multi_primary_mode_is_refused():
    problem = swap_setting_problem({"group_replication_single_primary_mode": "OFF"}, is_mariadb=False)
    assert problem is not None and "multi-primary" in problem


def test_group_replication_with_one_primary_passes():
    assert swap_setting_problem({"group_replication_single_primary_mode": "ON"}, is_mariadb=False) is None


@pytest.mark.parametrize("count", ["1", "2", str(MIN_WRITE_LOCK_COUNT - 1)])
def test_a_low_max_write_lock_count_is_refused_on_mariadb(count):
    problem = swap_setting_problem({**DEFAULTS, "max_write_lock_count": count}, is_mariadb=True)
    assert problem is not None and f"max_write_lock_count is {count}" in problem


def test_mysql_renames_in_the_lock_session_so_its_max_write_lock_count_does_not_matter():
    assert swap_setting_problem({**DEFAULTS, "max_write_lock_count": "1"}, is_mariadb=False) is None


@pytest.mark.parametrize("variables", [DEFAULTS, {**DEFAULTS, "wsrep_provider": ""},
                                       {"max_write_lock_count": str(MIN_WRITE_LOCK_COUNT)},
                                       {"max_write_lock_count": "18446744073709551615"}, {}])
def test_the_defaults_and_a_server_without_cluster_support_pass(variables):
    assert swap_setting_problem(variables, is_mariadb=True) is None
