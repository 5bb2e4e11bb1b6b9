"""Waiting for what a database committed to reach its topics, and for a new snapshot; what its topics lost. Debezium
delivers a committed change within moments, but a run that reads the topics (the demo's backfill, a benchmark, a full
refresh after a new snapshot) must not start before the last one is there.

The expected messages are counted, not guessed from the WAL: each change of a captured table is one message on its
table's topic, and a delete one more (its tombstone)."""

from __future__ import annotations

import json
import time
from collections import Counter

from include.cdc.database import CdcError
from include.kafka.offsets import topic_ranges
from include.registry import Registry


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Each topic's messages so far (the sum of its partitions' latest offsets)."""
    return {topic: sum(p.latest for p in ranges) for topic, ranges in topic_ranges(bootstrap, tuple(topics)).items()}


def expected_messages(registry: Registry, transactions: list[dict]) -> Counter:
    """The messages `transactions` (the shop generator's oracle lines) put on each captured table's topic."""
    topics = {s.cdc.table: s.cdc.topic for sources in registry.cdc_sources().values() for s in sources}
    counted: Counter = Counter()
    for transaction in transactions:
        for change in transaction["changes"]:
            if change["table"] in topics:
                counted[topics[change["table"]]] += 2 if change["op"] == "d" else 1
    return counted


def wait_captured(bootstrap: str, before: dict[str, int], expected: Counter, timeout: float = 120.0) -> None:
    """Wait until each topic holds `expected` more messages than `before`; CdcError naming the topics behind."""
    deadline = time.monotonic() + timeout
    while True:
        now = end_offsets(bootstrap, list(expected))
        behind = {t: before.get(t, 0) + n - now.get(t, 0) for t, n in expected.items() if now.get(t, 0) < before.get(
            t, 0) + n}
        if not behind:
            return
        if time.monotonic() > deadline:
            raise CdcError(f"the database's changes did not all reach their topics within {timeout:.0f} s (missing: "
                           + ", ".join(f"{t} {n}" for t, n in sorted(behind.items()))
                           + "): `lakehouse cdc status` shows the connector")
        time.sleep(0.5)


def lost_messages(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """The topics that no longer hold their first messages (retention, or a truncation, deleted them), each with how
    many are gone (its partitions' earliest offsets, summed). BrokerError when no broker answers."""
    lost = {topic: sum(p.earliest for p in ranges) for topic, ranges in topic_ranges(bootstrap, tuple(topics)).items()}
    return {topic: gone for topic, gone in lost.items() if gone}


SNAPSHOT_ENDS = ("last", "last_in_data_collection")  # Debezium's `source.snapshot` on a table's last snapshot row


def wait_snapshot_read(bootstrap: str, topics: list[str], since: dict[str, dict[int, int]],
                       timeout: float = 600.0) -> None:
    """Wait until each topic holds, after its partitions' offsets `since`, the last row of a snapshot (Debezium marks
    it in `source.snapshot`); CdcError naming the topics without one."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakehouse-snapshot-wait",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(t, p, offset) for t in topics for p, offset in since.get(t, {}).items()])
    waiting, deadline = set(topics), time.monotonic() + timeout
    try:
        while waiting and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() or not message.value():
                continue
            source = (json.loads(message.value()) or {}).get("source") or {}
            if str(source.get("snapshot")) in SNAPSHOT_ENDS:
                waiting.discard(message.topic())
    finally:
        consumer.close()
    if waiting:
        raise CdcError(f"no new snapshot reached {', '.join(sorted(waiting))} within {timeout:.0f} s: "
                       "`lakehouse cdc status` shows the connector")


def partition_ends(bootstrap: str, topics: list[str]) -> dict[str, dict[int, int]]:
    """Each topic's partitions' latest offsets (where the next message goes)."""
    return {topic: {p.partition: p.latest for p in ranges}
            for topic, ranges in topic_ranges(bootstrap, tuple(topics)).items()}
