"""The catalogue of the project's stateful processors (`stateful_process` jobs), declared without pyspark.

A `stateful_process` job names one of these in `transform.processor` and gives its `params`; the
registry validates the job against this catalogue (input columns, parameters) and takes the job's
output schema from it. The processors themselves (PySpark `StatefulProcessor`s run by
`transformWithStateInPandas`) live in `spark_jobs/processors/`, at `class_path`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from include.registry.durations import parse_duration


@dataclass(frozen=True)
class ProcessorParam:
    kind: str  # "int" (a positive integer) or "duration" (a registry duration, kept in seconds)
    default: int | str
    meaning: str

    def parse(self, value: object) -> int:
        """The parameter's value (seconds for a duration); ValueError naming what is wrong."""
        if self.kind == "duration":
            seconds = parse_duration(value)
            if seconds <= 0:
                raise ValueError(f"must be a positive duration, got {value!r}")
            return seconds
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"must be a positive integer, got {value!r}")
        return value


@dataclass(frozen=True)
class ProcessorInfo:
    name: str
    class_path: str  # "module:Class" in spark_jobs/processors
    description: str
    time_mode: str  # Spark's timeMode: "EventTime" (the source's watermark drives the timers) or "ProcessingTime"
    input_columns: dict[str, str]  # columns the processor reads besides the keys and the event time: name -> type
    params: dict[str, ProcessorParam]
    output_schema: dict[str, str]  # after the job's key columns when keys_in_output
    alert_types: tuple[str, ...] = field(default=())  # the alert_type values it emits (alert processors)
    suite: str = ""  # the quality suite of its sink (include/quality/suites/): "alerts", "session_summaries"
    keys_in_output: bool = False  # the output starts with the job's key columns
    initial_state_schema: dict[str, str] | None = None  # columns (besides the keys) of an initial state table
    # The layout of its state, in the checkpoint's fingerprint: a new version is a full refresh of a checkpoint made
    # under an older one (its plan says so). 2: event times in microseconds (1 kept milliseconds and cut finer times).
    state_version: int = 1


ALERTS_SCHEMA: dict[str, str] = {
    "alert_type": "string",
    "entity": "string",  # the key the alert is about (user, service)
    "alert_time": "timestamp",  # event time of the event (or timer) that raised it
    "window_start": "timestamp",  # event time of the first event the alert counts
    "event_count": "long",
    "detail": "string",
}

SESSION_SUMMARY_SCHEMA: dict[str, str] = {
    "session_start": "timestamp",  # the first event
    "session_end": "timestamp",  # the last event
    "event_count": "long",
    "total_value": "double",  # sum of the events' values (null values count as 0)
    "closed_at": "timestamp",  # session_end + gap: when the watermark closed it
}
OPEN_SESSION_SCHEMA: dict[str, str] = {  # an open session, as an initial state table holds it
    "session_start": "timestamp",
    "session_end": "timestamp",
    "event_count": "long",
    "total_value": "double",
}

PROCESSORS: dict[str, ProcessorInfo] = {
    p.name: p
    for p in (
        ProcessorInfo(
            name="fraud_alerts",
            class_path="spark_jobs.processors.fraud_alerts:FraudAlerts",
            description="per key, `failures` failed logins within `within` raise one FRAUD_ALERT and reset; "
                        "a success resets; a key idle for `within` is removed by an event-time timer",
            time_mode="EventTime",
            input_columns={"outcome": "string"},
            params={
                "failures": ProcessorParam("int", 5, "failed logins that raise an alert"),
                "within": ProcessorParam("duration", "10 minutes", "the span the failures must fall in"),
            },
            output_schema=ALERTS_SCHEMA,
            alert_types=("FRAUD_ALERT",),
            suite="alerts",
            state_version=2,
        ),
        ProcessorInfo(
            name="stale_services",
            class_path="spark_jobs.processors.stale_services:StaleServices",
            description="per key, no log read for `silent_for` of processing time emits one `stale` alert; its "
                        "next log emits `recovered` (processing-time timers: they fire only when batches run)",
            time_mode="ProcessingTime",
            input_columns={},
            params={"silent_for": ProcessorParam("duration", "10 minutes",
                                                 "the processing time without a log that makes a key stale")},
            output_schema=ALERTS_SCHEMA,
            alert_types=("stale", "recovered"),
            suite="alerts",
            state_version=2,
        ),
        ProcessorInfo(
            name="sessionizer",
            class_path="spark_jobs.processors.sessionizer:Sessionizer",
            description="per key, events at most `gap` apart form a session; when the watermark passes its last "
                        "event + `gap`, an event-time timer closes it: its summary is emitted and its state removed",
            time_mode="EventTime",
            input_columns={"value": "double"},
            params={"gap": ProcessorParam("duration", "30 minutes", "the inactivity that closes a session")},
            output_schema=SESSION_SUMMARY_SCHEMA,
            keys_in_output=True,
            initial_state_schema=OPEN_SESSION_SCHEMA,
            suite="session_summaries",
            state_version=2,
        ),
    )
}
