"""The sink of an `apply_changes` job: each micro-batch's changes committed to its tables exactly once (type 1:
spark_jobs/cdc_apply.py; type 2: spark_jobs/cdc_history.py), as the batch writer does for every other job."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from include.registry import JobSpec
from include.registry.cdc import ApplyChanges
from include.settings import Settings
from include.storage import delta as delta_store
from spark_jobs import batch_hooks
from spark_jobs.cdc_apply import (
    DELETE,
    TOMBSTONED,
    deletes_rows,
    merge_deletes,
    merge_type1,
    read_at,
    type1_effective,
    type1_rows,
)
from spark_jobs.cdc_history import merge_history, rebuild
from spark_jobs.delta_txn import append_batch, recorded


def reads_batch_once(job: JobSpec) -> bool:
    """Whether the job's sink reads its batch once, so that caching the batch would only cost (a type 1 sink: it caches
    each key's last change, :func:`write_changes`; type 2 reads the batch twice, the keys it changes and the changes)."""
    return isinstance(job.transform, ApplyChanges) and job.transform.scd == 1


def write_changes(settings: Settings, job: JobSpec, batch: DataFrame, batch_id: int, app_id: str,
                  handles: delta_store.TableHandles, guard) -> tuple[dict[str, int], dict[str, int]]:
    """The batch's changes applied to the job's tables, each commit recording (app_id, batch_id) and skipped when the
    table holds it already: (each table's version holding the batch, the changes applied to each). A type 1 table
    holding no row (a backfill's first batch, a full refresh) gets what its MERGE would insert appended, without the
    MERGE's join (bench/cdc_backfill.py)."""
    spark, spec = batch.sparkSession, job.transform
    tables = [job.sink.table] + ([spec.deletes_table(job.sink.table)] if spec.scd == 1 else [])
    checks = {t: delta_store.batch_check(settings.layout.table(t), app_id, handles) for t in tables}
    versions = {t: version for t, (_, version) in checks.items()}
    owed = [t for t, (committed, _) in checks.items() if committed is None or committed < batch_id]
    if not owed:
        return versions, {}
    table = settings.layout.table(job.sink.table)
    empty_as_appends = {}  # the rows a MERGE into a table holding none inserts: appended instead
    if spec.scd == 1:
        deletes = settings.layout.table(tables[1])
        applied = type1_effective(spark, job, batch, deletes, versions[tables[1]])
        writes = {tables[0]: lambda: merge_type1(spark, job, applied, table),
                  tables[1]: lambda: merge_deletes(spark, job, applied, deletes)}
        empty_as_appends = {tables[0]: lambda: type1_rows(job, applied), tables[1]: lambda: deletes_rows(job, applied)}
    else:
        applied = rebuild(job, batch, read_at(spark, table, versions[tables[0]]))
        writes = {tables[0]: lambda: merge_history(spark, job, applied, str(table))}
    applied = applied.persist()  # both commits apply the changes as read before the first
    try:
        if spec.scd == 1:  # the changes applied (each only over an older one), the deletes' table's own
            applied_rows, deleted, tombstones = applied.agg(
                F.count("*"), F.count_if(F.col(DELETE)), F.count_if(F.col(DELETE) | F.col(TOMBSTONED))).first()
            counted = {tables[0]: applied_rows - deleted, tables[1]: deleted}
            sources = {tables[0]: applied_rows, tables[1]: tombstones}  # the rows each MERGE reads
        else:  # the versions written or deleted
            applied_rows = applied.count()
            counted = sources = {tables[0]: applied_rows}
        gained = {}
        for number, name in enumerate(owed):
            if number:
                batch_hooks.fire(job.id, "between_tables", batch_id)
            if sources[name]:
                guard()
                location = settings.layout.table(name)
                if name in empty_as_appends and not handles.latest(location).file_uris():
                    versions[name] = append_batch(empty_as_appends[name](), str(location), app_id, batch_id,
                                                  versions[name])
                else:
                    with recorded(spark, app_id, batch_id):
                        writes[name]()
                    versions[name] = handles.latest(location).version()
            gained[name] = counted.get(name, 0)
        return versions, gained
    finally:
        applied.unpersist()
