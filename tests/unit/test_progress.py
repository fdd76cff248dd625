"""Progress display: bar, ETA, rate."""
import io

import pytest

from core.state_records import Chunk
from monitor.progress import CopyRate, Progress, bar, copy_fraction, format_duration


def test_bar_and_duration():
    assert bar(0.5, 10) == "[#####-----]"
    assert bar(2.0, 4) == "[####]"



@pytest.mark.parametrize("seconds, shown", [
    (0, "0s"), (42, "42s"), (42.4, "42s"), (59.6, "1m00s"), (65, "1m05s"), (185, "3m05s"), (3600, "1h00m"),
    (3725, "1h02m"), (86_399, "23h59m"), (3 * 86_400 + 4 * 3600 + 59, "3d04h"), (-5, "0s"),
])
def test_durations_read_as_gh_ost_prints_them(seconds, shown):
    """One helper for every duration a terminal shows (progress line, `status`, `list`): the two largest units."""
    assert format_duration(seconds) == shown


def test_copy_rate_and_eta():
    rate = CopyRate()
    rate.sample(0.0, 0, now=100.0)
    rows_per_s, eta = rate.sample(0.25, 1000, now=110.0)
    assert rows_per_s == 100.0
    assert eta == 30.0


def test_progress_lines_on_a_pipe():
    out = io.StringIO()
    progress = Progress(stream=out, interval_s=0)
    progress.copy(0.5, 500, 1, 2, rate=250.0, eta=2.0, force=True)
    progress.say("done")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("copy [") and "500 rows" in lines[0] and "250 rows/s" in lines[0]
    assert lines[-1] == "done"


def test_copy_fraction_counts_rows_not_key_span():
    # one chunk done, one half copied, one far-away key range untouched
    chunks = [Chunk(0, 1, 100, 101, 100, True), Chunk(1, 101, 200, 151, 50, False), Chunk(2, 201, 10**9, 201, 0, False)]
    assert copy_fraction(chunks, 100) == (1.0 + 0.5 + 0.0) / 3
    assert copy_fraction([Chunk(0, 1, 9, 5, 500, False)], 100) == 0.99     # never 100 % before done
    assert copy_fraction([], 100) == 1.0


def test_the_first_sample_gives_no_rate_rather_than_zero():
    rate = CopyRate()
    assert rate.sample(0.1, 100, now=5.0) == (None, None)
    out = io.StringIO()
    Progress(stream=out, interval_s=0).copy(0.1, 100, 0, 2, force=True)
    assert "? rows/s" in out.getvalue() and "ETA ?" in out.getvalue()
