"""`stale_services`: a key silent for `silent_for` of processing time emits `stale`; its next log, `recovered`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from include.registry import JobSpec
from include.registry.processors import ALERTS_SCHEMA
from spark_jobs.processors import US_PER_MS, epoch_us, span, timestamp

STATUS = StructType([
    StructField("last_event_us", LongType()),  # event time of the newest log seen (microseconds)
    StructField("logs", LongType()),  # logs since the key was first seen or last recovered
    StructField("timer_ms", LongType()),  # the processing-time timer that declares it stale
    StructField("stale", BooleanType()),
])


class StaleServices(StatefulProcessor):
    """Per key (a service), a processing-time timer `silent_for` after the batch that read its latest log. The
    timer firing means no log was read in between: one `stale` alert (alert_time: when the timer expired,
    window_start: its last log's event time). Its next log raises `recovered` (alert_time: the earliest new
    log's event time, window_start: the last log before the silence) and arms the timer again. Processing-time
    timers fire only when batches run, so a silence is noticed at the first batch after it; a log read in
    that same batch keeps the service fresh. Logs are not ordered by event time: only their arrival counts."""

    def __init__(self, job: JobSpec):
        self.silent_for = job.transform.params["silent_for"]  # seconds
        self.silent_ms = self.silent_for * 1000
        self.event_time = job.source.event_time

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.status = handle.getValueState("status", STATUS)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        times = pd.concat([epoch_us(frame[self.event_time]) for frame in rows]).dropna()
        if times.empty:
            return
        earliest, newest, count = int(times.min()), int(times.max()), len(times)
        status = self.status.get() if self.status.exists() else None
        output: list[dict[str, Any]] = []
        if status is not None and status[3]:  # stale: this log ends the silence
            output.append(self._alert("recovered", key, earliest, status[0], count,
                                      f"logged again after a silence of at least {span(self.silent_for)}"))
            logs = count
        else:
            if status is not None:
                self.handle.deleteTimer(status[2])
            logs = count + (status[1] if status is not None else 0)
        timer = timerValues.getCurrentProcessingTimeInMs() + self.silent_ms
        self.handle.registerTimer(timer)
        self.status.update((max(newest, status[0]) if status is not None else newest, logs, timer, False))
        if output:
            yield pd.DataFrame(output, columns=list(ALERTS_SCHEMA))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        status = self.status.get() if self.status.exists() else None
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        if status is None or status[3] or status[2] != expiry:
            return
        self.status.update((status[0], status[1], expiry, True))
        yield pd.DataFrame([self._alert("stale", key, expiry * US_PER_MS, status[0], status[1],
                                        f"no log read for {span(self.silent_for)} of processing time")],
                           columns=list(ALERTS_SCHEMA))

    def close(self) -> None:
        pass

    @staticmethod
    def _alert(kind: str, key: tuple, at_us: int, since_us: int, logs: int, detail: str) -> dict[str, Any]:
        return {"alert_type": kind, "entity": ",".join(str(k) for k in key), "alert_time": timestamp(at_us),
                "window_start": timestamp(since_us), "event_count": logs, "detail": detail}
