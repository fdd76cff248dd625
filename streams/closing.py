"""Closing a Kafka consumer without letting the close hold the caller forever.

librdkafka's close can block without end (confluent-kafka-python issue 1667: its internal main thread
never finishes terminating, e.g. while a group join is in flight or a broker is restarting). An applier
that raised, or was stopped, would then never hand its error or its thread back, and the coordinator
would wait on it with every other worker held. The close runs in a daemon thread instead; after
`timeout_s` the caller goes on and the consumer finishes (or not) in the background. Nothing is lost:
an applier commits its offsets itself after each batch, so a close that never ends only leaves its
member to expire after session.timeout.ms, as a killed process's does. The tool's other long-lived
consumers (the cutover's fence reader, the capture-lag readers) are closed the same way.

A member of a group (an applier) unsubscribes before its close. Closed while its group rebalanced, a member that
had been told to rejoin and had not yet sent its JoinGroup was closed without a LeaveGroup (librdkafka 2.16,
cooperative-sticky): the broker kept it in the group until its session timed out, holding the rebalance, and with
it the other members' JoinGroup, their commits and so their closes (measured: the cutover's stop of two appliers
took 9.1-9.8 s in 3 of 5 small migrations; in 8 of 12 stops of two members of a forming group, their closes took
5 s and the group still listed both when they returned). Unsubscribed first, every member left in 12 such stops,
and the cutover's stop took under 0.1 s in 5 of 5 migrations. The unsubscribe may not be bounded as the close is (it
waits for librdkafka's main thread and may hold the interpreter meanwhile); it comes before the close, while that
thread still serves requests, and the hangs above are in the close's termination.

Not covered: a close that serves a rebalance event can hang inside confluent-kafka's rebalance handling, in
`rd_kafka_assign` (librdkafka issues 4527 and 4884), and that handling holds the interpreter, so every thread of the
process stops, the bounded wait here included (seen once, in a test, as a move stopped its appliers before the
validation snapshot). Serving the revoke by polling between the unsubscribe and the close was tried: the old members
then stayed in the group until their sessions timed out, and every resume waited about 10 s.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from core.logs import log_event

log = logging.getLogger("stream_osc.streams")

CLOSE_WAIT_S = 15.0


class Closable(Protocol):
    def close(self) -> None: ...


class Member(Closable, Protocol):
    def unsubscribe(self) -> None: ...


def close_within(consumer: Closable, what: str, timeout_s: float = CLOSE_WAIT_S) -> bool:
    """Close `consumer`, waiting at most `timeout_s`; False (and a warning) when the close did not finish."""
    return _close_within(consumer.close, what, timeout_s)


def leave_and_close_within(member: Member, what: str, timeout_s: float = CLOSE_WAIT_S) -> bool:
    """Leave the group (an unsubscribe), then close, as close_within: a member closed mid-rebalance otherwise
    stays in its group until its session times out."""
    def leave_and_close() -> None:
        try:
            member.unsubscribe()
        finally:
            member.close()
    return _close_within(leave_and_close, what, timeout_s)


def _close_within(close_consumer: Callable[[], None], what: str, timeout_s: float) -> bool:
    def close() -> None:
        try:
            close_consumer()
        except Exception as exc:  # noqa: BLE001 - a failed close ends the consumer all the same
            log_event(log, "consumer close failed", logging.WARNING, consumer=what, error=str(exc))

    closing = threading.Thread(target=close, name=f"close-{what}", daemon=True)
    closing.start()
    closing.join(timeout_s)
    if closing.is_alive():
        log_event(log, "consumer close did not finish; left to finish in the background", logging.WARNING,
                  consumer=what, waited_s=timeout_s)
        return False
    return True
