"""Lag through every stage: capture lag from capture heartbeats, the applier group's backlog, a `lag` log line.

The coordinator runs one `LagWatch` from the end of init to the end of cutover. Each second it
stamps the capture heartbeat row (streams/capture_heartbeat.py) and waits for the stamp in the
capture heartbeat topic. Capture lag is then the age of the oldest stamp not yet seen there (it
grows by a second per second while the connector is stopped, paused or stuck, and by how far it is
behind the binlog), or, when every stamp was seen, how long the last one took: near zero for a
healthy connector, however idle the table. The stamps never enter the change topic: the appliers'
lag counts only the application's changes and fences.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from typing import Any

import pymysql
import redis
from confluent_kafka import Consumer, KafkaException

from core import redis_keys
from core.db import DatabaseUnreachable, close_quietly, connect
from core.endpoints import Endpoints
from core.logs import log_event
from core.state import StateStore
from core.state_records import Migration
from core.stages import Status
from monitor.metrics import LOG_EVERY_S, MigrationMetrics
from streams.capture_heartbeat import CaptureReader, write_stamp
from streams.closing import close_within
from streams.topics import TopicNames, consumer_lag, group_reader

log = logging.getLogger("stream_osc.lag")

STAMP_EVERY_S = 1.0
BACKLOG_EVERY_S = 5.0      # the applier group's lag is read from Kafka this often, unless the coordinator's
                           # own waits read it meanwhile (MigrationMetrics.backlog_age)
NOTE_TTL_S = 10            # the figures `status` shows expire unless renewed


class CaptureLagClock:
    """Capture lag from the stamps written and the newest stamp seen in the change topic (pure logic)."""

    def __init__(self) -> None:
        self.unseen: deque[float] = deque()   # stamps written and not seen yet, oldest first
        self.last_delay: float | None = None

    def written(self, stamp: float) -> None:
        self.unseen.append(stamp)

    def seen(self, stamp: float, now: float) -> None:
        """The capture heartbeat topic holds `stamp` (and so every earlier stamp: one row, one partition, in order)."""
        while self.unseen and self.unseen[0] <= stamp:
            self.unseen.popleft()
        self.last_delay = max(now - stamp, 0.0)

    def lag(self, now: float) -> float | None:
        """Seconds capture is behind: the oldest unseen stamp's age, else the last stamp's delay (None: none yet)."""
        if self.unseen and (self.last_delay is None or now - self.unseen[0] > self.last_delay):
            return now - self.unseen[0]
        return self.last_delay


class LagWatch:
    """A daemon thread measuring capture lag and the applier backlog, feeding `metrics`, the Redis note that
    `status` reads, and a `lag` log line every `log_every_s`."""

    def __init__(self, endpoints: Endpoints, metadata_schema: str, migration: Migration, partitions: int,
                 metrics: MigrationMetrics, log_every_s: float = LOG_EVERY_S) -> None:
        self.endpoints = endpoints
        self.schema = metadata_schema
        self.migration = migration
        self.partitions = partitions
        self.metrics = metrics
        self.log_every_s = log_every_s
        self.names = TopicNames(migration.prefix, migration.database, migration.table)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lag-watch", daemon=True)

    def start(self) -> "LagWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        clock, reader, conn, backlog, failing = CaptureLagClock(), None, None, None, False
        heartbeat: float | None = None
        logged_at = float("-inf")
        notes = redis.Redis.from_url(self.endpoints.redis_url, socket_timeout=5)
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    if reader is None:
                        reader = CaptureReader(self.endpoints.kafka, self.names.capture_heartbeat,
                                               self.names.heartbeat)
                    if conn is None:
                        conn = connect(self.endpoints.mysql)
                    paused = self._paused(conn)
                    if paused:
                        clock = CaptureLagClock()   # nothing stamped while paused: measured afresh after it
                    heartbeat = self._follow(clock, reader, conn, heartbeat, stamp=not paused)
                    reason = "paused" if paused else None
                    if self.metrics.backlog_age() >= BACKLOG_EVERY_S:   # not read by the coordinator's waits
                        if backlog is None:
                            backlog = group_reader(self.endpoints.kafka, self.migration.group_id)
                        self.metrics.apply_backlog(consumer_lag(backlog, self.names.changes, self.partitions))
                    now = time.time()
                    self._publish(notes, clock.lag(now), None if heartbeat is None else max(now - heartbeat, 0.0),
                                  reason)
                    failing = False
                except (KafkaException, pymysql.err.Error, DatabaseUnreachable, redis.RedisError, OSError) as exc:
                    # the stages meet the same failure and handle it; the figures are only unknown meanwhile
                    if not failing:
                        log_event(log, "lag not measured", logging.WARNING, error=f"{type(exc).__name__}: {exc}")
                    failing = True
                    conn = close_quietly(conn)
                    backlog = _consumer_closed(backlog)
                    self._publish(notes, None, None, "unreachable")
                if started - logged_at >= self.log_every_s:
                    logged_at = started
                    self.metrics.log_lag()
                self._stop.wait(max(STAMP_EVERY_S - (time.monotonic() - started), 0.0))
        finally:
            close_quietly(conn)
            if reader is not None:
                reader.close()
            _consumer_closed(backlog)
            notes.close()

    def _paused(self, conn: pymysql.connections.Connection) -> bool:
        """A paused migration writes nothing to the database, capture heartbeats included."""
        return StateStore(conn, self.schema).status(self.migration.id) == Status.PAUSED

    def _follow(self, clock: CaptureLagClock, reader: CaptureReader, conn: pymysql.connections.Connection,
                heartbeat: float | None, stamp: bool) -> float | None:
        """Stamp the capture heartbeat row (if `stamp`) and read its topic for a stamp interval; returns the newest
        Debezium heartbeat send time known.

        The reading goes on after the stamp is seen: a consumer left unpolled for most of a second was
        measured to deliver the next record up to a second late (librdkafka), which would read as lag.
        """
        if stamp:
            written = time.time()
            write_stamp(conn, self.schema, self.migration.capture_heartbeat_table, written)
            clock.written(written)
        deadline = time.monotonic() + STAMP_EVERY_S
        while not self._stop.is_set() and time.monotonic() < deadline:
            seen, sent = reader.read(timeout=min(max(deadline - time.monotonic(), 0.0), 0.05))
            if seen is not None:
                clock.seen(seen, time.time())
            if sent is not None:
                heartbeat = max(heartbeat or sent, sent)
        return heartbeat

    def _publish(self, notes: redis.Redis, lag_s: float | None, heartbeat_age_s: float | None,
                 reason: str | None = None) -> None:
        """Feed the metrics and renew the note `status` reads; `reason` says why the lag is not measured
        (`paused`: nothing is stamped while paused; `unreachable`: Kafka or the database did not answer)."""
        self.metrics.capture(lag_s, heartbeat_age_s)
        note = capture_note(lag_s, heartbeat_age_s, reason, *self.metrics.copy_estimate)
        try:
            notes.set(redis_keys.capture_note(self.migration.id), json.dumps(note), ex=NOTE_TTL_S)
        except redis.RedisError:
            pass   # `status` then says the figure is not known; the metrics still have it


def capture_note(lag_s: float | None, heartbeat_age_s: float | None, reason: str | None = None,
                 copy_rows_per_s: float | None = None, copy_eta_s: float | None = None) -> dict[str, Any]:
    """The figures `status` shows (cli/status.py), as stored in Redis: the lags (`reason` only while the capture
    lag is unknown) and, while copying, the coordinator's copy rate and ETA (those of its progress line)."""
    def rounded(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)
    return {"capture_lag_s": rounded(lag_s, 3), "heartbeat_age_s": rounded(heartbeat_age_s, 3),
            "reason": reason if lag_s is None else None,
            "copy_rows_per_s": rounded(copy_rows_per_s, 1), "copy_eta_s": rounded(copy_eta_s, 1)}


def _consumer_closed(consumer: Consumer | None) -> None:
    """Close `consumer` if made, never waiting on it for long (streams/closing.py); returns None for the caller's
    variable."""
    if consumer is not None:
        close_within(consumer, "capture-backlog")
    return None
