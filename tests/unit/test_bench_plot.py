"""The benchmark plots' stage strip and axis labels: every stage named, no two labels printed over each other."""
from __future__ import annotations

from bench.plot import label_levels, row_label, stage_spans


def test_each_stage_ends_where_the_next_starts_and_the_last_at_the_runs_end():
    spans = stage_spans({"copy": 2.0, "init": 1.0, "validate": 48.5, "cutover": 55.0}, 56.0)
    assert spans == [("init", 1.0, 2.0), ("copy", 2.0, 48.5), ("validate", 48.5, 55.0), ("cutover", 55.0, 56.0)]


def test_short_neighbouring_stages_get_labels_on_different_rows():
    spans = [("copy", 2.0, 48.5), ("apply", 48.5, 49.0), ("validate", 49.0, 49.3), ("cutover", 49.3, 49.8),
             ("cleanup", 49.8, 50.0)]
    levels = label_levels(spans, seconds_per_char=0.35)
    assert levels[0] == 0   # wide enough: named inside its span
    narrow = levels[1:]
    assert 0 not in narrow and all(a != b for a, b in zip(narrow, narrow[1:]))


def test_row_counts_are_labelled_as_an_operator_writes_them():
    assert [row_label(n) for n in (1_000_000, 5_000_000, 250_000, 1_234)] == ["1M", "5M", "250k", "1,234"]
