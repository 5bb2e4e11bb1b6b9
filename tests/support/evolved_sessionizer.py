"""A later version of the sessionizer whose open-session state has one more field (the session's largest value):
what a processor author may add to a state variable without a new checkpoint (Avro-encoded state)."""

from __future__ import annotations

from pyspark.sql.types import DoubleType, StructField, StructType

from spark_jobs.processors.sessionizer import OPEN, Sessionizer

OPEN_WITH_PEAK = StructType([*OPEN.fields, StructField("peak", DoubleType())])


class PeakTracking:
    """The `session` value state as the sessionizer sees it (4 fields), stored with a fifth: the peak value. A row
    written by the earlier version reads its peak as null."""

    def __init__(self, state):
        self.state = state

    def exists(self) -> bool:
        return self.state.exists()

    def get(self) -> tuple:
        return tuple(self.state.get())[:4]

    def update(self, row: tuple) -> None:
        before = tuple(self.state.get()) if self.state.exists() else None
        added = row[3] if before is None or row[2] == 1 else row[3] - before[3]  # the event's value
        peak = added if before is None or row[2] == 1 or before[4] is None else max(before[4], added)
        self.state.update((*row, peak))

    def clear(self) -> None:
        self.state.clear()


class SessionizerWithPeak(Sessionizer):
    def open_state(self, handle) -> None:
        self.session = PeakTracking(handle.getValueState("session", OPEN_WITH_PEAK))
