"""The vocabulary every suite is written in: :class:`Check`, :class:`RowOps` and the :class:`TableSpec` base,
with the checks several kinds share (future times, non-null keys, counts and sums, uniqueness, freshness)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from include.registry import JobSpec
from include.registry.checks import CHECKS


def after_now(column: str) -> str:
    """The derived column ``no_future_windows`` checks: seconds from the validation time to `column` (at most 0).
    Derived columns have readable names: the report's headings show them."""
    return f"{column} after now (s)"


@dataclass(frozen=True)
class Check:
    """One expectation of a suite: its stable name, severity, scope and Great Expectations form."""

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

    def field_names(self, column: str, separator: str) -> Any: ...  # a JSON object's keys, sorted, joined (null: null)


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
    def details_column(self) -> str | None:
        """A row column whose counts per value :meth:`row_details` turns into the row checks' details (None: none)."""
        return None

    def row_details(self, value_counts: dict[Any, int]) -> dict[str, dict[str, Any]]:
        """Per row check name, details of the validated rows shown with its result (from :attr:`details_column`)."""
        return {}

    @property
    def check_columns(self) -> tuple[str, ...]:
        """The columns of the frame the row suite validates: those its checks name, in order."""
        return tuple(dict.fromkeys(c.column for c in self.checks if c.scope == "rows"))

    def _check(self, name: str, expectation: str, kwargs: dict[str, Any], description: str,
               overrides: dict[str, str]) -> Check:
        info = CHECKS[name]
        return Check(name, overrides.get(name, info.severity), info.scope, expectation, kwargs, description)

    def _not_null_checks(self, columns: tuple[str, ...], overrides: dict[str, str]) -> list[Check]:
        """``keys_not_null`` on each of `columns`."""
        return [self._check("keys_not_null", "ExpectColumnValuesToNotBeNull", {"column": column},
                            f"{column} is never null", overrides) for column in columns]

    def _time_and_key_checks(self, time_column: str, not_null: tuple[str, ...],
                             overrides: dict[str, str]) -> list[Check]:
        """``no_future_windows`` on `time_column` (derived: :func:`after_now`), ``keys_not_null``."""
        return [self._check("no_future_windows", "ExpectColumnValuesToBeBetween",
                            {"column": after_now(time_column), "max_value": 0},
                            f"{time_column} is not after the validation time", overrides),
                *self._not_null_checks(not_null, overrides)]

    def _value_checks(self, counts: tuple[str, ...], sums: tuple[str, ...], overrides: dict[str, str]) -> list[Check]:
        """``event_count_positive`` on each count column, then ``values_in_range`` on each sum column."""
        return [self._check("event_count_positive", "ExpectColumnValuesToBeBetween", {"column": column, "min_value": 1},
                            f"{column} is at least 1", overrides) for column in counts] + [
            self._check("values_in_range", "ExpectColumnValuesToBeBetween",
                        {"column": column, "min_value": 0, "max_value": 1e12}, f"{column} is between 0 and 1e12",
                        overrides) for column in sums]

    def _unique_check(self, overrides: dict[str, str]) -> Check:
        """The uniqueness of :attr:`unique_key` in the whole table."""
        return self._check(self.unique_check, "ExpectColumnMaxToBeBetween",
                           {"column": self.duplicates_metric, "max_value": 0},
                           f"one row per ({', '.join(self.unique_key)}) in the whole table", overrides)

    def _freshness_check(self, freshness: str, overrides: dict[str, str], source_filter: str = "") -> Check:
        """The freshness (`freshness`: what must be recent) against the source's latest event time."""
        return self._check("freshness", "ExpectColumnMaxToBeBetween",
                           {"column": "freshness_lag_seconds", "max_value": self.freshness_lag_seconds},
                           f"{freshness} within {self.freshness_lag_seconds} s of the latest {self.source_table} "
                           f"{self.event_time}{source_filter}", overrides)


Spec = TypeVar("Spec", bound=TableSpec)


def common_fields(job: JobSpec, default_lag: int) -> dict[str, Any]:
    """The :class:`TableSpec` fields of `job`'s sink table; the freshness lag defaults to `default_lag`."""
    return {"table": job.sink.table, "job_id": job.id, "source_table": job.source.name,
            "event_time": job.source.event_time, "watermark_seconds": job.source.watermark_seconds,
            "freshness_lag_seconds": job.quality.freshness_lag_seconds or default_lag, "mode": job.sink.mode}


def with_checks(spec: Spec, overrides: dict[str, str]) -> Spec:
    """`spec` with its checks made (severity `overrides` applied)."""
    spec.checks.extend(spec.make_checks(overrides))
    return spec
