"""The foreachBatch sink: each micro-batch committed to its Delta table(s) exactly once, by the executors.

Every commit records Delta's app transaction (``<job>:<query id>``, the batch id) with the data: appends
through Delta's own write command (``append_batch``), MERGE upserts through the session confs Delta's MERGE
reads (``spark.databricks.delta.write.txnAppId`` / ``txnVersion``). A batch replayed after a crash (between the
Delta commit and Spark's commit log) finds its transaction in the table's log and writes nothing, in every
table it writes. A parse_json batch writes two tables (quarantine, then the sink), each with its own record.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from include import checkpoints
from include.checkpoints.kafka_offsets import batch_offsets, skipped_offsets
from include.records import batch_ledger
from include.records.alerts import record_alert
from include.registry import QUARANTINE_SCHEMA, JobSpec
from include.registry.cdc import ApplyChanges
from include.settings import Settings
from include.storage import delta as delta_store
from spark_jobs import batch_hooks, landing
from spark_jobs.cdc_sink import reads_batch_once, write_changes
from spark_jobs.delta_txn import append_batch, recorded
from spark_jobs.json_values import QUARANTINE_REASON, RAW_LINE
from spark_jobs.schemas import spark_schema, spark_type
from spark_jobs.transforms import parse_json

log = logging.getLogger(__name__)



def make_batch_writer(settings: Settings, job: JobSpec, written: Counter | None = None,
                      guard: Callable[[], None] | None = None) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function of `job`; adds the rows each batch writes per table to `written`. `guard` (the job's
    lease check, :meth:`include.records.lease.Lease.check`) raises when this process may no longer commit: it is called
    before each table's commit and once the batch is written, before Spark commits the batch in its checkpoint."""
    checkpoint = settings.layout.checkpoint(job.id)
    guard = guard or (lambda: None)
    handles = delta_store.TableHandles()  # this run's tables, read on each batch

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        app_id = checkpoints.writer_app_id(checkpoint, job.id)
        if app_id is None:
            raise RuntimeError(f"job {job.id!r}: no query id in checkpoint {checkpoint}")
        # Computed once, in parallel, into the executors' cache; the writes then read the cache (a write
        # of `files_per_batch` files needs no shuffle, and an empty side costs no Spark job).
        if not reads_batch_once(job):
            batch.persist()
        try:
            written_batch, rows_per_table, unread = count_routes(settings, job, batch, batch_id)  # fills the cache
            report_data_loss(settings, job, batch, batch_id, app_id)
            batch_hooks.fire(job.id, "before_commit", batch_id)
            if isinstance(job.transform, ApplyChanges):  # its own MERGEs (spark_jobs/cdc_apply.py)
                versions, gained = write_changes(settings, job, written_batch, batch_id, app_id, handles, guard)
            else:
                versions, gained = write_routes(settings, job, routes(job, written_batch, unread), rows_per_table,
                                                batch_id, app_id, handles, guard)
            batch_ledger.record(settings, job.id, app_id, batch_id, versions, gained)
            guard()  # Spark writes the batch's commit next: a holder that lost its lease does not
            if written is not None:
                written.update(gained)  # rows the tables really gained (the summary line's "rows out")
            batch_hooks.fire(job.id, "after_commit", batch_id)
        finally:
            batch.unpersist()
            landing.reread_dir(settings, job.id, batch_id).rmtree()

    return write_batch


def write_routes(settings: Settings, job: JobSpec, tables: list[tuple[str, DataFrame]], rows_per_table: dict[str, int],
                 batch_id: int, app_id: str, handles: delta_store.TableHandles,
                 guard: Callable[[], None]) -> tuple[dict[str, int], dict[str, int]]:
    """Each table's rows of the batch appended (or upserted), once: (each table's version holding the batch, the rows
    each gained)."""
    sink = job.sink
    gained, versions = {}, {}
    for table, rows in tables:
        location = settings.layout.table(table)
        committed, versions[table] = delta_store.batch_check(location, app_id, handles)
        if not rows_per_table.get(table):
            continue
        if committed is not None and committed >= batch_id:  # a replay: Delta would skip it anyway
            log.info("job=%s batch %d: %s already holds it (a replay): not written again", job.id, batch_id, table)
            continue
        guard()
        if table == sink.table and sink.mode == "update":
            merge(rows, str(location), sink.merge_keys, app_id, batch_id)
            versions[table] = handles.latest(location).version()
        else:
            versions[table] = append_batch(rows.coalesce(sink.files_per_batch), str(location), app_id, batch_id,
                                           versions[table])
        gained[table] = rows_per_table[table]
    return versions, gained


def report_data_loss(settings: Settings, job: JobSpec, batch: DataFrame, batch_id: int, app_id: str) -> None:
    """An `_ops/alerts` row per partition whose offsets this batch passed over unread, for the Kafka sources with
    `fail_on_data_loss: false` (Spark goes on past them with a warning only): never a silent skip. Not again for a
    batch replayed after a crash that its sink table already holds."""
    if not any(s.kind == "kafka" and not s.kafka.fail_on_data_loss for s in job.sources) or batch_id == 0:
        return
    committed = delta_store.committed_batch(settings.layout.table(job.sink.table), app_id)
    if committed is not None and committed >= batch_id:
        return

    checkpoint = settings.layout.checkpoint(job.id)
    first_read = {(r[0], r[1]): r[2] for r in batch.groupBy("_kafka_topic", "_kafka_partition")
                  .agg(F.min("_kafka_offset")).collect()}
    for line in skipped_offsets(batch_offsets(checkpoint, batch_id - 1), batch_offsets(checkpoint, batch_id),
                                first_read):
        record_alert(settings, job.id, f"batch {batch_id}: {line}")


def merge(rows: DataFrame, path: str, keys: tuple[str, ...], app_id: str, batch_id: int) -> None:
    """Upsert `rows` by `keys`, recorded as (app_id, batch_id): a replay of that batch changes nothing."""
    from delta.tables import DeltaTable

    spark = rows.sparkSession  # the streaming query's own session: the confs touch no other writer
    condition = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
    with recorded(spark, app_id, batch_id):
        (DeltaTable.forPath(spark, path).alias("t").merge(rows.alias("s"), condition)
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())


def count_routes(settings: Settings, job: JobSpec, batch: DataFrame,
                 batch_id: int) -> tuple[DataFrame, dict[str, int], list[dict]]:
    """The batch as it is written (a landing file with lines too long to read, read again: spark_jobs.landing), its
    rows per table counted in one Spark job, and for a landing batch the quarantine rows of those lines."""
    if isinstance(job.transform, ApplyChanges):  # its MERGEs count what they apply
        return batch, {}, []
    if not job.sink.quarantine_table:
        return batch, {job.sink.table: batch.count()}, []
    good = F.col(QUARANTINE_REASON).isNull()
    if job.source.kind == "kafka":  # a message is read whole: nothing is left unread
        counts = batch.agg(F.count_if(good).alias("good"), F.count_if(~good).alias("bad")).first()
        return batch, {job.sink.table: counts["good"], job.sink.quarantine_table: counts["bad"]}, []
    good_rows, bad_rows, bytes_read = landing.tally(batch, good)
    short = landing.short_read_files(settings, job, batch_id, bytes_read)
    if short:
        batch = landing.reread(settings, job, batch_id, batch, list(short), lambda lines: parse_json(lines, job))
        good_rows, bad_rows, bytes_read = landing.tally(batch, good)
        short = landing.short_read_files(settings, job, batch_id, bytes_read)
    unread = landing.unread_lines(job, short)
    return batch, {job.sink.table: good_rows, job.sink.quarantine_table: bad_rows + len(unread)}, unread


def routes(job: JobSpec, batch: DataFrame, unread: list[dict] | None = None) -> list[tuple[str, DataFrame]]:
    """The batch's rows per table: a parse_json batch splits into the quarantine table (plus `unread`,
    rows for lines too long to read) and the sink."""
    # A column the output gains before the job's input has it (its upstream not evolved yet, or commits read under
    # the schema they were written with) is written null; one read under a narrower type than the output's (commits
    # from before a widening) is widened, as its table reads its older files.
    columns = [(F.col(c) if c in batch.columns else F.lit(None)).cast(spark_type(t)).alias(c)
               for c, t in job.output_schema.items()]
    if not job.sink.quarantine_table:
        return [(job.sink.table, batch.select(*columns))]
    bad = F.col(QUARANTINE_REASON).isNotNull()
    quarantined = batch.where(bad).select(
        F.col(RAW_LINE).alias("raw_line"), "_source_file", F.col(QUARANTINE_REASON).alias("reason"), "_ingested_at"
    ).select(*QUARANTINE_SCHEMA)
    if unread:
        quarantined = quarantined.unionByName(
            batch.sparkSession.createDataFrame(unread, spark_schema(dict(QUARANTINE_SCHEMA))))
    return [(job.sink.quarantine_table, quarantined), (job.sink.table, batch.where(~bad).select(*columns))]
