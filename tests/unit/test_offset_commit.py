"""An applier's refused offset commit is owed and retried before the next step (pure logic, fake consumer)."""
from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from applier.apply import OffsetCommitter


class ScriptedConsumer:
    """Stands in for a consumer whose commits fail with the given error codes, in order, then succeed."""

    def __init__(self, *failures: int) -> None:
        self.failures = list(failures)
        self.commits = 0

    def commit(self, asynchronous: bool = True) -> None:
        assert asynchronous is False
        self.commits += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))


def test_a_commit_refused_mid_rebalance_is_retried_retry_owed():
    consumer = ScriptedConsumer(KafkaError.REBALANCE_IN_PROGRESS)
    committer = OffsetCommitter(consumer, 0)
    committer.after_batch()
    assert committer.owed
    committer.retry_owed()
    assert not committer.owed and consumer.commits == 2
    committer.retry_owed()
    assert consumer.commits == 2, "nothing is owed, so a retry commits nothing"


def test_a_commit_refused_twice_stays_owed():
    consumer = ScriptedConsumer(KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)
    committer = OffsetCommitter(consumer, 0)
    committer.after_batch()
    committer.retry_owed()
    assert committer.owed
    committer.retry_owed()
    assert not committer.owed and consumer.commits == 3


def test_nothing_to_commit_is_not_owed():
    committer = OffsetCommitter(ScriptedConsumer(KafkaError._NO_OFFSET), 0)
    committer.after_batch()
    assert not committer.owed
