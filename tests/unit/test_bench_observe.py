"""The benchmark tells in which stage commit-to-applied probes were slow (bench/observe.py): pure logic."""
from __future__ import annotations

from bench.observe import Observer, Sample, p99


def test_probes_are_grouped_by_the_stage_they_were_sent_in():
    observer = Observer(endpoints=None, table=None, after_id=0)
    observer.samples = [Sample(1.0, "copy", 0, 0, 10), Sample(5.0, "validate", 100, 50, 5),
                        Sample(8.0, "cutover", 100, 80, 0)]
    observer.probes = [(0.5, 40.0), (1.5, 100.0), (4.9, 900.0), (5.0, 30.0), (7.9, 20.0), (8.5, 60.0)]
    assert observer.latency_by_stage() == {"init": [40.0, 1], "copy": [900.0, 2], "validate": [30.0, 2],
                                           "cutover": [60.0, 1]}


def test_p99_is_the_value_below_which_99_percent_lie():
    values = [float(v) for v in range(1, 201)]
    assert p99(values) == 199.0 and p99([7.0]) == 7.0
