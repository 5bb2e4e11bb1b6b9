"""Quality suites of the gold tables, derived from the job registry.

A suite is built per sink table by the builder of its job's transform kind (:data:`SUITE_BUILDERS`).
Only ``window_aggregate`` exists today; session-window and stream-join tables get their own
builder (and table spec) when the registry gains those kinds.

Each :class:`Check` names one expectation of :mod:`include.quality.checks` and how Great Expectations
evaluates it: row checks run on the gold rows plus derived columns (``_window_seconds``,
``_start_offset_seconds``, ``_seconds_in_future``, see :mod:`include.quality.frames`); table checks run
on one row of table metrics (:mod:`include.quality.table_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from include.quality.checks import CHECKS
from include.registry import JobSpec, Registry, parse_duration


@dataclass(frozen=True)
class Check:
    name: str  # stable name from include.quality.checks
    severity: str
    scope: str  # "rows" or "table"
    expectation: str  # a great_expectations.expectations class name
    kwargs: dict[str, Any]
    description: str

    @property
    def column(self) -> str:
        return self.kwargs["column"]


@dataclass(frozen=True)
class WindowedTable:
    """What the checks need to know about one windowed gold table."""

    table: str
    job_id: str
    source_table: str
    event_time: str
    window_seconds: int
    slide_seconds: int
    watermark_seconds: int
    freshness_lag_seconds: int
    keys: tuple[str, ...]
    counts: tuple[str, ...]  # count aggregations
    sums: tuple[str, ...]  # sum aggregations
    mode: str  # sink mode: append (finalized windows only) or update (MERGE upserts)
    checks: list[Check] = field(default_factory=list)

    @property
    def windows_per_event(self) -> int:
        return self.window_seconds // self.slide_seconds

    @property
    def suite_name(self) -> str:
        return self.table.replace("/", "__")


def windowed_table(job: JobSpec) -> WindowedTable:
    """The spec and checks of a window_aggregate job's sink table."""
    window = parse_duration(job.transform["window"])
    slide = parse_duration(job.transform["slide"]) if job.transform.get("slide") else window
    aggregations = job.transform["aggregations"]
    spec = WindowedTable(
        table=job.sink.table,
        job_id=job.id,
        source_table=job.source.name,
        event_time=job.source.event_time,
        window_seconds=window,
        slide_seconds=slide,
        watermark_seconds=job.source.watermark_seconds,
        freshness_lag_seconds=job.quality.freshness_lag_seconds or job.source.watermark_seconds + slide,
        keys=tuple(job.transform["keys"]),
        counts=tuple(n for n, a in aggregations.items() if a["fn"] == "count"),
        sums=tuple(n for n, a in aggregations.items() if a["fn"] == "sum"),
        mode=job.sink.mode,
    )
    spec.checks.extend(_windowed_checks(spec, job.quality.severity))
    return spec


# Transform kind -> suite builder. Future kinds (session windows, stream-stream joins) add theirs here.
SUITE_BUILDERS: dict[str, Callable[[JobSpec], WindowedTable]] = {"window_aggregate": windowed_table}


def quality_tables(registry: Registry) -> dict[str, WindowedTable]:
    """Every sink table of the registry that has a suite, by table name, in registry order."""
    return {
        registry.jobs[j].sink.table: SUITE_BUILDERS[registry.jobs[j].transform_kind](registry.jobs[j])
        for j in registry.order
        if registry.jobs[j].transform_kind in SUITE_BUILDERS
    }


def _windowed_checks(t: WindowedTable, overrides: dict[str, str]) -> list[Check]:
    def check(name: str, expectation: str, kwargs: dict[str, Any], description: str) -> Check:
        info = CHECKS[name]
        return Check(name, overrides.get(name, info.severity), info.scope, expectation, kwargs, description)

    checks = [
        check("window_size", "ExpectColumnValuesToBeInSet",
              {"column": "_window_seconds", "value_set": [t.window_seconds]},
              f"window_end - window_start is {t.window_seconds} s"),
        check("window_aligned", "ExpectColumnValuesToBeInSet",
              {"column": "_start_offset_seconds", "value_set": [0]},
              f"window_start is a multiple of {t.slide_seconds} s since the epoch"),
        check("no_future_windows", "ExpectColumnValuesToBeBetween",
              {"column": "_seconds_in_future", "max_value": 0},
              "window_start is not after the validation time"),
    ]
    checks += [check("keys_not_null", "ExpectColumnValuesToNotBeNull", {"column": key}, f"{key} is never null")
               for key in t.keys]
    checks += [check("event_count_positive", "ExpectColumnValuesToBeBetween", {"column": column, "min_value": 1},
                     f"{column} is at least 1") for column in t.counts]
    checks += [check("values_in_range", "ExpectColumnValuesToBeBetween",
                     {"column": column, "min_value": 0, "max_value": 1e12}, f"{column} is between 0 and 1e12")
               for column in t.sums]
    checks += [
        check("unique_windows", "ExpectColumnMaxToBeBetween", {"column": "duplicate_window_rows", "max_value": 0},
              f"one row per (window_start, window_end, {', '.join(t.keys)}) in the whole table"),
        check("freshness", "ExpectColumnMaxToBeBetween",
              {"column": "freshness_lag_seconds", "max_value": t.freshness_lag_seconds},
              f"latest finalized window_end within {t.freshness_lag_seconds} s of the latest "
              f"{t.source_table} {t.event_time}"),
    ]
    if t.counts:
        checks.append(check(
            "reconciliation", "ExpectColumnMaxToBeBetween",
            {"column": "unreconciled_windows", "max_value": 0},
            f"per finalized window, sum({t.counts[0]}) is at most the distinct {t.source_table} events in it "
            f"and at least those less the late-arrival candidates"))
    return checks
