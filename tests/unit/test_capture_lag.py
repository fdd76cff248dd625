"""Capture lag means how far capture is behind the binlog: it grows while capture heartbeats go unseen
(connector stopped or behind), and falls back to the last heartbeat's delay once they are seen."""
from __future__ import annotations

from monitor.capture_lag import CaptureLagClock
from streams.capture_heartbeat import heartbeat_sent_at, stamp_of


def test_no_figure_before_any_heartbeat_was_seen():
    clock = CaptureLagClock()
    assert clock.lag(100.0) is None
    clock.written(100.0)
    assert clock.lag(100.5) == 0.5


def test_a_healthy_connector_shows_the_delay_of_the_last_heartbeat_however_long_the_table_is_idle():
    clock = CaptureLagClock()
    for second in range(60):
        clock.written(1000.0 + second)
        clock.seen(1000.0 + second, 1000.0 + second + 0.03)
    assert abs(clock.lag(1060.0) - 0.03) < 1e-9


def test_lag_grows_while_heartbeats_go_unseen_and_drops_once_capture_catches_up():
    clock = CaptureLagClock()
    clock.written(10.0)
    clock.seen(10.0, 10.02)
    for second in range(11, 41):       # the connector stops: nothing more is seen
        clock.written(float(second))
    assert clock.lag(41.0) == 30.0
    assert clock.lag(51.0) == 40.0
    clock.seen(40.0, 51.0)             # it resumes and reads the backlog through the newest heartbeat
    assert clock.lag(51.0) == 11.0 and not clock.unseen


def test_a_connector_behind_the_binlog_shows_how_far_behind():
    clock = CaptureLagClock()
    for second in range(0, 30):
        clock.written(float(second))
        if second >= 5:
            clock.seen(float(second - 5), float(second))   # each heartbeat arrives 5 s late
    assert clock.lag(29.0) == 5.0


def test_stamps_and_heartbeat_values_read_back():
    event = b'{"before":{"id":1,"stamped_us":0},"after":{"id":1,"stamped_us":1795452509368250},"op":"u"}'
    assert stamp_of(event) == 1795452509.36825
    assert stamp_of(b'{"before":null,"after":{"id":1,"stamped_us":0},"op":"c"}') is None   # inserted, not stamped
    assert stamp_of(b'{"before":{"id":1},"after":null,"op":"d"}') is None
    assert stamp_of(b"not json") is None and stamp_of(None) is None
    assert heartbeat_sent_at(b'{"ts_ms":1795452509368}') == 1795452509.368
    assert heartbeat_sent_at(b"not json") is None and heartbeat_sent_at(None) is None
