"""Validation ahead's keys are scanned after validation's snapshot is taken (docs/cutover.md, "Validation
ahead"): a change made between an earlier scan and the snapshot would be in the snapshot but in no compared key,
so a wrong write of it by an applier would go unseen. Pure logic: the order of the cutover loop's calls."""
from __future__ import annotations

from types import SimpleNamespace

import migration.cutover_loop as loop_module
from migration.cutover_loop import CutoverLoop


def test_keys_changed_since_the_checks_are_read_after_the_snapshot_is_taken(monkeypatch):
    calls: list[str] = []
    shared = SimpleNamespace(say=lambda text: None, metrics=SimpleNamespace(validation=lambda repaired: None),
                             enter_stage=lambda *args, **kwargs: calls.append("cutover stage"))
    workers = SimpleNamespace(validates_ahead=lambda ctx: True)
    loop = CutoverLoop(shared, supervisor=None, workers=workers, lag=None, blocker_clock=None)
    monkeypatch.setattr(loop, "consistent_snapshots", lambda ctx, cutover: calls.append("snapshot") or ["s"])
    monkeypatch.setattr(loop_module, "reusable_checks",
                        lambda ctx: calls.append("keys scanned") or SimpleNamespace(ranges=[], changed=set()))
    monkeypatch.setattr(loop_module, "validate", lambda ctx, *args: calls.append("compared") or 0)
    monkeypatch.setattr(loop_module, "close_sessions", lambda sessions: calls.append("snapshot closed"))
    loop.validate(SimpleNamespace(pair=SimpleNamespace(remote=False), migration=SimpleNamespace(id=1)), cutover=None)
    assert calls == ["snapshot", "keys scanned", "compared", "snapshot closed", "cutover stage"]
