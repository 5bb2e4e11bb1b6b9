"""Quality suites of the gold tables (and of bronze's rescued fields and the SCD tables), derived from the job registry.

A suite is built per sink table by the builder of its job's transform kind (:data:`SUITE_BUILDERS`):
one table spec class per kind, on a common :class:`TableSpec` base.

- :mod:`.base`: :class:`Check`, :class:`RowOps`, :class:`TableSpec` and the checks several kinds share.
- :mod:`.aggregate`: :class:`WindowedTable` (``window_aggregate``) and :class:`SessionTable`
  (``session_aggregate``) share :class:`AggregateTable`: rows per (start, end, keys) with count/sum
  aggregations, and the same key, count, future, uniqueness, freshness and reconciliation checks;
  :class:`RunningTable` (``running_aggregate``): totals per key that never decrease.
- :mod:`.join`: :class:`JoinTable` (``stream_join``): one row per (left key, right key), the join bound,
  unmatched rows without right values, uniqueness and freshness.
- :mod:`.rescued`: :class:`RescuedTable` (``parse_json``, bronze): the rows that carried fields the source's schema
  does not name (``_rescued``), with the field names.
- :mod:`.scd`: :class:`ScdTable` (``apply_changes``): :class:`CurrentTable` (SCD type 1: one row per key) and
  :class:`HistoryTable` (SCD type 2: a key's versions, one current, none overlapping); both fresh as the latest change
  they hold or their job has read.
- :mod:`.processor`: :class:`ProcessorTable` (``stateful_process``, by the processor's ``suite``):
  :class:`AlertTable` (alerts inside the rule's window, one alert per burst) and :class:`SessionSummaryTable`
  (session bounds, a key's sessions apart); both unique and fresh up to the job's watermark.

Each :class:`Check` names one expectation of :mod:`include.registry.checks` and how Great Expectations
evaluates it: row checks run on the gold rows plus the derived columns each spec declares in
:meth:`TableSpec.derived` (evaluated with pandas or Spark by :mod:`include.quality.frames`); table
checks run on one row of table metrics (:mod:`include.quality.table_metrics`).

This package stays light (no pandas, pyarrow, Spark or GE): the DAG files list the tables with suites
through :func:`quality_tables` at parse time.
"""

from __future__ import annotations

from collections.abc import Callable

from include.quality.suites.aggregate import (
    RUNNING_DEFAULT_LAG_SECONDS,
    AggregateTable,
    RunningTable,
    SessionTable,
    WindowedTable,
    running_table,
    session_table,
    windowed_table,
)
from include.quality.suites.base import Check, RowOps, TableSpec
from include.quality.suites.join import JoinTable, join_table
from include.quality.suites.processor import (
    AlertTable,
    AlertWriter,
    ProcessorTable,
    SessionSummaryTable,
    processor_table,
)
from include.quality.suites.rescued import RescuedTable, rescued_table
from include.quality.suites.scd import CurrentTable, HistoryTable, ScdTable, scd_table
from include.registry import (
    PROCESSORS,
    JobSpec,
    ParseJson,
    Registry,
    RunningAggregate,
    SessionAggregate,
    StatefulProcess,
    StreamJoin,
    WindowAggregate,
)
from include.registry.cdc import ApplyChanges

__all__ = [
    "RUNNING_DEFAULT_LAG_SECONDS", "SUITE_BUILDERS", "AggregateTable", "AlertTable", "AlertWriter", "Check",
    "CurrentTable", "HistoryTable", "JoinTable", "ProcessorTable", "RescuedTable", "RowOps", "RunningTable",
    "ScdTable", "SessionSummaryTable", "SessionTable", "TableSpec", "WindowedTable", "has_suite", "join_table",
    "processor_table", "quality_tables", "rescued_table", "running_table", "scd_table", "session_table",
    "windowed_table",
]

# Transform kind -> suite builder (the registry's QUALITY_KINDS).
SUITE_BUILDERS: dict[str, Callable[[JobSpec, Registry], TableSpec]] = {
    ParseJson.kind: rescued_table,
    WindowAggregate.kind: windowed_table,
    SessionAggregate.kind: session_table,
    StreamJoin.kind: join_table,
    StatefulProcess.kind: processor_table,
    RunningAggregate.kind: running_table,
    ApplyChanges.kind: scd_table,
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
