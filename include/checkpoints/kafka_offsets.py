"""A checkpoint's Kafka offsets: what its offset log says each batch read of each topic and partition, and that
checked against the topics on the broker (a re-created topic, lost partitions, offsets deleted unread) before a resume.
The broker's side (topic ranges, starting options) is include/kafka/offsets.py."""

from __future__ import annotations

import json
from dataclasses import dataclass

from include import checkpoints
from include.kafka.offsets import topic_ranges
from include.storage.paths import StoragePath


def checkpoint_offsets(checkpoint: StoragePath) -> dict[str, dict[int, int]]:
    """{topic: {partition: next offset to read}} of the checkpoint's Kafka sources, as its latest committed batch
    left them (its first planned batch when none committed); {} when it holds none."""
    batch = checkpoints.latest_committed_batch(checkpoint)
    batch = batch if batch is not None else checkpoints.latest_offsets_batch(checkpoint)
    return {} if batch is None else batch_offsets(checkpoint, batch)


def batch_offsets(checkpoint: StoragePath, batch: int) -> dict[str, dict[int, int]]:
    """{topic: {partition: offset}} of the Kafka sources in the offset log's entry of `batch` (where that batch
    ends); {} when the entry is gone or holds no Kafka offsets."""
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
