"""The suite collects as one: pytest imports test modules by their basename (no __init__.py), so two test files
of one name in different folders stop the whole run at collection."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_no_two_test_files_share_a_name():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1], "rename one of each pair"
