"""The project's stateful processors (`stateful_process` jobs), run by Spark's `transformWithStateInPandas`.

:class:`EventTimeOrdered` is the base of the event-time processors (`stale_services` runs on processing time): it makes a processor's result independent of how the input
happens to be cut into micro-batches. Each key's events wait in state, each with an event-time timer; when
the watermark reaches an event's time, its timer fires and the events due are handed to
:meth:`EventTimeOrdered.on_event` in event-time order. An event at or before the watermark of the batch it
arrives in is late and dropped (its turn has passed). Once the watermark is `idle_after` past a key's last
event (an idle timer), :meth:`EventTimeOrdered.on_idle` may emit rows and the key's state is removed. Timers fire only when batches run: a live job's
no-data batches, or the closing no-data batch of an available-now run, move them on.

The catalogue that the registry validates jobs against is include/registry/processors.py.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import LongType, StructField, StructType

from include.registry import PROCESSORS, JobSpec
from spark_jobs.schemas import spark_schema

EVENT_US = "_event_us"
_EPOCH = pd.Timestamp(0)
_US = pd.Timedelta(microseconds=1)
US_PER_MS = 1000


def epoch_us(series: pd.Series) -> pd.Series:
    """Microseconds since the epoch of a timestamp column as Spark hands it to pandas (UTC): Spark's own precision,
    kept through state and output (timers alone are in milliseconds: :func:`timer_ms`)."""
    if getattr(series.dt, "tz", None) is not None:
        series = series.dt.tz_convert(None)
    return (series - _EPOCH) // _US


def timestamp(us: int) -> pd.Timestamp:
    return pd.Timestamp(us, unit="us")


def timer_ms(us: int) -> int:
    """The event-time timer (Spark's are in ms) that fires once the watermark (ms) has reached the time `us`: the
    first millisecond at or after it."""
    return -(-us // US_PER_MS)


def span(seconds: int) -> str:
    """A duration as people write it in the registry: "10 minutes", "90 seconds"."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


class EventTimeOrdered(StatefulProcessor):
    """Per-key events in event-time order once the watermark has passed them (see the module's docstring)."""

    def __init__(self, job: JobSpec):
        info = PROCESSORS[job.transform.processor]
        self.params: dict[str, int] = dict(job.transform.params)
        self.event_time = job.source.event_time
        self.input_columns = list(info.input_columns)
        self.output_columns = ([*job.transform.keys] if info.keys_in_output else []) + list(info.output_schema)
        self.pending_schema = StructType([StructField(EVENT_US, LongType())]
                                         + list(spark_schema(info.input_columns).fields))

    # The processor's own logic; event times in microseconds since the epoch.
    idle_after_us: int = 0  # the key's state is removed this long (event time) after its last event

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        """Declare the processor's own state variables."""

    def on_event(self, key: tuple, event_us: int, values: tuple) -> list[dict[str, Any]]:
        """Handle one event (its time, then `input_columns` in order); the output rows."""
        raise NotImplementedError

    def on_idle(self, key: tuple) -> list[dict[str, Any]]:
        """The key went idle (its idle timer fired, `idle_after_us` after its last event): its output rows; the
        processor's own state is removed next (:meth:`clear_state`)."""
        return []

    def clear_state(self) -> None:
        """Remove the processor's own state (the key went idle)."""

    def open_from(self, key: tuple, row: dict[str, Any]) -> int | None:
        """Load the key's state from a row of the initial state table; the event time (us) of its last event,
        from which the idle timer runs, or None."""
        raise NotImplementedError(f"{type(self).__name__} does not start from an initial state")

    # transformWithStateInPandas' interface.
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", self.pending_schema)
        self.idle_timer = handle.getValueState("idle_timer", StructType([StructField("expiry_ms", LongType())]))
        self.open_state(handle)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:
        watermark_us = timerValues.getCurrentWatermarkInMs() * US_PER_MS
        fresh: list[tuple] = []
        for frame in rows:
            us = epoch_us(frame[self.event_time])
            frame = frame.assign(**{EVENT_US: us})[us > watermark_us]  # late: at or before the watermark
            fresh.extend(frame[[EVENT_US, *self.input_columns]].itertuples(index=False, name=None))
        if fresh:
            self.pending.appendList([(int(t), *rest) for t, *rest in fresh])
            for timer in {timer_ms(int(t)) for t, *_ in fresh}:
                self.handle.registerTimer(timer)
        return iter(())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[pd.DataFrame]:
        # Every pending event the watermark has reached is handled at the key's first timer of the batch (its
        # other timers then find nothing): a timer registered while timers fire would wait for the next batch.
        watermark = timerValues.getCurrentWatermarkInMs()
        pending = list(self.pending.get()) if self.pending.exists() else []
        due = sorted(p for p in pending if p[0] <= watermark * US_PER_MS)
        output: list[dict[str, Any]] = []
        if due:
            rest = [p for p in pending if p[0] > watermark * US_PER_MS]
            if rest:
                self.pending.put(rest)
            else:
                self.pending.clear()
            for event_us, *values in due:
                output.extend(self.on_event(key, event_us, tuple(values)))
            self._restart_idle_timer(due[-1][0])
        idle = self.idle_timer.get()[0] if self.idle_timer.exists() else None
        if idle is not None and idle <= watermark:  # idle since its last event: close, remove the state
            output.extend(self.on_idle(key))
            self.clear_state()
            self.handle.deleteTimer(idle)
            self.idle_timer.clear()
        if output:
            yield pd.DataFrame(output, columns=self.output_columns)

    def handleInitialState(self, key, initialState, timerValues) -> None:
        """A key of the initial state table (first batch of a new checkpoint only)."""
        last_us = self.open_from(key, initialState.iloc[0].to_dict())
        if last_us is not None:
            self._restart_idle_timer(last_us)

    def _restart_idle_timer(self, last_event_us: int) -> None:
        if not self.idle_after_us:
            return
        if self.idle_timer.exists():
            self.handle.deleteTimer(self.idle_timer.get()[0])
        idle_at = timer_ms(last_event_us + self.idle_after_us)
        self.handle.registerTimer(idle_at)
        self.idle_timer.update((idle_at,))

    def close(self) -> None:
        pass


def processor_for(job: JobSpec) -> StatefulProcessor:
    """A new instance of the job's processor class."""
    module, _, name = PROCESSORS[job.transform.processor].class_path.partition(":")
    return getattr(importlib.import_module(module), name)(job)
