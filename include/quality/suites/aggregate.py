"""Suites of the aggregate kinds: event-time windows (``window_aggregate``), sessions (``session_aggregate``),
both on :class:`AggregateTable`, and running totals per key (``running_aggregate``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from include.quality.suites.base import Check, RowOps, TableSpec, after_now, common_fields, with_checks
from include.registry import JobSpec, Registry, WindowAggregate


@dataclass(frozen=True, kw_only=True)
class AggregateTable(TableSpec):
    """A table of event-time aggregates: one row per (start, end, keys) with count/sum columns."""

    keys: tuple[str, ...]
    counts: tuple[str, ...]  # count aggregations of rows (a count of a column's non-null values may be 0)
    sums: tuple[str, ...]  # sum aggregations

    start: ClassVar[str]  # the bound columns
    end: ClassVar[str]
    unique_check: ClassVar[str] = "unique_windows"

    @property
    def source_keys(self) -> tuple[str, ...]:
        """The key columns reconciliation reads from the source events."""
        return ()

    @property
    def reconciled(self) -> bool:
        """The table is reconciled with its source: it counts rows (and a session's keys are source columns)."""
        return bool(self.counts)

    @property
    def unreconciled_metric(self) -> str:
        return f"unreconciled_{self.noun}s"

    @property
    def unique_key(self) -> tuple[str, ...]:
        return (self.start, self.end, *self.keys)

    @property
    def freshness_column(self) -> str:
        return self.end

    @property
    def row_columns(self) -> tuple[str, ...]:
        return (self.start, self.end, *self.keys, *self.counts, *self.sums)

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {after_now(self.start): ops.seconds(self.start) - now_epoch}

    def _bound_checks(self, overrides: dict[str, str]) -> list[Check]:
        """The kind's own checks of the (start, end) bounds."""
        raise NotImplementedError

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        checks = self._bound_checks(overrides) + self._time_and_key_checks(self.start, self.keys, overrides)
        checks += self._value_checks(self.counts, self.sums, overrides)
        checks += [self._unique_check(overrides), self._freshness_check(self._freshness_description(), overrides)]
        if self.reconciled:
            checks.append(self._check(
                "reconciliation", "ExpectColumnMaxToBeBetween", {"column": self.unreconciled_metric, "max_value": 0},
                self._reconciliation_description(), overrides))
        return checks

    def _reconciliation_description(self) -> str:
        raise NotImplementedError

    def _freshness_description(self) -> str:
        return f"latest finalized {self.end}"


@dataclass(frozen=True, kw_only=True)
class WindowedTable(AggregateTable):
    """A window_aggregate sink: tumbling or sliding windows."""

    window_seconds: int
    slide_seconds: int
    offset_seconds: int = 0  # windows start at epoch + offset + k * slide

    start: ClassVar[str] = "window_start"
    end: ClassVar[str] = "window_end"
    noun: ClassVar[str] = "window"

    @property
    def windows_per_event(self) -> int:
        return self.window_seconds // self.slide_seconds

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        start, end = ops.seconds(self.start), ops.seconds(self.end)
        return {"window length (s)": end - start,
                "window start past its slide (s)": ops.mod(start - self.offset_seconds, self.slide_seconds),
                **super().derived(ops, now_epoch)}

    def _bound_checks(self, overrides: dict[str, str]) -> list[Check]:
        check = partial(self._check, overrides=overrides)
        return [
            check("window_size", "ExpectColumnValuesToBeInSet",
                  {"column": "window length (s)", "value_set": [self.window_seconds]},
                  f"window_end - window_start is {self.window_seconds} s"),
            check("window_aligned", "ExpectColumnValuesToBeInSet",
                  {"column": "window start past its slide (s)", "value_set": [0]},
                  f"window_start is a multiple of {self.slide_seconds} s since the epoch"
                  + (f" + {self.offset_seconds} s" if self.offset_seconds else "")),
        ]

    def _reconciliation_description(self) -> str:
        return (f"per finalized window, sum({self.counts[0]}) is at most the distinct {self.source_table} events "
                f"in it and at least those less the late-arrival candidates")


@dataclass(frozen=True, kw_only=True)
class SessionTable(AggregateTable):
    """A session_aggregate sink: a session ends `gap` after its last event."""

    gap_seconds: int
    expression_keys: bool = False  # keys computed by SQL expressions: the source has no such columns

    start: ClassVar[str] = "session_start"
    end: ClassVar[str] = "session_end"
    noun: ClassVar[str] = "session"

    @property
    def source_keys(self) -> tuple[str, ...]:
        return () if self.expression_keys else self.keys

    @property
    def reconciled(self) -> bool:  # sessionizing the source needs its key columns
        return bool(self.counts) and not self.expression_keys

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {"session length (s)": ops.exact_seconds(self.end) - ops.exact_seconds(self.start),
                **super().derived(ops, now_epoch)}

    def _bound_checks(self, overrides: dict[str, str]) -> list[Check]:
        return [self._check("session_bounds", "ExpectColumnValuesToBeBetween",
                            {"column": "session length (s)", "min_value": self.gap_seconds},
                            f"session_end - session_start is at least the gap ({self.gap_seconds} s)", overrides)]

    def _freshness_description(self) -> str:
        return "the end of the earliest source session closed after the latest session_end and missing here"

    def _reconciliation_description(self) -> str:
        return (f"per finalized session of the distinct {self.source_table} events of a key, the sum of "
                f"{self.counts[0]} of the gold sessions inside it is at most its events and at least those less "
                f"the late-arrival candidates; every gold session lies inside one")


@dataclass(frozen=True, kw_only=True)
class RunningTable(TableSpec):
    """A running_aggregate sink: one row per key with its totals over all time, upserted as they change; a row
    count only grows. Freshness follows the max(event time) aggregation, when the job has one."""

    keys: tuple[str, ...]
    counts: tuple[str, ...]  # count aggregations of rows
    sums: tuple[str, ...]
    latest_event: str | None  # the max(<source event time>) aggregation

    noun: ClassVar[str] = "key"

    @property
    def unique_key(self) -> tuple[str, ...]:
        return self.keys

    @property
    def freshness_column(self) -> str:
        return self.latest_event or self.keys[0]

    @property
    def row_columns(self) -> tuple[str, ...]:
        return (*self.keys, *self.counts, *self.sums, *([self.latest_event] if self.latest_event else []))

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {after_now(self.latest_event): ops.seconds(self.latest_event) - now_epoch} if self.latest_event else {}

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        checks = self._not_null_checks(self.keys, overrides) + self._value_checks(self.counts, self.sums, overrides)
        if self.latest_event:
            checks += self._time_and_key_checks(self.latest_event, (), overrides)
            checks += [self._unique_check(overrides),
                       self._freshness_check(f"latest {self.latest_event}", overrides)]
        else:  # no event time: nothing to be fresh about
            checks.append(self._unique_check(overrides))
        if self.counts:
            checks.append(self._check("totals_never_decrease", "ExpectColumnMaxToBeBetween",
                                      {"column": "decreased_totals", "max_value": 0},
                                      f"no key's {self.counts[0]} went down or vanished since the version "
                                      "validated before", overrides))
        return checks


# ------------------------------------------------------------------------------------------ builders


def _aggregations(job: JobSpec) -> dict[str, Any]:
    """The keys, row counts and sums of an aggregating job."""
    aggregations = job.transform.aggregations
    return {"keys": job.transform.keys,
            "counts": tuple(a.name for a in aggregations if a.fn == "count" and a.column is None and a.expr is None),
            "sums": tuple(a.name for a in aggregations if a.fn == "sum")}


def windowed_table(job: JobSpec, registry: Registry | None = None) -> WindowedTable:
    """The spec and checks of a window_aggregate job's sink table (default lag: watermark + slide)."""
    window: WindowAggregate = job.transform
    return with_checks(WindowedTable(
        **common_fields(job, job.source.watermark_seconds + window.slide_seconds), **_aggregations(job),
        window_seconds=window.window_seconds, slide_seconds=window.slide_seconds,
        offset_seconds=window.offset_seconds), job.quality.severity)


def session_table(job: JobSpec, registry: Registry | None = None) -> SessionTable:
    """The spec and checks of a session_aggregate job's sink table (default lag: watermark + gap)."""
    gap = job.transform.gap_seconds
    return with_checks(SessionTable(**common_fields(job, job.source.watermark_seconds + gap), **_aggregations(job),
                                    gap_seconds=gap, expression_keys=bool(job.transform.key_expressions)),
                       job.quality.severity)


RUNNING_DEFAULT_LAG_SECONDS = 300


def running_table(job: JobSpec, registry: Registry | None = None) -> RunningTable:
    """The spec and checks of a running_aggregate job's sink table (default lag: 5 minutes, a live job trailing
    its source)."""
    latest = next((a.name for a in job.transform.aggregations
                   if a.fn == "max" and a.column == job.source.event_time and a.expr is None), None)
    return with_checks(RunningTable(**common_fields(job, RUNNING_DEFAULT_LAG_SECONDS), **_aggregations(job),
                                    latest_event=latest), job.quality.severity)
