"""Which rows of a table are a job's own: every row, unless alert processors share the table, each with its
own alert types. A full refresh deletes only the job's rows; a job without a checkpoint refuses to start
over rows of its own (spark_jobs.streaming_query)."""

from __future__ import annotations

from include.registry import JobSpec, Registry
from include.settings import Settings
from include.storage import delta as delta_store


def own_rows_condition(registry: Registry, job: JobSpec, table: str) -> str | None:
    """The SQL condition on the rows of `table` that `job` wrote when other jobs write it too; None when the
    job is its only writer."""
    types = registry.own_alert_types(job, table)
    return None if types is None else f"alert_type IN ({', '.join(repr(t) for t in types)})"


def written_versions(settings: Settings, job: JobSpec) -> dict[str, int]:
    """The latest version of each table `job` writes (those that exist)."""
    return {t: delta_store.latest_version(settings.layout.table(t)) for t in job.tables_written()
            if delta_store.table_exists(settings.layout.table(t))}


def count_own_rows(settings: Settings, registry: Registry, job: JobSpec, table: str) -> int:
    """Rows of `table` that `job` wrote (0 when the table does not exist)."""
    path = settings.layout.table(table)
    if not delta_store.table_exists(path):
        return 0
    return delta_store.count_rows(path, own_rows_condition(registry, job, table))
