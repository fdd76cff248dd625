"""An applier commits only written positions, never waits on a commit, and retries a refused one before its next
step (pure logic, fake consumer)."""
from __future__ import annotations

from confluent_kafka import KafkaError, TopicPartition

from applier.apply import OffsetCommitter


class Written:
    """Stands in for a consumed message whose change was written."""

    def __init__(self, partition: int, offset: int, failed: bool = False) -> None:
        self._partition, self._offset, self._failed = partition, offset, failed

    def topic(self) -> str:
        return "changes"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self._failed else None


class RecordingConsumer:
    """Stands in for a consumer: records stored positions and commits (which must not wait)."""

    def __init__(self) -> None:
        self.stored: list[tuple[int, int]] = []
        self.commits = 0

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        self.stored += [(tp.partition, tp.offset) for tp in offsets]

    def commit(self, asynchronous: bool = True) -> None:
        assert asynchronous is True, "a synchronous commit can hang for good"
        self.commits += 1


class Refused:
    """Stands in for a partition of a commit result that the broker refused (TopicPartition.error is read-only)."""

    def __init__(self, error: KafkaError) -> None:
        self.error = error


def committer_with_consumer() -> tuple[OffsetCommitter, RecordingConsumer]:
    committer, consumer = OffsetCommitter(0), RecordingConsumer()
    committer.consumer = consumer
    return committer, consumer


def test_only_the_positions_after_a_written_batch_are_stored_one_past_each_partitions_last():
    committer, consumer = committer_with_consumer()
    committer.after_batch([Written(0, 5), Written(1, 7), Written(0, 6), Written(2, 9, failed=True)])
    assert sorted(consumer.stored) == [(0, 7), (1, 8)]
    assert consumer.commits == 1


def test_a_commit_refused_mid_rebalance_is_owed_and_retried_retry_owed():
    committer, consumer = committer_with_consumer()
    committer.after_batch([Written(0, 1)])
    committer.on_commit(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), [])
    assert committer.owed
    committer.retry_owed()
    assert not committer.owed and consumer.commits == 2
    committer.retry_owed()
    assert consumer.commits == 2, "nothing is owed, so a retry commits nothing"


def test_a_commit_refused_twice_stays_owed():
    committer, consumer = committer_with_consumer()
    committer.after_batch([Written(0, 1)])
    committer.on_commit(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), [])
    committer.retry_owed()
    committer.on_commit(KafkaError(KafkaError.ILLEGAL_GENERATION), [])
    assert committer.owed
    committer.retry_owed()
    assert not committer.owed and consumer.commits == 3


def test_nothing_to_commit_is_not_owed():
    committer, _ = committer_with_consumer()
    committer.on_commit(KafkaError(KafkaError._NO_OFFSET), [])
    assert not committer.owed


def test_a_commit_refused_for_one_partition_only_is_owed():
    committer, _ = committer_with_consumer()
    committer.on_commit(None, [TopicPartition("changes", 0, 7), Refused(KafkaError(KafkaError.ILLEGAL_GENERATION))])
    assert committer.owed


def test_a_burst_of_refused_commits_is_said_once_until_a_commit_goes_through(caplog):
    committer, _ = committer_with_consumer()
    caplog.set_level("DEBUG", logger="stream_osc.apply")

    def said(level: str) -> int:
        return sum(r.levelname == level for r in caplog.records)

    for _ in range(15):   # every commit in flight when the coordinator went away
        committer.on_commit(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), [])
    assert said("WARNING") == 1
    committer.on_commit(None, [TopicPartition("changes", 0, 7)])
    committer.on_commit(KafkaError(KafkaError.NOT_COORDINATOR), [])
    assert said("WARNING") == 2, "a refusal after a commit went through is a new run, warned again"


def test_a_refusal_because_the_group_rebalanced_is_said_below_warning(caplog):
    """A member leaving (every stop) refuses the commits in flight: routine, so never on a quiet CLI's stderr."""
    committer, _ = committer_with_consumer()
    caplog.set_level("DEBUG", logger="stream_osc.apply")
    for code in (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS):
        committer.on_commit(None, [TopicPartition("changes", 0, 7)])
        committer.on_commit(KafkaError(code), [])
    assert [r.levelname for r in caplog.records] == ["INFO"] * 2
    assert committer.owed


def test_a_rebalance_refusal_does_not_hide_a_warning_worthy_one_after_it(caplog):
    committer, _ = committer_with_consumer()
    caplog.set_level("DEBUG", logger="stream_osc.apply")
    committer.on_commit(KafkaError(KafkaError.ILLEGAL_GENERATION), [])
    committer.on_commit(KafkaError(KafkaError.ILLEGAL_GENERATION), [])
    committer.on_commit(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), [])
    committer.on_commit(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE), [])
    assert [r.levelname for r in caplog.records] == ["INFO", "DEBUG", "WARNING", "DEBUG"]


def test_an_expelled_member_is_warned_of(caplog):
    """UNKNOWN_MEMBER_ID also means this member was expelled (session timeout, a poll too late): not routine."""
    committer, _ = committer_with_consumer()
    caplog.set_level("DEBUG", logger="stream_osc.apply")
    committer.on_commit(KafkaError(KafkaError.UNKNOWN_MEMBER_ID), [])
    assert [r.levelname for r in caplog.records] == ["WARNING"]
