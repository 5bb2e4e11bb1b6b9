"""SCD type 2: a key's versions, rebuilt for the keys a micro-batch changes from their versions so far and the
batch's changes, then merged into the history table (spark_jobs/cdc_apply.py says what holds across batches).

A version is the key's row from the change that started it to the change that ended it (`__start_at` to `__end_at`,
their commit times; `_cdc_sequence` / `_cdc_end_sequence` their order). History is kept per transaction: a key's
changes inside one transaction count as their last (a reader of the database never saw the others). Rebuilding:

1. the versions so far become their changes again: each its start, its last change in place (with the values it
   holds), and its end when a delete ended it;
2. with the batch's changes, each change once (the same order twice is one change), the last of each transaction; a
   snapshot's row of a key whose changes were captured before it (a later snapshot: it restates them) left out, as
   a type 1 table leaves it (a snapshot's rows order before every change);
3. in order, a change starts a version when it is not a delete and follows a delete, nothing, or a change whose
   tracked columns differ; a delete ends the version before it; any other change updates the version in place;
4. the versions that are no longer (replaced by an earlier change arriving late, or a transaction's later change)
   are deleted, the others written.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from include.registry import JobSpec
from include.registry.cdc import END_AT, SEQUENCE, START_AT
from spark_jobs.cdc_apply import DELETE, ORDER

TX, AT = "_tx", "_at"
ACTION = "_action"


def as_changes(versions: DataFrame, keys: list[str], data: list[str]) -> DataFrame:
    """The changes that made `versions`: each version's start, and the delete that ended it (an end that starts no
    version of the key)."""
    starts = versions.select(*keys, *data, F.col(START_AT).alias(AT), F.col(SEQUENCE).alias(ORDER),
                             F.col("_cdc_tx_id").alias(TX), F.lit(False).alias(DELETE))
    in_place = versions.where(F.col("_cdc_last_sequence") > F.col(SEQUENCE)).select(
        *keys, *data, F.col(START_AT).alias(AT), F.col("_cdc_last_sequence").alias(ORDER),
        F.lit(None).cast("long").alias(TX), F.lit(False).alias(DELETE))
    ended = versions.where(F.col("_cdc_end_sequence").isNotNull())
    begun = versions.select(*keys, F.col(SEQUENCE).alias("_cdc_end_sequence"))
    deletes = ended.join(begun, [*keys, "_cdc_end_sequence"], "left_anti").select(
        *keys, *[F.lit(None).cast(dict(versions.dtypes)[c]).alias(c) for c in data], F.col(END_AT).alias(AT),
        F.col("_cdc_end_sequence").alias(ORDER), F.col("_cdc_end_tx_id").alias(TX), F.lit(True).alias(DELETE))
    return starts.unionByName(in_place).unionByName(deletes)


def restated_left_out(batch: DataFrame, before: DataFrame, keys: list[str]) -> DataFrame:
    """The batch without the snapshot rows (order `0...`) of keys whose captured changes came before them: in the
    history so far, or earlier on the topic in this batch."""
    snapshot = F.col(ORDER).startswith("0")
    if "_kafka_offset" in batch.columns:
        first_change = F.min(F.when(~snapshot, F.col("_kafka_offset"))).over(Window.partitionBy(*keys))
        batch = batch.withColumn("_first_change", first_change).where(
            ~snapshot | F.col("_first_change").isNull() | (F.col("_kafka_offset") < F.col("_first_change"))
        ).drop("_first_change")
    captured = [F.coalesce(~F.col(c).startswith("0"), F.lit(False))
                for c in (SEQUENCE, "_cdc_last_sequence", "_cdc_end_sequence")]
    changed = before.where(captured[0] | captured[1] | captured[2]).select(*keys).distinct().withColumn(
        "_changed", F.lit(True))
    return batch.join(changed, keys, "left").where(~snapshot | F.col("_changed").isNull()).drop("_changed")


def rebuild(job: JobSpec, batch: DataFrame, history: DataFrame) -> DataFrame:
    """The versions of the keys `batch` changes, from their `history` so far and the batch's changes; each row with
    its `_action`: `write` or `delete` (a version of the history that is no longer)."""
    spec = job.transform
    keys, data = list(spec.keys), [c for c in spec.columns if c not in spec.keys]
    touched = batch.select(*keys).distinct()
    before = history.join(touched, keys, "left_semi")
    arrived = restated_left_out(batch, before, keys).select(
        *keys, *data, F.col("_cdc_commit_time").alias(AT), ORDER, F.col("_cdc_tx_id").alias(TX), DELETE)
    events = as_changes(before, keys, data).withColumn("_old", F.lit(0)).unionByName(arrived.withColumn("_old", F.lit(1)))
    once = Window.partitionBy(*keys, ORDER).orderBy("_old")
    events = events.withColumn("_n", F.row_number().over(once)).where("_n = 1").drop("_n", "_old")
    in_tx = Window.partitionBy(*keys, F.coalesce(F.col(TX).cast("string"), F.col(ORDER))).orderBy(F.col(ORDER).desc())
    events = events.withColumn("_n", F.row_number().over(in_tx)).where("_n = 1").drop("_n")
    by_key = Window.partitionBy(*keys).orderBy(ORDER)
    if spec.ignore_null_updates:
        deletes = F.sum(F.col(DELETE).cast("int")).over(by_key.rowsBetween(Window.unboundedPreceding, 0))
        events = events.withColumn("_since", deletes)
        run = Window.partitionBy(*keys, "_since").orderBy(ORDER).rowsBetween(Window.unboundedPreceding, 0)
        events = events.select(*[F.last(c, ignorenulls=True).over(run).alias(c) if c in data else F.col(c)
                                 for c in events.columns]).drop("_since")
    return _versions(events, keys, data, list(spec.tracked), before)


def _versions(events: DataFrame, keys: list[str], data: list[str], tracked: list[str], before: DataFrame) -> DataFrame:
    """Fold each key's events, in order, into versions (module docstring, step 3); mark the versions of `before`
    that are no longer for deletion."""
    by_key = Window.partitionBy(*keys).orderBy(ORDER)
    values = F.struct(*[F.col(c) for c in tracked]) if tracked else F.lit(None)
    previous_delete, previous_values = F.lag(F.col(DELETE)).over(by_key), F.lag(values).over(by_key)
    starts = ~F.col(DELETE) & (previous_delete.isNull() | previous_delete | ~previous_values.eqNullSafe(values))
    events = events.withColumn("_run", F.sum((starts | F.col(DELETE)).cast("int")).over(
        by_key.rowsBetween(Window.unboundedPreceding, 0)))
    runs = events.groupBy(*keys, "_run").agg(
        *[F.max_by(c, ORDER).alias(c) for c in data],
        F.min(ORDER).alias(SEQUENCE), F.min_by(AT, ORDER).alias(START_AT), F.min_by(TX, ORDER).alias("_cdc_tx_id"),
        F.max(ORDER).alias("_cdc_last_sequence"), F.min_by(DELETE, ORDER).alias("_gap"))
    following = Window.partitionBy(*keys).orderBy("_run")
    versions = runs.select(
        "*", F.lead(SEQUENCE).over(following).alias("_cdc_end_sequence"),
        F.lead(START_AT).over(following).alias(END_AT), F.lead("_cdc_tx_id").over(following).alias("_cdc_end_tx_id"),
    ).where(~F.col("_gap")).drop("_run", "_gap")
    columns = [*keys, *data, START_AT, END_AT, SEQUENCE, "_cdc_tx_id", "_cdc_last_sequence", "_cdc_end_sequence",
               "_cdc_end_tx_id"]
    written = versions.select(*columns, F.lit("write").alias(ACTION))
    gone = before.join(versions.select(*keys, SEQUENCE), [*keys, SEQUENCE], "left_anti")
    return written.unionByName(gone.select(*columns, F.lit("delete").alias(ACTION)))


def merge_history(spark, job: JobSpec, versions: DataFrame, table: str) -> None:
    """The rebuilt versions into the history table: each written (by its key and first change), the ones no longer
    deleted."""
    from delta.tables import DeltaTable

    keys = list(job.transform.keys)
    condition = " AND ".join([*(f"t.`{k}` <=> s.`{k}`" for k in keys), f"t.{SEQUENCE} = s.{SEQUENCE}"])
    columns = {c: F.col(f"s.`{c}`") for c in versions.columns if c != ACTION}
    (DeltaTable.forPath(spark, table).alias("t").merge(versions.alias("s"), condition)
     .whenMatchedDelete(condition=f"s.{ACTION} = 'delete'")
     .whenMatchedUpdate(set=columns)
     .whenNotMatchedInsert(condition=f"s.{ACTION} = 'write'", values=columns)
     .execute())
