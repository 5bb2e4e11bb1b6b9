"""Suites of ``stateful_process`` sinks, by the processor's ``suite``: alerts (:class:`AlertTable`, written by
one or more alert processors) and session summaries (:class:`SessionSummaryTable`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from include.quality.suites.base import Check, RowOps, TableSpec, after_now, common_fields, with_checks
from include.registry import PROCESSORS, JobSpec, Registry


@dataclass(frozen=True, kw_only=True)
class ProcessorTable(TableSpec):
    """A stateful_process sink: each row final when emitted, the table complete up to the job's watermark
    (its freshness). Per group, a row spans `start_column`..`end_column`; a group's rows form a sequence in
    which none starts within `apart_seconds` of the previous one's end (:attr:`overlap_metric`)."""

    apart_seconds: int = 0
    start_column: ClassVar[str]
    end_column: ClassVar[str]
    overlap_check: ClassVar[str]

    @property
    def groups(self) -> tuple[str, ...]:
        """The columns of a sequence."""
        raise NotImplementedError

    @property
    def freshness_column(self) -> str:
        """The end of a row's span (alert_time, session_end): its latest value is the table's freshness."""
        return self.end_column

    @property
    def overlap_metric(self) -> str:
        return f"overlapping_{self.noun}s"

    @property
    def sequence_types(self) -> tuple[str, ...] | None:
        """The alert types whose rows form sequences (None: every row)."""
        return None

    def _overlap_check(self, description: str, overrides: dict[str, str]) -> Check:
        return self._check(self.overlap_check, "ExpectColumnMaxToBeBetween",
                           {"column": self.overlap_metric, "max_value": 0}, description, overrides)


@dataclass(frozen=True)
class AlertWriter:
    """One job writing an alert table: its source (for freshness), its alert types, and for an event-time rule
    the window its alerts lie in (None: processing-time alerts, e.g. `stale_services`)."""

    job_id: str
    source_table: str
    event_time: str
    watermark_seconds: int
    alert_types: tuple[str, ...]
    within_seconds: int | None


@dataclass(frozen=True, kw_only=True)
class AlertTable(ProcessorTable):
    """The sink of one or more alert processors (the catalogue's ALERTS_SCHEMA). An event-time rule's alert
    counts the events of one burst, from window_start to alert_time, within the rule's window, and the processor
    counts again after an alert, so an entity's alerts of such a type do not overlap. Processing-time alerts
    (`stale`, `recovered`) mix times of both kinds: neither check applies to them."""

    writers: tuple[AlertWriter, ...]

    noun: ClassVar[str] = "alert"
    start_column: ClassVar[str] = "window_start"
    end_column: ClassVar[str] = "alert_time"
    overlap_check: ClassVar[str] = "one_alert_per_burst"

    @property
    def windows(self) -> dict[str, int]:
        """alert_type -> the rule's window (seconds), for the event-time rules."""
        return {t: w.within_seconds for w in self.writers if w.within_seconds for t in w.alert_types}

    @property
    def alert_types(self) -> tuple[str, ...]:
        return tuple(t for w in self.writers for t in w.alert_types)

    @property
    def sequence_types(self) -> tuple[str, ...] | None:
        return tuple(self.windows)

    @property
    def groups(self) -> tuple[str, ...]:
        return ("alert_type", "entity")

    @property
    def unique_key(self) -> tuple[str, ...]:
        return ("alert_type", "entity", "alert_time")

    @property
    def row_columns(self) -> tuple[str, ...]:
        return ("alert_type", "entity", "alert_time", "window_start", "event_count")

    def _span_column(self, alert_type: str) -> str:
        return "alert_time after window_start (s)" + ("" if len(self.windows) == 1 else f" of {alert_type}")

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        span = ops.exact_seconds("alert_time") - ops.exact_seconds("window_start")
        return {after_now("alert_time"): ops.seconds("alert_time") - now_epoch,
                **{self._span_column(t): ops.where(ops.is_value("alert_type", t), span, None) for t in self.windows}}

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        some_types = len(self.windows) < len(self.alert_types)  # the window checks leave other types out
        checks = [self._check("alert_in_window", "ExpectColumnValuesToBeBetween",
                              {"column": self._span_column(t), "min_value": 0, "max_value": within},
                              f"alert_time - window_start is between 0 and {within} s"
                              + (f" ({t} alerts)" if some_types or len(self.windows) > 1 else ""), overrides)
                  for t, within in self.windows.items()]
        checks.append(self._check("alert_types_known", "ExpectColumnValuesToBeInSet",
                                  {"column": "alert_type", "value_set": list(self.alert_types)},
                                  f"alert_type is one of {', '.join(self.alert_types)}", overrides))
        checks += self._time_and_key_checks("alert_time", ("alert_type", "entity", "alert_time", "window_start"),
                                            overrides)
        checks += self._value_checks(("event_count",), (), overrides)
        positions = [f"{w.job_id}'s " + ("watermark" if w.within_seconds else "source read") for w in self.writers]
        checks += [self._unique_check(overrides), self._freshness_check(" and ".join(positions), overrides)]
        if self.windows:
            checks.append(self._overlap_check(
                "no alert starts at or before the previous alert of its entity and type"
                + (f" ({', '.join(self.windows)})" if some_types else ""), overrides))
        return checks


@dataclass(frozen=True, kw_only=True)
class SessionSummaryTable(ProcessorTable):
    """The sink of the `sessionizer` processor: per key, sessions of events at most the gap apart, from
    session_start to session_end (its first and last event), closed at session_end + gap; a key's sessions are
    more than the gap apart (else they would be one)."""

    keys: tuple[str, ...]

    noun: ClassVar[str] = "session"
    start_column: ClassVar[str] = "session_start"
    end_column: ClassVar[str] = "session_end"
    overlap_check: ClassVar[str] = "sessions_apart"

    @property
    def groups(self) -> tuple[str, ...]:
        return self.keys

    @property
    def unique_key(self) -> tuple[str, ...]:
        return (*self.keys, "session_start")

    @property
    def row_columns(self) -> tuple[str, ...]:
        return (*self.keys, "session_start", "session_end", "event_count", "total_value", "closed_at")

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {after_now("session_start"): ops.seconds("session_start") - now_epoch,
                "session length (s)": ops.exact_seconds("session_end") - ops.exact_seconds("session_start"),
                "closed_at after session_end (s)": ops.exact_seconds("closed_at") - ops.exact_seconds("session_end")}

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        gap = self.apart_seconds
        checks = [
            self._check("summary_span", "ExpectColumnValuesToBeBetween",
                        {"column": "session length (s)", "min_value": 0},
                        "session_end is not before session_start", overrides),
            self._check("closed_after_gap", "ExpectColumnValuesToBeBetween",
                        {"column": "closed_at after session_end (s)", "min_value": gap, "max_value": gap},
                        f"closed_at is session_end + {gap} s (the gap)", overrides)]
        checks += self._time_and_key_checks("session_start", (*self.keys, "session_start", "session_end"), overrides)
        checks += self._value_checks(("event_count",), ("total_value",), overrides)
        checks += [self._unique_check(overrides), self._freshness_check(f"{self.job_id}'s watermark", overrides)]
        checks.append(self._overlap_check(f"no session of a key starts within {gap} s of the end of the previous "
                                          "one (they would be one session)", overrides))
        return checks


def processor_table(job: JobSpec, registry: Registry | None = None) -> ProcessorTable:
    """The spec and checks of a stateful_process job's sink table, by the processor's suite. Alerts: every job
    writing the table (alert processors may share one), default lag the largest of watermark + the rule's
    window (`within`) or silence (`silent_for`); session summaries: default lag watermark + gap."""
    params, suite = job.transform.params, PROCESSORS[job.transform.processor].suite
    if suite == "alerts":
        jobs = registry.writers_of(job.sink.table) if registry is not None else [job]
        lag = max(j.quality.freshness_lag_seconds or j.source.watermark_seconds + _alert_span(j) for j in jobs)
        severity = {k: v for j in jobs for k, v in j.quality.severity.items()}
        # the table's lag: its most lagging writer's (each the job's own or its default), not this job's own
        return with_checks(AlertTable(**{**common_fields(job, lag), "freshness_lag_seconds": lag},
                                      writers=tuple(_alert_writer(j) for j in jobs)), severity)
    if suite == "session_summaries":
        return with_checks(SessionSummaryTable(**common_fields(job, job.source.watermark_seconds + params["gap"]),
                                               keys=job.transform.keys, apart_seconds=params["gap"]),
                           job.quality.severity)
    raise ValueError(f"job {job.id!r}: processor {job.transform.processor!r} has no quality suite")


def _alert_span(job: JobSpec) -> int:
    """How far an alert of the job may trail its source's events: the rule's window, or the silence."""
    params = job.transform.params
    return params.get("within") or params.get("silent_for") or 0


def _alert_writer(job: JobSpec) -> AlertWriter:
    info = PROCESSORS[job.transform.processor]
    within = job.transform.params.get("within") if info.time_mode == "EventTime" else None
    return AlertWriter(job.id, job.source.name, job.source.event_time, job.source.watermark_seconds,
                       info.alert_types, within)
