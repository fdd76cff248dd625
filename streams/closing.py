"""Closing a Kafka consumer without letting the close hold the caller forever.

librdkafka's close can block without end (confluent-kafka-python issue 1667: its internal main thread
never finishes terminating, e.g. while a group join is in flight or a broker is restarting). An applier
that raised, or was stopped, would then never hand its error or its thread back, and the coordinator
would wait on it with every other worker held. The close runs in a daemon thread instead; after
`timeout_s` the caller goes on and the consumer finishes (or not) in the background. Nothing is lost:
an applier commits its offsets itself after each batch, so a close that never ends only leaves its
member to expire after session.timeout.ms, as a killed process's does. The tool's other long-lived
consumers (the cutover's fence reader, the capture-lag readers) are closed the same way.
"""
from __future__ import annotations

import logging
import threading
from typing import Protocol

from core.logs import log_event

log = logging.getLogger("stream_osc.streams")

CLOSE_WAIT_S = 15.0


class Closable(Protocol):
    def close(self) -> None: ...


def close_within(consumer: Closable, what: str, timeout_s: float = CLOSE_WAIT_S) -> bool:
    """Close `consumer`, waiting at most `timeout_s`; False (and a warning) when the close did not finish."""
    def close() -> None:
        try:
            consumer.close()
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
