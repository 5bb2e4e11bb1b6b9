"""The foreachBatch sink: each micro-batch committed to its Delta table(s) exactly once, by the executors.

Appends carry Delta's idempotent-write options (``txnAppId`` = ``<job>:<query id>``, ``txnVersion`` =
the batch id) and MERGE upserts the same pair through the session confs Delta's MERGE reads
(``spark.databricks.delta.write.txnAppId`` / ``txnVersion``): the app transaction is recorded in the
same Delta commit as the data, so a batch replayed after a crash (between the Delta commit and Spark's
commit log) finds it and writes nothing, in every table it writes. A parse_json batch writes two tables
(quarantine, then the sink), each with its own transaction record.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from include import checkpoints
from include.registry import QUARANTINE_SCHEMA, JobSpec
from include.settings import Settings
from spark_jobs import hooks
from spark_jobs.transforms import QUARANTINE_REASON, RAW_LINE

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def make_batch_writer(settings: Settings, job: JobSpec) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function of `job`."""
    checkpoint = settings.layout.checkpoint(job.id)
    sink = job.sink

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        query_id = checkpoints.query_id(checkpoint)
        if query_id is None:
            raise RuntimeError(f"job {job.id!r}: no query id in checkpoint {checkpoint}")
        app_id = f"{job.id}:{query_id}"
        # Computed once, in parallel, into the executors' cache; the writes then read the cache (a write
        # of `files_per_batch` files needs no shuffle, and an empty side costs no Spark job).
        batch.persist()
        try:
            rows_in_batch = batch.count()
            hooks.fire(job.id, "before_commit", batch_id)
            for table, rows in routes(job, batch) if rows_in_batch else []:
                if rows.isEmpty():
                    continue
                path = str(settings.layout.table(table))
                if table == sink.table and sink.mode == "update":
                    merge(rows, path, sink.merge_keys, app_id, batch_id)
                else:
                    (rows.coalesce(sink.files_per_batch).write.format("delta").mode("append")
                     .option("txnAppId", app_id).option("txnVersion", batch_id).save(path))
            hooks.fire(job.id, "after_commit", batch_id)
        finally:
            batch.unpersist()

    return write_batch


def merge(rows: DataFrame, path: str, keys: tuple[str, ...], app_id: str, batch_id: int) -> None:
    """Upsert `rows` by `keys`, recorded as (app_id, batch_id): a replay of that batch changes nothing."""
    from delta.tables import DeltaTable

    spark = rows.sparkSession  # the streaming query's own session: the confs touch no other writer
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(batch_id))
    try:
        condition = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        (DeltaTable.forPath(spark, path).alias("t").merge(rows.alias("s"), condition)
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def routes(job: JobSpec, batch: DataFrame) -> list[tuple[str, DataFrame]]:
    """The batch's rows per table: a parse_json batch splits into the quarantine table and the sink."""
    columns = list(job.output_schema)
    if not job.sink.quarantine_table:
        return [(job.sink.table, batch.select(*columns))]
    bad = F.col(QUARANTINE_REASON).isNotNull()
    quarantined = batch.where(bad).select(
        F.col(RAW_LINE).alias("raw_line"), "_source_file", F.col(QUARANTINE_REASON).alias("reason"), "_ingested_at"
    ).select(*QUARANTINE_SCHEMA)
    return [(job.sink.quarantine_table, quarantined), (job.sink.table, batch.where(~bad).select(*columns))]
