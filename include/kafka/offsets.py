"""What a Kafka source's positions mean: the reader options of a starting position, and the topics' partitions and
offsets on the broker (asked with confluent-kafka, no Spark) that a checkpoint's offsets are checked against."""

from __future__ import annotations

import time
from dataclasses import dataclass

from include.kafka.broker import BrokerError, admin_metadata
from include.registry.sources import parse_timestamp


def starting_options(position: str) -> dict[str, str]:
    """Spark's Kafka reader options of a new checkpoint's start: `earliest`, `latest` or an ISO-8601 timestamp
    (each partition from its first message at or after it; partitions with none from their end)."""
    if position in ("earliest", "latest"):
        return {"startingOffsets": position}
    millis = int(parse_timestamp(position).timestamp() * 1000)
    return {"startingTimestamp": str(millis), "startingOffsetsByTimestampStrategy": "latest"}


@dataclass(frozen=True)
class PartitionRange:
    """A partition's offsets on the broker: [earliest, latest) are readable (earliest > 0 after retention)."""

    topic: str
    partition: int
    earliest: int
    latest: int


def topic_ranges(bootstrap: str, topics: tuple[str, ...], timeout: float = 10.0) -> dict[str, list[PartitionRange]]:
    """Each topic's partitions with their earliest and latest offsets; a topic the broker lacks maps to [].
    BrokerError (one line) when no broker answers at `bootstrap`, or it gives no offsets of a partition."""
    from confluent_kafka import TopicPartition

    admin, metadata = admin_metadata(bootstrap, timeout)
    ranges: dict[str, list[PartitionRange]] = {}
    for topic in topics:
        info = metadata.topics.get(topic)
        ranges[topic] = []
        if info is None or info.error is not None:
            continue
        for partition in sorted(info.partitions):
            low, high = partition_offsets(admin, TopicPartition(topic, partition), bootstrap, timeout)
            ranges[topic].append(PartitionRange(topic, partition, low, high))
    return ranges


def partition_offsets(admin, partition, bootstrap: str, timeout: float) -> tuple[int, int]:
    """A partition's earliest and latest offsets, asked again while the broker answers with a passing error or an
    unknown offset (a broker just back elects its partitions' leaders: NOT_LEADER_FOR_PARTITION, or offset -1, for a
    moment); BrokerError (one line) when it does not answer within `timeout`, or with another error.

    Each offset is asked on its own (AdminClient.list_offsets): the consumer's get_watermark_offsets turns an unknown
    earliest offset into the latest one, which reads as if every message of the partition were gone."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import OffsetSpec

    passing = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
               KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN}
    deadline = time.monotonic() + timeout
    while True:
        try:
            offsets = tuple(admin.list_offsets({partition: spec}, request_timeout=timeout)[partition].result().offset
                            for spec in (OffsetSpec.earliest(), OffsetSpec.latest()))
            if min(offsets) >= 0:
                return offsets
            problem, passes = f"offsets {offsets[0]}, {offsets[1]} not known yet", True
        except KafkaException as exc:
            error = exc.args[0]
            problem, passes = error.str(), error.retriable() or error.code() in passing
        if not passes or time.monotonic() >= deadline:
            raise BrokerError(f"the broker at {bootstrap} gave no offsets of {partition.topic} partition "
                              f"{partition.partition} ({problem})")
        time.sleep(PASSING_ERROR_PAUSE_SECONDS)


PASSING_ERROR_PAUSE_SECONDS = 0.5


def require_topics(bootstrap: str, topics: tuple[str, ...]) -> dict[str, list[PartitionRange]]:
    """The topics' ranges; BrokerError naming the broker or the missing topics."""
    ranges = topic_ranges(bootstrap, topics)
    missing = [t for t, parts in ranges.items() if not parts]
    if missing:
        raise BrokerError(f"topic(s) {', '.join(missing)} do not exist on the broker at {bootstrap}: create them "
                          "(`lakehouse generate --to kafka` does) or fix the registry's kafka.topic")
    return ranges
