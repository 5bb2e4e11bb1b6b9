"""Debezium change events made by the tests (the envelope Debezium 3.6's PostgreSQL connector writes with JSON
converters without schemas, see docs/operations/cdc.md), put on a topic, and the tables an apply_changes job must
make of them, computed in plain Python (the oracle: SCD type 1 and type 2 from the events in commit order)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

EPOCH = datetime(2026, 12, 7, tzinfo=UTC)


@dataclass(frozen=True)
class Change:
    """One row change as the database committed it: `commit` numbers its transaction in commit order, `step` its
    place inside it; `row` the row after it (a delete: the key alone)."""

    op: str  # c, u, d, r
    row: dict
    commit: int
    step: int = 0
    snapshot_lsn: int = 0  # a snapshot's row: the snapshot's LSN

    @property
    def key(self):
        return self.row["id"]

    @property
    def lsn(self) -> int:
        return self.snapshot_lsn if self.op == "r" else 1000 * self.commit + self.step

    @property
    def last_commit(self) -> int | None:
        """The commit LSN of the transaction delivered before this one (None for a snapshot's rows and the first)."""
        return None if self.op == "r" or self.commit <= 1 else 1000 * (self.commit - 1) + 999

    @property
    def sequence(self) -> tuple:
        """A key's changes in commit order: a snapshot's rows first, then by LSN."""
        return (0 if self.op == "r" else 1, self.lsn)

    @property
    def committed_at(self) -> datetime:
        return EPOCH + timedelta(seconds=self.commit)

    def message(self) -> tuple[bytes, bytes]:
        """(key, value) as Debezium writes them."""
        ts_us = int(self.committed_at.timestamp() * 1_000_000)
        source = {"version": "3.6.1.Final", "connector": "postgresql", "name": "shop", "db": "shop",
                  "schema": "public", "table": "customers", "snapshot": "true" if self.op == "r" else "false",
                  "sequence": json.dumps([None if self.last_commit is None else str(self.last_commit),
                                          str(self.lsn)]),
                  "ts_ms": ts_us // 1000, "ts_us": ts_us, "txId": 700 + self.commit, "lsn": self.lsn, "xmin": None}
        image = {**{k: None for k in self.row}, "id": self.key} if self.op == "d" else self.row
        value = {"before": image if self.op == "d" else None, "after": None if self.op == "d" else self.row,
                 "source": source, "transaction": None, "op": self.op, "ts_ms": ts_us // 1000}
        return json.dumps({"id": self.key}).encode(), json.dumps(value).encode()

    def tombstone(self) -> tuple[bytes, None]:
        return json.dumps({"id": self.key}).encode(), None


def produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes | None]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def messages(changes: list[Change]) -> list[tuple[bytes, bytes | None]]:
    """The topic's messages for `changes`: each change, and a tombstone after a delete."""
    out = []
    for change in changes:
        out.append(change.message())
        if change.op == "d":
            out.append(change.tombstone())
    return out


@dataclass
class Oracle:
    """SCD type 1 and type 2 of the changes seen so far, by sequence (the order they reach the topic in is not
    theirs): each change once, history per transaction."""

    tracked: tuple[str, ...]
    changes: dict[tuple, Change] = field(default_factory=dict)

    def add(self, changes: list[Change]) -> None:
        """Changes delivered in this order; a snapshot's row of a key whose changes were delivered before it (a later
        snapshot) restates what they say: left out."""
        for change in changes:
            captured = any(c.key == change.key and c.op != "r" for c in self.changes.values())
            if change.op != "r" or not captured:
                self.changes.setdefault((change.key, change.sequence), change)

    def type1(self) -> dict:
        latest: dict = {}
        for change in sorted(self.changes.values(), key=lambda c: c.sequence):
            latest[change.key] = change
        return {k: c.row for k, c in latest.items() if c.op != "d"}

    def type2(self) -> list[tuple]:
        """(key, tracked values, untracked values, start, end) of each version."""
        last_in_tx: dict = {}
        for change in sorted(self.changes.values(), key=lambda c: c.sequence):
            last_in_tx[(change.key, change.commit)] = change
        versions, open_by_key = [], {}
        for change in sorted(last_in_tx.values(), key=lambda c: c.sequence):
            current = open_by_key.get(change.key)
            tracked = tuple(change.row.get(c) for c in self.tracked)
            if change.op == "d" or current is None or current["tracked"] != tracked:
                if current is not None:
                    current["end"] = change.committed_at
                    del open_by_key[change.key]
                if change.op != "d":
                    open_by_key[change.key] = {"key": change.key, "tracked": tracked, "start": change.committed_at,
                                               "end": None}
                    versions.append(open_by_key[change.key])
            current = open_by_key.get(change.key)
            if current is not None:
                current["row"] = change.row
        return sorted((v["key"], v["tracked"], json.dumps(v["row"], sort_keys=True), v["start"], v["end"])
                      for v in versions)
