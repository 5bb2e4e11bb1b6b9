"""Waiting for what a database committed to reach its topics: Debezium delivers a committed change within moments,
but a run that reads the topics (the demo's backfill, a benchmark) must not start before the last one is there.

The expected messages are counted, not guessed from the WAL: each change of a captured table is one message on its
table's topic, and a delete one more (its tombstone)."""

from __future__ import annotations

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
