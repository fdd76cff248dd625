"""How full the redo log is, from MariaDB's and MySQL's own figures, and the reason it gives to hold back."""
from __future__ import annotations

import pytest

from core.spec import ConfigError, MigrationSpec
from throttle.redo_fill import redo_fill_percent, redo_reason


def test_mariadbs_checkpoint_age_is_measured_against_its_limit():
    assert redo_fill_percent({"innodb_checkpoint_age": 30, "innodb_checkpoint_max_age": 40}, None) == 75.0


def test_mysqls_lsn_distance_is_measured_against_the_redo_capacity():
    values = {"innodb_redo_log_current_lsn": 1_500, "innodb_redo_log_checkpoint_lsn": 1_000}
    assert redo_fill_percent(values, 2_000) == 25.0
    assert redo_fill_percent(values, None) is None   # capacity unknown: not judged


def test_a_server_reporting_neither_is_not_judged():
    assert redo_fill_percent({}, None) is None
    assert redo_fill_percent({"innodb_checkpoint_age": 5, "innodb_checkpoint_max_age": 0}, None) is None
    assert redo_reason(None, 75) is None


def test_the_reason_names_the_fill_the_limit_and_the_option_and_0_is_off():
    assert redo_reason(80.4, 75) == "redo log 80% full >= 75% of its checkpoint limit (--max-redo-fill)"
    assert redo_reason(74.9, 75) is None
    assert redo_reason(100.0, 0) is None


@pytest.mark.parametrize("value", [-1, 100])
def test_a_limit_outside_1_to_99_other_than_0_is_refused(value):
    with pytest.raises(ConfigError, match="--max-redo-fill"):
        MigrationSpec(database="d", table="t", alter="ADD COLUMN c INT", max_redo_fill=value).validate()
