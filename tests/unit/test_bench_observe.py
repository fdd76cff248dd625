"""The benchmark tells in which stage commit-to-applied probes were slow (bench/observe.py): pure logic."""
from __future__ import annotations

import threading

from confluent_kafka import KafkaError, KafkaException

from bench import observe
from bench.observe import Observer, ProbeBook, Sample, p99


def test_probes_are_grouped_by_the_stage_they_were_sent_in():
    observer = Observer(endpoints=None, table=None, after_id=0)
    observer.samples = [Sample(1.0, "copy", 0, 0, 10), Sample(5.0, "validate", 100, 50, 5),
                        Sample(8.0, "cutover", 100, 80, 0)]
    observer.probes = [(0.5, 40.0), (1.5, 100.0), (4.9, 900.0), (5.0, 30.0), (7.9, 20.0), (8.5, 60.0)]
    assert observer.latency_by_stage() == {"init": [40.0, 1], "copy": [900.0, 2], "validate": [30.0, 2],
                                           "cutover": [60.0, 1]}


def test_the_backlog_is_what_the_copy_left_unapplied_not_what_was_applied_during_it():
    observer = Observer(endpoints=None, table=None, after_id=0)
    observer.samples = [Sample(1.0, "copy", 0, 0, 10), Sample(9.0, "copy", 1000, 200_000, 300),
                        Sample(10.0, "validate", 1000, 200_100, 6_000), Sample(13.0, "validate", 1000, 212_000, 500)]
    figures = observer.figures(rows=1000)
    assert figures["backlog_events"] == 6_000
    assert figures["apply_capacity_events_per_s"] == round(11_900 / 3.0)


def test_p99_is_the_value_below_which_99_percent_lie():
    values = [float(v) for v in range(1, 201)]
    assert p99(values) == 199.0 and p99([7.0]) == 7.0


def test_a_probe_overwritten_before_it_was_applied_is_counted_when_a_later_value_of_its_row_shows():
    """Apply writes the row as it is then: probe 1's own value never shows once probe 3 overwrote it first."""
    book = ProbeBook([10, 11])
    book.sent(1, 10, at=0.0)
    book.sent(2, 11, at=0.1)
    book.sent(3, 10, at=0.2)
    assert book.shown(10, "probe", now=0.3) == []        # the row as copied, before any probe
    assert book.shown(10, "probe-3", now=0.9) == [(0.0, 900.0), (0.2, 700.0)]
    assert book.shown(10, "probe-3", now=1.0) == []      # counted once
    assert book.unseen() == 1                            # probe 2 never showed


def test_sampling_goes_on_past_a_sample_that_met_the_migrations_topics_removed(monkeypatch):
    """The cleanup deletes the change topic while the sampler may be reading its offsets: that sample is missed,
    the sampler does not die (it did, and the rest of the run had no samples)."""
    observer = Observer(endpoints=type("E", (), {"mysql": None, "redis_url": "redis://"})(), table=None, after_id=0,
                        interval=0.0)
    monkeypatch.setattr(observe, "connect", lambda addr: type("C", (), {"close": lambda self: None})())
    monkeypatch.setattr(observe.redis.Redis, "from_url", staticmethod(lambda url: None))
    observer.stop_event = threading.Event()
    calls: list[int] = []

    def sample(store, client) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        observer.stop_event.set()

    monkeypatch.setattr(observer, "_sample", sample)
    observer._sample_loop()
    assert len(calls) == 2
