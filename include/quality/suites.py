"""Quality suites of the windowed gold tables, derived from the job registry.

Each check has a stable name and a severity: `blocking` fails the run, `warning` is recorded.
Row checks look at the rows being validated (new rows when incremental); table checks
(uniqueness, freshness, reconciliation) always look at the whole table, because a new row can
break them together with an old one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from include.registry import JobSpec, Registry, parse_duration

BLOCKING, WARNING = "blocking", "warning"


@dataclass(frozen=True)
class Check:
    name: str
    severity: str
    scope: str  # "rows" or "table"
    expectation: str  # a great_expectations.expectations class name
    kwargs: dict
    description: str


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
    keys: tuple[str, ...]
    counts: tuple[str, ...]  # count aggregations
    sums: tuple[str, ...]  # sum aggregations
    mode: str
    checks: list[Check] = field(default_factory=list)

    @property
    def freshness_limit_seconds(self) -> int:
        """Latest finalized window_end may trail the latest event by watermark + slide at most."""
        return self.watermark_seconds + self.slide_seconds


def windowed_tables(registry: Registry) -> dict[str, WindowedTable]:
    """Every window_aggregate sink of the registry, with its checks."""
    tables = {}
    for job in registry.jobs.values():
        if job.transform_kind == "window_aggregate":
            spec = _describe(job)
            spec.checks.extend(_checks(spec))
            tables[spec.table] = spec
    return tables


def _describe(job: JobSpec) -> WindowedTable:
    window = parse_duration(job.transform["window"])
    aggregations = job.transform["aggregations"]
    return WindowedTable(
        table=job.sink.table,
        job_id=job.id,
        source_table=job.source.name,
        event_time=job.source.event_time,
        window_seconds=window,
        slide_seconds=parse_duration(job.transform["slide"]) if job.transform.get("slide") else window,
        watermark_seconds=job.source.watermark_seconds,
        keys=tuple(job.transform["keys"]),
        counts=tuple(n for n, a in aggregations.items() if a["fn"] == "count"),
        sums=tuple(n for n, a in aggregations.items() if a["fn"] == "sum"),
        mode=job.sink.mode,
    )


def _checks(t: WindowedTable) -> list[Check]:
    checks = [
        Check("window_size", BLOCKING, "rows", "ExpectColumnValuesToBeInSet",
              {"column": "_window_seconds", "value_set": [t.window_seconds]},
              f"window_end - window_start is {t.window_seconds} s"),
        Check("window_aligned", BLOCKING, "rows", "ExpectColumnValuesToBeInSet",
              {"column": "_start_offset_seconds", "value_set": [0]},
              f"window_start lies on the {t.slide_seconds}-second grid"),
        Check("no_future_windows", BLOCKING, "rows", "ExpectColumnValuesToBeBetween",
              {"column": "_seconds_in_future", "max_value": 0},
              "no window starts after the validation time"),
        Check("unique_windows", BLOCKING, "table", "ExpectColumnMaxToBeBetween",
              {"column": "duplicate_window_rows", "max_value": 0},
              f"one row per (window_start, window_end, {', '.join(t.keys)})"),
        Check("freshness", BLOCKING, "table", "ExpectColumnMaxToBeBetween",
              {"column": "freshness_lag_seconds", "max_value": t.freshness_limit_seconds},
              f"latest finalized window_end within {t.freshness_limit_seconds} s of the latest {t.source_table} event"),
        Check("reconciliation", BLOCKING, "table", "ExpectColumnMaxToBeBetween",
              {"column": "reconciliation_mismatched_windows", "max_value": 0},
              f"per finalized window, sum({t.counts[0] if t.counts else 'count'}) equals the distinct "
              f"{t.source_table} events in it"),
    ]
    for key in t.keys:
        checks.append(Check("keys_not_null", BLOCKING, "rows", "ExpectColumnValuesToNotBeNull",
                            {"column": key}, f"{key} is never null"))
    for column in t.counts:
        checks.append(Check("event_count_positive", BLOCKING, "rows", "ExpectColumnValuesToBeBetween",
                            {"column": column, "min_value": 1}, f"{column} >= 1"))
    for column in t.sums:
        checks.append(Check("values_in_range", WARNING, "rows", "ExpectColumnValuesToBeBetween",
                            {"column": column, "min_value": 0, "max_value": 1e12}, f"0 <= {column} <= 1e12"))
    if not t.counts:
        checks = [c for c in checks if c.name != "reconciliation"]
    return checks
