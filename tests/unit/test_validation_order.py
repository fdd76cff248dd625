"""Validation ahead's keys are scanned after validation's snapshot is taken (cutover/README.md, "Validation
ahead"): a change made between an earlier scan and the snapshot would be in the snapshot but in no compared key,
so a wrong write of it by an applier would go unseen. Pure logic: the order of the runner's calls."""
from __future__ import annotations

from types import SimpleNamespace

import migration.runner as runner_module
from migration.runner import Runner


def test_keys_changed_since_the_checks_are_read_after_the_snapshot_is_taken(monkeypatch):
    calls: list[str] = []
    runner = object.__new__(Runner)
    runner.spec = SimpleNamespace(validate_ahead=True)
    runner.progress = SimpleNamespace(say=lambda text: None)
    runner.metrics = SimpleNamespace(validation=lambda repaired: None)
    runner._enter_stage = lambda *args, **kwargs: calls.append("cutover stage")
    monkeypatch.setattr(runner, "_consistent_snapshots", lambda ctx, cutover: calls.append("snapshot") or ["s"],
                        raising=False)
    monkeypatch.setattr(runner_module, "reusable_checks",
                        lambda ctx: calls.append("keys scanned") or SimpleNamespace(ranges=[], changed=set()))
    monkeypatch.setattr(runner_module, "validate", lambda ctx, *args: calls.append("compared") or 0)
    monkeypatch.setattr(runner_module, "close_sessions", lambda sessions: calls.append("snapshot closed"))
    runner._validate(SimpleNamespace(pair=SimpleNamespace(remote=False), migration=SimpleNamespace(id=1)), cutover=None)
    assert calls == ["snapshot", "keys scanned", "compared", "snapshot closed", "cutover stage"]
