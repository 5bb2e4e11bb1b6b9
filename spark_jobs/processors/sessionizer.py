"""`sessionizer`: per key, events at most `gap` apart form a session; an event-time timer closes it."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessorHandle
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from include.registry import JobSpec
from spark_jobs.processors import EventTimeOrdered, epoch_us, timestamp

OPEN = StructType([StructField("start_us", LongType()), StructField("last_us", LongType()),
                   StructField("events", LongType()), StructField("total", DoubleType())])


class Sessionizer(EventTimeOrdered):
    """The open session of a key (first and last event, count, total value). An event more than `gap` after
    the last one closes it (its summary is emitted) and opens the next; the idle timer at last event + gap
    closes the last one and removes the key's state. An initial state table opens sessions for its keys; as
    events come in event-time order, only such a seeded session can see an event before its start: within
    the gap it extends the session back, beyond it the event is dropped (its session was closed elsewhere)."""

    def __init__(self, job: JobSpec):
        super().__init__(job)
        self.gap_us = self.params["gap"] * 1_000_000
        self.idle_after_us = self.gap_us
        self.keys = list(job.transform.keys)

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.session = handle.getValueState("session", OPEN)

    def on_event(self, key: tuple, event_us: int, values: tuple) -> list[dict[str, Any]]:
        (value,) = values
        value = 0.0 if value is None or pd.isna(value) else float(value)
        current = self.session.get() if self.session.exists() else None
        if current is not None:
            start, last, events, total = current
            if start - self.gap_us <= event_us <= last + self.gap_us:
                self.session.update((min(start, event_us), max(last, event_us), events + 1, total + value))
                return []
            if event_us < start:  # before a seeded session, beyond its gap: its session was closed elsewhere
                return []
        self.session.update((event_us, event_us, 1, value))
        return [self._summary(key, current)] if current is not None else []

    def on_idle(self, key: tuple) -> list[dict[str, Any]]:
        return [self._summary(key, self.session.get())] if self.session.exists() else []

    def clear_state(self) -> None:
        self.session.clear()

    def open_from(self, key: tuple, row: dict[str, Any]) -> int | None:
        start, end = (int(epoch_us(pd.Series([row[c]]))[0]) for c in ("session_start", "session_end"))
        total = row.get("total_value")
        self.session.update((start, end, int(row["event_count"]), 0.0 if pd.isna(total) else float(total)))
        return end

    def _summary(self, key: tuple, session: tuple) -> dict[str, Any]:
        start_us, last_us, events, total = session
        return {**dict(zip(self.keys, key, strict=True)), "session_start": timestamp(start_us),
                "session_end": timestamp(last_us), "event_count": int(events), "total_value": float(total),
                "closed_at": timestamp(last_us + self.gap_us)}
