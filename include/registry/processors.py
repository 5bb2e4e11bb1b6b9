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
    time_mode: str  # Spark's timeMode: "EventTime" (the source's watermark drives the timers)
    input_columns: dict[str, str]  # columns the processor reads besides the keys and the event time: name -> type
    params: dict[str, ProcessorParam]
    output_schema: dict[str, str]
    alert_types: tuple[str, ...] = field(default=())  # the alert_type values it emits (alert processors)


ALERTS_SCHEMA: dict[str, str] = {
    "alert_type": "string",
    "entity": "string",  # the key the alert is about (user, service)
    "alert_time": "timestamp",  # event time of the event (or timer) that raised it
    "window_start": "timestamp",  # event time of the first event the alert counts
    "event_count": "long",
    "detail": "string",
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
        ),
    )
}
