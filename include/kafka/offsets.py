"""What a Kafka source's positions mean: the reader options of a starting position, and the topics' partitions and
offsets on the broker (asked with confluent-kafka, no Spark) that a checkpoint's offsets are checked against."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from include.kafka.broker import LIBRDKAFKA_LOG, BrokerError
from include.registry.sources import parse_timestamp
from include.storage.paths import StoragePath


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
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": int(timeout * 1000),
                         "logger": LIBRDKAFKA_LOG})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise BrokerError(f"broker unreachable at {bootstrap} ({exc.args[0].str()})") from None
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


def checkpoint_offsets(checkpoint: StoragePath) -> dict[str, dict[int, int]]:
    """{topic: {partition: next offset to read}} of the checkpoint's Kafka sources, as its latest committed batch
    left them (its first planned batch when none committed); {} when it holds none."""
    from include import checkpoints

    batch = checkpoints.latest_committed_batch(checkpoint)
    batch = batch if batch is not None else checkpoints.latest_offsets_batch(checkpoint)
    return {} if batch is None else batch_offsets(checkpoint, batch)


def batch_offsets(checkpoint: StoragePath, batch: int) -> dict[str, dict[int, int]]:
    """{topic: {partition: offset}} of the Kafka sources in the offset log's entry of `batch` (where that batch
    ends); {} when the entry is gone or holds no Kafka offsets."""
    from include import checkpoints

    try:
        texts = checkpoints.source_offsets(checkpoint, batch)
    except FileNotFoundError:
        return {}
    offsets: dict[str, dict[int, int]] = {}
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict) and value and all(
                isinstance(parts, dict) and all(str(p).isdigit() and isinstance(o, int) for p, o in parts.items())
                for parts in value.values()):
            for topic, parts in value.items():
                offsets.setdefault(topic, {}).update({int(p): o for p, o in parts.items()})
    return offsets


def skipped_offsets(start: dict[str, dict[int, int]], end: dict[str, dict[int, int]],
                    first_read: dict[tuple[str, int], int]) -> list[str]:
    """The offsets a batch passed over without reading them, one line per partition: from where the batch started
    (`start`, the previous batch's end) to the first offset it read (`first_read`; its `end` when it read none).
    Only retention (or a truncation) deletes a partition's first offsets, and only `failOnDataLoss=false` goes on."""
    lines = []
    for topic, partitions in sorted(start.items()):
        for partition, offset in sorted(partitions.items()):
            upto = first_read.get((topic, partition), end.get(topic, {}).get(partition, offset))
            if upto > offset:
                lines.append(f"data lost: topic {topic} partition {partition}: offsets {offset}..{upto - 1} were "
                             f"deleted (retention) before being read; fail_on_data_loss: false, so the job went on "
                             f"from offset {upto}")
    return lines


@dataclass(frozen=True)
class TopicCheck:
    """What the broker says of a checkpoint's Kafka offsets: `problems` block a resume (the topic was re-created,
    lost partitions, or retention deleted unread messages and the source fails on data loss); `notes` do not."""

    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    read: dict[str, dict[int, int]] | None = None
    on_broker: dict[str, dict[int, tuple[int, int]]] | None = None


def check_checkpoint(bootstrap: str, topics: tuple[str, ...], checkpoint: StoragePath, fail_on_data_loss: bool) -> TopicCheck:
    """The checkpoint's offsets of `topics` against the topics on the broker (BrokerError when none answers)."""
    read = {t: o for t, o in checkpoint_offsets(checkpoint).items() if t in topics}
    if not read:
        return TopicCheck()
    ranges = topic_ranges(bootstrap, tuple(read))
    on_broker = {t: {r.partition: (r.earliest, r.latest) for r in parts} for t, parts in ranges.items()}
    problems, notes = [], []
    for topic, offsets in sorted(read.items()):
        partitions = on_broker.get(topic) or {}
        if not partitions:
            problems.append(f"topic {topic} no longer exists on {bootstrap} (the checkpoint read it up to offsets "
                            f"{_offsets_text(offsets)})")
            continue
        gone = sorted(set(offsets) - set(partitions))
        if gone:
            problems.append(f"topic {topic} has {len(partitions)} partition(s), fewer than the checkpoint's "
                            f"{len(offsets)}: partition(s) {', '.join(map(str, gone))} are gone")
        for partition, offset in sorted(offsets.items()):
            if partition not in partitions:
                continue
            earliest, latest = partitions[partition]
            if offset > latest:
                problems.append(f"topic {topic} partition {partition} ends at offset {latest}, before the checkpoint's "
                                f"{offset}: the topic was deleted and re-created (or truncated)")
            elif offset < earliest:
                lost = (f"topic {topic} partition {partition}: offsets {offset}..{earliest - 1} were deleted by "
                        "retention before being read")
                (problems if fail_on_data_loss else notes).append(
                    lost + ("" if fail_on_data_loss else " (fail_on_data_loss: false: the job goes on from "
                                                         f"{earliest}, and the loss is an _ops/alerts row)"))
        new = sorted(set(partitions) - set(offsets))
        if new:
            notes.append(f"topic {topic}: partition(s) {', '.join(map(str, new))} are new since the checkpoint and are "
                         "read from their earliest offsets")
    return TopicCheck(tuple(problems), tuple(notes), read, on_broker)


def _offsets_text(offsets: dict[int, int]) -> str:
    return ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items()))
