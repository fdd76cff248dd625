"""A consumer's close that never returns must not hold the applier that closes it (streams/closing.py)."""
import threading

from streams.closing import close_within, leave_and_close_within


class StuckConsumer:
    """A close that blocks until released, as librdkafka's can."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def close(self) -> None:
        self.entered.set()
        self.release.wait(30)


class Consumer:
    def __init__(self, error: Exception | None = None) -> None:
        self.closed = False
        self.error = error

    def close(self) -> None:
        self.closed = True
        if self.error is not None:
            raise self.error


def test_a_close_that_never_returns_gives_the_caller_back_after_the_timeout(caplog):
    stuck = StuckConsumer()
    try:
        assert close_within(stuck, "applier-0", timeout_s=0.2) is False
        assert stuck.entered.is_set()
        assert "consumer close did not finish" in caplog.text
    finally:
        stuck.release.set()


def test_a_close_that_returns_is_waited_for():
    consumer = Consumer()
    assert close_within(consumer, "applier-0", timeout_s=5) is True
    assert consumer.closed


def test_a_close_that_fails_is_reported_not_raised(caplog):
    consumer = Consumer(RuntimeError("Consumer closed"))
    assert close_within(consumer, "applier-1", timeout_s=5) is True
    [record] = [r for r in caplog.records if r.getMessage() == "consumer close failed"]
    assert record.fields == {"consumer": "applier-1", "error": "Consumer closed"}


class Member(Consumer):
    def __init__(self, unsubscribe_error: Exception | None = None) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.unsubscribe_error = unsubscribe_error

    def unsubscribe(self) -> None:
        self.calls.append("unsubscribe")
        if self.unsubscribe_error is not None:
            raise self.unsubscribe_error

    def close(self) -> None:
        self.calls.append("close")
        super().close()


def test_a_group_member_leaves_before_it_closes():
    member = Member()
    assert leave_and_close_within(member, "applier-0", timeout_s=5) is True
    assert member.calls == ["unsubscribe", "close"]


def test_a_member_whose_leave_fails_is_closed_all_the_same(caplog):
    member = Member(RuntimeError("Consumer closed"))
    assert leave_and_close_within(member, "applier-0", timeout_s=5) is True
    assert member.calls == ["unsubscribe", "close"]
    assert "consumer close failed" in caplog.text
