"""A `worker` works only on a migration coordinated by its own protocol (core/state.py: PROTOCOL): pure logic."""
from __future__ import annotations

import pytest

from core.state import PROTOCOL
from core.state_records import Migration
from core.stages import Stage, Status
from migration.checks import PreflightError
from migration.worker_process import check_protocol


def coordinated_by(protocol: int | None) -> Migration:
    return Migration(7, "shop", "Orders", "ADD COLUMN n INT", Stage.COPY, Status.RUNNING, "p", ("id",), None, 0,
                     None, None, {}, protocol)


def test_the_same_protocol_is_worked_on():
    check_protocol(coordinated_by(PROTOCOL))


@pytest.mark.parametrize("protocol, said", [(PROTOCOL - 1, f"protocol {PROTOCOL - 1}"),
                                            (PROTOCOL + 1, f"protocol {PROTOCOL + 1}"),
                                            (None, "a version from before protocol stamps")])
def test_another_protocol_is_refused_naming_both_and_the_way_to_upgrade(protocol, said):
    with pytest.raises(PreflightError) as refused:
        check_protocol(coordinated_by(protocol))
    message = str(refused.value)
    assert "migration 7 of `shop`.`Orders`" in message and f"coordinated by {said}" in message
    assert f"this worker speaks protocol {PROTOCOL}" in message and "`pause`" in message
