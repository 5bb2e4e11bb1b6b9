"""Quality suites of the gold tables, derived from the job registry.

A suite is built per sink table by the builder of its job's transform kind (:data:`SUITE_BUILDERS`):
one table spec class per kind, on a common :class:`TableSpec` base.

- :class:`WindowedTable` (``window_aggregate``) and :class:`SessionTable` (``session_aggregate``)
  share :class:`AggregateTable`: rows per (start, end, keys) with count/sum aggregations, and the
  same key, count, future, uniqueness, freshness and reconciliation checks.
- :class:`JoinTable` (``stream_join``): one row per (left key, right key), the join bound, unmatched
  rows without right values, uniqueness and freshness.
- :class:`ProcessorTable` (``stateful_process``, by the processor's ``suite``): :class:`AlertTable` (alerts
  inside the rule's window, one alert per burst) and :class:`SessionSummaryTable` (session bounds, a key's
  sessions apart); both unique and fresh up to the job's watermark.

Each :class:`Check` names one expectation of :mod:`include.registry.checks` and how Great Expectations
evaluates it: row checks run on the gold rows plus the derived columns each spec declares in
:meth:`TableSpec.derived` (evaluated with pandas or Spark by :mod:`include.quality.frames`); table
checks run on one row of table metrics (:mod:`include.quality.table_metrics`).

This module stays light (no pandas, pyarrow, Spark or GE): the DAG files list the tables with suites
through :func:`quality_tables` at parse time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from include.registry import (
    PROCESSORS,
    Deduplicate,
    JobSpec,
    Registry,
    RunningAggregate,
    SessionAggregate,
    StatefulProcess,
    StreamJoin,
    WindowAggregate,
)
from include.registry.checks import CHECKS


@dataclass(frozen=True)
class Check:
    name: str  # stable name from include.registry.checks
    severity: str
    scope: str  # "rows" or "table"
    expectation: str  # a great_expectations.expectations class name
    kwargs: dict[str, Any]
    description: str

    @property
    def column(self) -> str:
        return self.kwargs["column"]


class RowOps(Protocol):
    """The column operations derived row columns are written in; :mod:`include.quality.frames`
    implements them on Arrow/numpy (pandas engine) and on Spark columns. Times are epoch seconds."""

    def seconds(self, column: str) -> Any: ...  # whole seconds (floored)

    def exact_seconds(self, column: str) -> Any: ...  # seconds with the microseconds

    def mod(self, value: Any, divisor: int) -> Any: ...  # floored modulo

    def is_value(self, column: str, value: bool) -> Any: ...  # boolean column == value (null: false)

    def where(self, condition: Any, value: Any, otherwise: Any) -> Any: ...  # otherwise None: null

    def fill_null(self, value: Any, fill: Any) -> Any: ...

    def non_null_count(self, columns: tuple[str, ...]) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class TableSpec:
    """What the checks need to know about one gold table with a suite (common to every kind)."""

    table: str
    job_id: str
    source_table: str  # the job's (left) source
    event_time: str  # its event-time column
    watermark_seconds: int  # the job's (left) watermark delay
    freshness_lag_seconds: int
    mode: str  # sink mode: append (final rows only) or update (MERGE upserts)
    checks: list[Check] = field(default_factory=list)

    noun: ClassVar[str] = "row"  # what a row is: names the metrics and details
    unique_check: ClassVar[str] = "unique_rows"  # the check name of the uniqueness of unique_key

    @property
    def suite_name(self) -> str:
        return self.table.replace("/", "__")

    @property
    def unique_key(self) -> tuple[str, ...]:
        """The columns that identify a row (``unique_windows`` / ``unique_rows``)."""
        raise NotImplementedError

    @property
    def duplicates_metric(self) -> str:
        """The table metric counting rows beyond one per :attr:`unique_key`."""
        return "duplicate_rows" if self.noun == "row" else f"duplicate_{self.noun}_rows"

    @property
    def freshness_column(self) -> str:
        """The timestamp column whose latest (final) value must trail the source by at most the lag."""
        raise NotImplementedError

    @property
    def row_columns(self) -> tuple[str, ...]:
        """The gold columns the row checks read (before deriving)."""
        raise NotImplementedError

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        """The derived row columns (name -> expression in `ops`) the row checks run on."""
        raise NotImplementedError

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        """The suite's checks, with the job's severity `overrides`."""
        raise NotImplementedError

    @property
    def check_columns(self) -> tuple[str, ...]:
        """The columns of the frame the row suite validates: those its checks name, in order."""
        return tuple(dict.fromkeys(c.column for c in self.checks if c.scope == "rows"))

    def _check(self, name: str, expectation: str, kwargs: dict[str, Any], description: str,
               overrides: dict[str, str]) -> Check:
        info = CHECKS[name]
        return Check(name, overrides.get(name, info.severity), info.scope, expectation, kwargs, description)

    def _time_and_key_checks(self, time_column: str, not_null: tuple[str, ...],
                             overrides: dict[str, str]) -> list[Check]:
        """``no_future_windows`` on `time_column` (derived ``_seconds_in_future``), ``keys_not_null``."""
        return [self._check("no_future_windows", "ExpectColumnValuesToBeBetween",
                            {"column": "_seconds_in_future", "max_value": 0},
                            f"{time_column} is not after the validation time", overrides)] + [
            self._check("keys_not_null", "ExpectColumnValuesToNotBeNull", {"column": column},
                        f"{column} is never null", overrides) for column in not_null]

    def _uniqueness_and_freshness(self, freshness: str, overrides: dict[str, str], source_filter: str = "") -> list[Check]:
        """The uniqueness of :attr:`unique_key` and the freshness (`freshness`: what must be recent)."""
        return [
            self._check(self.unique_check, "ExpectColumnMaxToBeBetween",
                        {"column": self.duplicates_metric, "max_value": 0},
                        f"one row per ({', '.join(self.unique_key)}) in the whole table", overrides),
            self._check("freshness", "ExpectColumnMaxToBeBetween",
                        {"column": "freshness_lag_seconds", "max_value": self.freshness_lag_seconds},
                        f"{freshness} within {self.freshness_lag_seconds} s of the latest {self.source_table} "
                        f"{self.event_time}{source_filter}", overrides),
        ]


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
        return {"_seconds_in_future": ops.seconds(self.start) - now_epoch}

    def _bound_checks(self, overrides: dict[str, str]) -> list[Check]:
        """The kind's own checks of the (start, end) bounds."""
        raise NotImplementedError

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        def check(name: str, expectation: str, kwargs: dict[str, Any], description: str) -> Check:
            return self._check(name, expectation, kwargs, description, overrides)

        checks = self._bound_checks(overrides) + self._time_and_key_checks(self.start, self.keys, overrides)
        checks += [check("event_count_positive", "ExpectColumnValuesToBeBetween", {"column": column, "min_value": 1},
                         f"{column} is at least 1") for column in self.counts]
        checks += [check("values_in_range", "ExpectColumnValuesToBeBetween",
                         {"column": column, "min_value": 0, "max_value": 1e12}, f"{column} is between 0 and 1e12")
                   for column in self.sums]
        checks += self._uniqueness_and_freshness(self._freshness_description(), overrides)
        if self.reconciled:
            checks.append(check(
                "reconciliation", "ExpectColumnMaxToBeBetween", {"column": self.unreconciled_metric, "max_value": 0},
                self._reconciliation_description()))
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
        return {"_window_seconds": end - start,
                "_start_offset_seconds": ops.mod(start - self.offset_seconds, self.slide_seconds),
                **super().derived(ops, now_epoch)}

    def _bound_checks(self, overrides: dict[str, str]) -> list[Check]:
        return [
            self._check("window_size", "ExpectColumnValuesToBeInSet",
                        {"column": "_window_seconds", "value_set": [self.window_seconds]},
                        f"window_end - window_start is {self.window_seconds} s", overrides),
            self._check("window_aligned", "ExpectColumnValuesToBeInSet",
                        {"column": "_start_offset_seconds", "value_set": [0]},
                        f"window_start is a multiple of {self.slide_seconds} s since the epoch"
                        + (f" + {self.offset_seconds} s" if self.offset_seconds else ""), overrides),
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
        return {"_session_seconds": ops.exact_seconds(self.end) - ops.exact_seconds(self.start),
                **super().derived(ops, now_epoch)}

    def _bound_checks(self, overrides: dict[str, str]) -> list[Check]:
        return [self._check("session_bounds", "ExpectColumnValuesToBeBetween",
                            {"column": "_session_seconds", "min_value": self.gap_seconds},
                            f"session_end - session_start is at least the gap ({self.gap_seconds} s)", overrides)]

    def _freshness_description(self) -> str:
        return "the end of the earliest source session closed after the latest session_end and missing here"

    def _reconciliation_description(self) -> str:
        return (f"per finalized session of the distinct {self.source_table} events of a key, the sum of "
                f"{self.counts[0]} of the gold sessions inside it is at most its events and at least those less "
                f"the late-arrival candidates; every gold session lies inside one")


@dataclass(frozen=True, kw_only=True)
class JoinTable(TableSpec):
    """A stream_join sink: left rows joined with the right rows within a time bound."""

    left_time: str  # output columns
    right_time: str
    left_key: str
    right_key: str | None  # None: no right column identifies the right row
    matched: str | None  # the matched column (None: an inner join without one)
    right_columns: tuple[str, ...]  # every output column taken from the right side
    within_seconds: int
    where: str | None  # the SQL filter on the left source
    before_seconds: int = 0  # the right time may precede the left time by this much
    how: str = "left_outer"
    left_columns: tuple[str, ...] = ()  # every output column taken from the left side

    @property
    def unmatched_check(self) -> tuple[str, str]:
        """The check of the unmatched rows' missing side, and its derived column."""
        if self.how in ("right_outer", "full_outer"):
            return "unmatched_one_sided", "_missing_side_values_when_unmatched"
        return "unmatched_without_right", "_right_values_when_unmatched"

    @property
    def unique_key(self) -> tuple[str, ...]:
        return (self.left_key, self.right_key) if self.right_key else (self.left_key,)

    @property
    def freshness_column(self) -> str:
        return self.left_time

    @property
    def row_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([self.left_time, self.left_key, *([self.matched] if self.matched else []),
                                    *self.right_columns, *self.left_columns]))

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        columns = {"_seconds_in_future": ops.seconds(self.left_time) - now_epoch}
        if self.matched:
            offset = ops.exact_seconds(self.right_time) - ops.exact_seconds(self.left_time)
            # matched rows: right time - left time, -1 (out of bounds) when one is missing; unmatched: null
            columns["_right_offset_seconds"] = ops.where(ops.is_value(self.matched, True),
                                                         ops.fill_null(offset, -1), None)
            # unmatched rows: values of the side that must be missing (full outer: 0 when either side is)
            missing = {"right_outer": ops.non_null_count(self.left_columns),
                       "full_outer": ops.non_null_count(self.left_columns) * ops.non_null_count(self.right_columns)}
            columns[self.unmatched_check[1]] = ops.where(ops.is_value(self.matched, False),
                                                         missing.get(self.how, ops.non_null_count(self.right_columns)),
                                                         0)
        return columns

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        def check(name: str, expectation: str, kwargs: dict[str, Any], description: str) -> Check:
            return self._check(name, expectation, kwargs, description, overrides)

        checks = []
        if self.matched:
            checks += [
                check("join_bound", "ExpectColumnValuesToBeBetween",
                      {"column": "_right_offset_seconds", "min_value": -self.before_seconds,
                       "max_value": self.within_seconds},
                      f"{self.matched} rows: {self.right_time} - {self.left_time} is between {-self.before_seconds} and "
                      f"{self.within_seconds} s (-1: a time is missing; rows not {self.matched} are not counted)"),
                check(*self.unmatched_check[:1], "ExpectColumnValuesToBeInSet",
                      {"column": self.unmatched_check[1], "value_set": [0]}, self._unmatched_description()),
            ]
        outer_keys = {"inner": self.left_key, "left_outer": self.left_key, "right_outer": self.right_key}
        not_null = tuple(c for c in (outer_keys.get(self.how), self.matched) if c)
        checks += self._time_and_key_checks(self.left_time, not_null, overrides)
        where = f" where {self.where}" if self.where else ""
        return checks + self._uniqueness_and_freshness(f"latest {self.left_time}", overrides, where)

    def _unmatched_description(self) -> str:
        left, right = ", ".join(self.left_columns), ", ".join(self.right_columns)
        if self.how == "right_outer":
            return f"rows not {self.matched} have no left-side value ({left} null)"
        if self.how == "full_outer":
            return f"rows not {self.matched} have one side without values ({left} null, or {right} null)"
        return f"rows not {self.matched} have no right-side value ({right} null)"


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
        return {"_seconds_in_future": ops.seconds(self.latest_event) - now_epoch} if self.latest_event else {}

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        checks = [self._check("keys_not_null", "ExpectColumnValuesToNotBeNull", {"column": column},
                              f"{column} is never null", overrides) for column in self.keys]
        checks += [self._check("event_count_positive", "ExpectColumnValuesToBeBetween",
                               {"column": column, "min_value": 1}, f"{column} is at least 1", overrides)
                   for column in self.counts]
        checks += [self._check("values_in_range", "ExpectColumnValuesToBeBetween",
                               {"column": column, "min_value": 0, "max_value": 1e12},
                               f"{column} is between 0 and 1e12", overrides) for column in self.sums]
        if self.latest_event:
            checks += self._time_and_key_checks(self.latest_event, (), overrides)
            checks += self._uniqueness_and_freshness(f"latest {self.latest_event}", overrides)
        else:
            checks += self._uniqueness_and_freshness("", overrides)[:1]
        if self.counts:
            checks.append(self._check("totals_never_decrease", "ExpectColumnMaxToBeBetween",
                                      {"column": "decreased_totals", "max_value": 0},
                                      f"no key's {self.counts[0]} went down or vanished since the version "
                                      "validated before", overrides))
        return checks


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
    def freshness_column(self) -> str:
        return "alert_time"

    @property
    def row_columns(self) -> tuple[str, ...]:
        return ("alert_type", "entity", "alert_time", "window_start", "event_count")

    def _span_column(self, alert_type: str) -> str:
        return "_alert_span_seconds" if len(self.windows) == 1 else f"_alert_span_seconds_{alert_type}"

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        span = ops.exact_seconds("alert_time") - ops.exact_seconds("window_start")
        return {"_seconds_in_future": ops.seconds("alert_time") - now_epoch,
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
        checks.append(self._check("event_count_positive", "ExpectColumnValuesToBeBetween",
                                  {"column": "event_count", "min_value": 1}, "event_count is at least 1", overrides))
        positions = [f"{w.job_id}'s " + ("watermark" if w.within_seconds else "source read") for w in self.writers]
        checks += self._uniqueness_and_freshness(" and ".join(positions), overrides)
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
    def freshness_column(self) -> str:
        return "session_end"

    @property
    def row_columns(self) -> tuple[str, ...]:
        return (*self.keys, "session_start", "session_end", "event_count", "total_value", "closed_at")

    def derived(self, ops: RowOps, now_epoch: int) -> dict[str, Any]:
        return {"_seconds_in_future": ops.seconds("session_start") - now_epoch,
                "_session_span_seconds": ops.exact_seconds("session_end") - ops.exact_seconds("session_start"),
                "_close_delay_seconds": ops.exact_seconds("closed_at") - ops.exact_seconds("session_end")}

    def make_checks(self, overrides: dict[str, str]) -> list[Check]:
        gap = self.apart_seconds
        checks = [
            self._check("summary_span", "ExpectColumnValuesToBeBetween",
                        {"column": "_session_span_seconds", "min_value": 0},
                        "session_end is not before session_start", overrides),
            self._check("closed_after_gap", "ExpectColumnValuesToBeBetween",
                        {"column": "_close_delay_seconds", "min_value": gap, "max_value": gap},
                        f"closed_at is session_end + {gap} s (the gap)", overrides)]
        checks += self._time_and_key_checks("session_start", (*self.keys, "session_start", "session_end"), overrides)
        checks.append(self._check("event_count_positive", "ExpectColumnValuesToBeBetween",
                                  {"column": "event_count", "min_value": 1}, "event_count is at least 1", overrides))
        checks.append(self._check("values_in_range", "ExpectColumnValuesToBeBetween",
                                  {"column": "total_value", "min_value": 0, "max_value": 1e12},
                                  "total_value is between 0 and 1e12", overrides))
        checks += self._uniqueness_and_freshness(f"{self.job_id}'s watermark", overrides)
        checks.append(self._overlap_check(f"no session of a key starts within {gap} s of the end of the previous "
                                          "one (they would be one session)", overrides))
        return checks


# ------------------------------------------------------------------------------------------ builders


def _common(job: JobSpec, default_lag: int) -> dict[str, Any]:
    return {"table": job.sink.table, "job_id": job.id, "source_table": job.source.name,
            "event_time": job.source.event_time, "watermark_seconds": job.source.watermark_seconds,
            "freshness_lag_seconds": job.quality.freshness_lag_seconds or default_lag, "mode": job.sink.mode}


def _aggregations(job: JobSpec) -> dict[str, Any]:
    aggregations = job.transform.aggregations
    return {"keys": job.transform.keys,
            "counts": tuple(a.name for a in aggregations if a.fn == "count" and a.column is None and a.expr is None),
            "sums": tuple(a.name for a in aggregations if a.fn == "sum")}


def windowed_table(job: JobSpec, registry: Registry | None = None) -> WindowedTable:
    """The spec and checks of a window_aggregate job's sink table (default lag: watermark + slide)."""
    window: WindowAggregate = job.transform
    spec = WindowedTable(**_common(job, job.source.watermark_seconds + window.slide_seconds), **_aggregations(job),
                         window_seconds=window.window_seconds, slide_seconds=window.slide_seconds,
                         offset_seconds=window.offset_seconds)
    spec.checks.extend(spec.make_checks(job.quality.severity))
    return spec


def session_table(job: JobSpec, registry: Registry | None = None) -> SessionTable:
    """The spec and checks of a session_aggregate job's sink table (default lag: watermark + gap)."""
    gap = job.transform.gap_seconds
    spec = SessionTable(**_common(job, job.source.watermark_seconds + gap), **_aggregations(job), gap_seconds=gap,
                        expression_keys=bool(job.transform.key_expressions))
    spec.checks.extend(spec.make_checks(job.quality.severity))
    return spec


def join_table(job: JobSpec, registry: Registry) -> JoinTable:
    """The spec and checks of a stream_join job's sink table (default lag: watermark + within).

    A side's key is the output column of its table's deduplication key (falling back to the join keys)."""
    join: StreamJoin = job.transform
    right = join.right
    output = {side: join.output_of(side) for side in ("left", "right")}

    def key(side: str, table: str, fallback: list[str]) -> str | None:
        writer = registry.writer_of(table)
        unique = list(writer.transform.keys) if writer and isinstance(writer.transform, Deduplicate) else []
        return next((output[side][c] for c in [*unique, *fallback] if c in output[side]), None)

    left_key = key("left", job.source.name, [a for a, _ in join.join_keys])
    assert left_key is not None, f"stream_join job {job.id}: no output column identifies the left row"
    spec = JoinTable(**_common(job, job.source.watermark_seconds + join.within_seconds),
                     left_time=output["left"][job.source.event_time], right_time=output["right"][right.event_time],
                     left_key=left_key, right_key=key("right", right.name, [b for _, b in join.join_keys]),
                     matched=join.matched_column, right_columns=tuple(output["right"].values()),
                     within_seconds=join.within_seconds, where=join.where, before_seconds=join.before_seconds,
                     how=join.how, left_columns=tuple(output["left"].values()))
    spec.checks.extend(spec.make_checks(job.quality.severity))
    return spec


RUNNING_DEFAULT_LAG_SECONDS = 300


def running_table(job: JobSpec, registry: Registry | None = None) -> RunningTable:
    """The spec and checks of a running_aggregate job's sink table (default lag: 5 minutes, a live job trailing
    its source)."""
    latest = next((a.name for a in job.transform.aggregations
                   if a.fn == "max" and a.column == job.source.event_time and a.expr is None), None)
    aggregations = _aggregations(job)
    aggregations["keys"] = job.transform.keys
    spec = RunningTable(**_common(job, RUNNING_DEFAULT_LAG_SECONDS), **aggregations, latest_event=latest)
    spec.checks.extend(spec.make_checks(job.quality.severity))
    return spec


def processor_table(job: JobSpec, registry: Registry | None = None) -> ProcessorTable:
    """The spec and checks of a stateful_process job's sink table, by the processor's suite. Alerts: every job
    writing the table (alert processors may share one), default lag the largest of watermark + the rule's
    window (`within`) or silence (`silent_for`); session summaries: default lag watermark + gap."""
    params, suite = job.transform.params, PROCESSORS[job.transform.processor].suite
    if suite == "alerts":
        jobs = registry.writers_of(job.sink.table) if registry is not None else [job]
        writers = tuple(_alert_writer(j) for j in jobs)
        lag = max(j.quality.freshness_lag_seconds or j.source.watermark_seconds + _alert_span(j) for j in jobs)
        severity = {k: v for j in jobs for k, v in j.quality.severity.items()}
        spec: ProcessorTable = AlertTable(**{**_common(job, lag), "freshness_lag_seconds": lag}, writers=writers)
        spec.checks.extend(spec.make_checks(severity))
        return spec
    if suite == "session_summaries":
        spec = SessionSummaryTable(**_common(job, job.source.watermark_seconds + params["gap"]),
                                   keys=job.transform.keys, apart_seconds=params["gap"])
        spec.checks.extend(spec.make_checks(job.quality.severity))
        return spec
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


# Transform kind -> suite builder (the registry's QUALITY_KINDS).
SUITE_BUILDERS: dict[str, Callable[[JobSpec, Registry], TableSpec]] = {
    WindowAggregate.kind: windowed_table,
    SessionAggregate.kind: session_table,
    StreamJoin.kind: join_table,
    StatefulProcess.kind: processor_table,
    RunningAggregate.kind: running_table,
}


def has_suite(job: JobSpec) -> bool:
    """The job's sink has a quality suite: its kind has a builder (a stateful_process: its processor has one)."""
    if isinstance(job.transform, StatefulProcess):
        return bool(PROCESSORS[job.transform.processor].suite)
    return job.transform_kind in SUITE_BUILDERS


def quality_tables(registry: Registry) -> dict[str, TableSpec]:
    """Every sink table of the registry that has a suite, by table name, in registry order."""
    tables: dict[str, TableSpec] = {}
    for job_id in registry.order:  # a table several jobs write (alerts) is built once, from all of them
        job = registry.jobs[job_id]
        if has_suite(job) and job.sink.table not in tables:
            tables[job.sink.table] = SUITE_BUILDERS[job.transform_kind](job, registry)
    return tables
