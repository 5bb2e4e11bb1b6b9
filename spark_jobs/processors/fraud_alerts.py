"""`fraud_alerts`: `failures` failed logins of a key within `within` raise one FRAUD_ALERT, then count again."""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming import StatefulProcessorHandle
from pyspark.sql.types import LongType, StructField, StructType

from include.registry import JobSpec
from spark_jobs.processors import EventTimeOrdered, span, timestamp

FAILURE = "failure"


class FraudAlerts(EventTimeOrdered):
    """Per key, the times of the failed logins still inside the window; a success clears them, so does an
    alert. The window never reaches back more than `within`, so a key idle that long is removed."""

    def __init__(self, job: JobSpec):
        super().__init__(job)
        self.failures_needed = self.params["failures"]
        self.within_us = self.params["within"] * 1_000_000
        self.idle_after_us = self.within_us

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.failures = handle.getListState("failures", StructType([StructField("event_us", LongType())]))

    def on_event(self, key: tuple, event_us: int, values: tuple) -> list[dict[str, Any]]:
        (outcome,) = values
        if outcome != FAILURE:
            self.failures.clear()
            return []
        recent = [f for (f,) in (self.failures.get() if self.failures.exists() else ()) if event_us - f <= self.within_us]
        recent.append(event_us)
        if len(recent) < self.failures_needed:
            self.failures.put([(f,) for f in recent])
            return []
        self.failures.clear()
        return [{
            "alert_type": "FRAUD_ALERT",
            "entity": str(key[0]),
            "alert_time": timestamp(event_us),
            "window_start": timestamp(recent[0]),
            "event_count": len(recent),
            "detail": f"{len(recent)} failed logins within {span(self.params['within'])}",
        }]

    def clear_state(self) -> None:
        self.failures.clear()
