"""Invariant 10 (the tool gives way): a waiting read (a key refused NOWAIT, read again waiting) must ask for one
row lock and nothing else, or it waits for the application's row while holding others.

On a new table on another server, a UNIQUE collision on the target (CollidingKeys) makes a NOWAIT re-copy start again
with the colliding keys added; a held key's waiting read must not: it would lock the lower keys in key order and wait
for the held one. The colliding rows are re-copied on their own first."""
from __future__ import annotations

import pymysql

from applier import giving_way as gw
from applier import recopy
from applier.remote import CollidingKeys

REFUSED = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction")
DUP = pymysql.err.IntegrityError(1062, "Duplicate entry 'x' for key 'u'")


class FakeConn:
    pass


class Pair:
    remote = True
    pk = None


def test_a_waiting_read_on_a_remote_target_is_of_one_key_only(monkeypatch):
    conn, target = FakeConn(), object()
    gw._MARIADB[conn] = True
    reads: list[tuple[list, str]] = []
    stale = {(3,)}   # the target's row 3 is stale: row 5's new value collides with it until 3 is re-copied

    def write_remote_keys(conn_, target_, pair, keys, in_transaction, lock):
        keys = list(keys)
        reads.append((keys, lock))
        if "NOWAIT" in lock and (5,) in keys:
            raise REFUSED                      # the application holds row 5
        if (5,) in keys and stale - set(keys):
            raise CollidingKeys(sorted(stale), DUP)
        stale.difference_update(keys)
        return len(keys), 0

    monkeypatch.setattr(recopy, "_write_remote_keys", write_remote_keys)
    monkeypatch.setattr(recopy, "show_key", lambda pk, key: repr(key))
    monkeypatch.setattr(gw.time, "sleep", lambda s: None)
    recopy.recopy_keys(conn, Pair(), [(5,)], target=target)
    waiting = [keys for keys, lock in reads if "NOWAIT" not in lock]
    assert waiting, "the held key was read waiting"
    assert all(len(keys) == 1 for keys in waiting), \
        f"a waiting read asked for more than the held key's lock: {waiting} (it locks row 3, then waits for row 5)"
    assert not stale and reads[-1] == ([(5,)], " LOCK IN SHARE MODE"), "row 3 re-copied first, then row 5 alone"
