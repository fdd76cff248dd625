"""Which target sessions the identity check lets through (core/target_identity.py): the recorded token on the
recorded server only; a same-named table elsewhere, and the token on a server of another id, are refused."""
from __future__ import annotations

import json

from core.target_identity import TARGET_IDENTITY_OPTION, ServerIdentity, TargetIdentity, mismatch

TARGET = ServerIdentity(2, None, "HE1oBYpRNSRxEsBPcANHMRXCsJI=", "db2", 3306)
RECORDED = TargetIdentity("0123456789abcdef0123456789abcdef", TARGET)


def test_the_recorded_server_holding_its_token_passes_whatever_its_host_name_says():
    moved_container = ServerIdentity(2, None, "another-mac=", "db2-restarted", 3306)
    assert mismatch(RECORDED, True, moved_container, "db2:3306") is None


def test_a_server_without_the_token_is_refused_naming_what_was_expected_and_found():
    other = ServerIdentity(1, None, "vIfmJEDFYDe9po8I0fmksOgqQ5Q=", "db1", 3306)
    reason = mismatch(RECORDED, False, other, "db1:3306")
    assert reason is not None and "without that token" in reason
    assert RECORDED.token in reason and "server_id 2" in reason and "server_id 1" in reason and "db1:3306" in reason


def test_the_same_server_id_without_the_token_is_still_another_server():
    """Every server starts with server_id 1: the id alone never proves the target."""
    assert mismatch(RECORDED, False, TARGET, "db2:3306") is not None


def test_the_token_on_a_server_of_another_id_or_uuid_is_refused_with_the_way_to_accept_it():
    for found in (ServerIdentity(3, None, None, "replica", 3306),
                  ServerIdentity(2, "3e11fa47-71ca-11e1-9e33-c80aa9429562", None, "db2", 3306)):
        reason = mismatch(RECORDED, True, found, "db2:3306")
        assert reason is not None and "holds this migration's token but is another server" in reason
        assert "accept-target" in reason


def test_the_identity_reads_back_from_the_stored_options_and_none_when_not_recorded():
    options = json.loads(json.dumps({TARGET_IDENTITY_OPTION: RECORDED.option()}))
    assert TargetIdentity.from_options(options) == RECORDED
    assert TargetIdentity.from_options({}) is None
