"""An `apply_changes` job: a CDC bronze table's changes applied to its table, SCD type 1 or type 2, exactly once.

The stream itself keeps no state: each micro-batch of changes is applied by MERGE to the tables, which hold what
the order needs (each row's `_cdc_sequence`; a type 1 job's deleted keys in `<table>_deletes`; a type 2 job's
versions), so that:

- an older change arriving after a newer one never overwrites the newer state (type 1), and lands in its place in
  the history (type 2); the same change delivered twice changes nothing;
- a delete then an insert of a key gives the live row (type 1), a closed version then an open one (type 2);
- a change that touches no tracked column adds no version (its other columns are updated in the version in place);
- a key has at most one current version.

Each MERGE commits with the batch's Delta app transaction (as every sink here: spark_jobs/batch_writer.py), so a batch
replayed after a crash writes nothing twice. A type 1 batch commits its table first and its deletes table second,
both from its changes as the deletes table held before the first (the table's own rows are compared by its MERGE):
replayed after the first, the keys it deleted are recorded then. What is known of a key is the newer of its row and
its recorded delete, so a delete recorded older than the row (it arrived late) changes nothing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from include.registry import JobSpec
from include.registry.cdc import SEQUENCE
from include.storage.paths import StoragePath
from spark_jobs.schemas import spark_type

ORDER = "_order"  # the change's sequence as sortable text
DELETE = "_delete"  # the change deletes its key


def changes(stream: DataFrame, job: JobSpec) -> DataFrame:
    """The stream of changes an apply_changes job applies: the keys, the data, the order, whether it deletes; the
    tombstones (the key of a delete, again) and rows without an order left out."""
    spec = job.transform
    optional = [c for c in ("_cdc_tx_id", "_cdc_commit_time", "_kafka_offset") if c in stream.columns]
    # a column the job's output gains before its input has it (bronze not evolved yet, or commits read under the
    # schema they were written with) reads null
    data = [F.col(c) if c in stream.columns else F.lit(None).cast(spark_type(job.output_schema[c])).alias(c)
            for c in spec.columns]
    return (stream.select(*data, *optional, sortable(stream, spec.sequence_by).alias(ORDER),
                          F.coalesce(F.expr(spec.delete_when), F.lit(False)).alias(DELETE),
                          F.col("_cdc_op") if "_cdc_op" in stream.columns else F.lit(None).alias("_cdc_op"))
            .where(F.col(ORDER).isNotNull() & ~F.coalesce(F.col("_cdc_op") == "t", F.lit(False)))
            .drop("_cdc_op"))


def sortable(stream: DataFrame, column: str) -> Column:
    """The order column as text that sorts as its values do."""
    dtype = dict(stream.dtypes)[column]
    if dtype in ("bigint", "int"):
        return F.lpad(F.col(column).cast("string"), 20, "0")
    if dtype == "timestamp":
        return F.date_format(F.col(column), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS")
    return F.col(column).cast("string")


def read_at(spark, path: StoragePath, version: int) -> DataFrame:
    return spark.read.format("delta").option("versionAsOf", version).load(str(path))


def last_per_key(batch: DataFrame, keys: list[str], ignore_nulls: bool, data: list[str]) -> DataFrame:
    """The batch's last change of each key (of a change delivered twice, either copy: they are the same); `ignore_nulls`:
    its nulls filled from the key's earlier changes in the batch since its last delete (a delete delivered twice only
    starts the run after it once more), and `_fresh` (the key was deleted earlier in the batch: the table's row is not
    to be filled from)."""
    by_key = Window.partitionBy(*keys).orderBy(ORDER)
    if ignore_nulls:
        deletes = F.sum(F.col(DELETE).cast("int")).over(by_key.rowsBetween(Window.unboundedPreceding, -1))
        batch = batch.withColumn("_since", F.coalesce(deletes, F.lit(0)))
        run = Window.partitionBy(*keys, "_since").orderBy(ORDER).rowsBetween(Window.unboundedPreceding, 0)
        batch = batch.select(*[F.last(c, ignorenulls=True).over(run).alias(c) if c in data else F.col(c)
                               for c in batch.columns], (F.col("_since") > 0).alias("_fresh"))
    else:
        batch = batch.withColumn("_fresh", F.lit(False))
    newest = Window.partitionBy(*keys).orderBy(F.col(ORDER).desc())
    return batch.withColumn("_n", F.row_number().over(newest)).where("_n = 1").drop("_n", "_since")


TOMBSTONED = "_tombstoned"  # the key is in the deletes table (an older delete): a newer write forgets it


def type1_effective(spark, job: JobSpec, batch: DataFrame, deletes: StoragePath, deletes_version: int) -> DataFrame:
    """The batch's last change of each key, unless the deletes table (read at `deletes_version`) holds a newer delete
    of the key: the changes to apply (the table's own rows are compared by the MERGE: :func:`merge_type1`)."""
    spec = job.transform
    keys = list(spec.keys)
    latest = last_per_key(batch, keys, spec.ignore_null_updates, [c for c in spec.columns if c not in keys])
    gone = read_at(spark, deletes, deletes_version).select(*keys, F.col(SEQUENCE).alias("_d_order"))
    known = latest.join(F.broadcast(gone), keys, "left")
    return known.where(F.col("_d_order").isNull() | (F.col(ORDER) > F.col("_d_order"))).select(
        *latest.columns, F.col("_d_order").isNotNull().alias(TOMBSTONED))


def _type1_values(job: JobSpec) -> tuple[dict[str, Column], dict[str, Column]]:
    """A type 1 MERGE's columns over its source `s` and target `t`: (those an update sets, those an insert writes)."""
    spec = job.transform
    keys = list(spec.keys)
    data = [c for c in spec.columns if c not in keys]

    def fill(column: str) -> Column:  # ignore_null_updates: a null keeps the row's value, unless the key was deleted
        if not spec.ignore_null_updates:
            return F.col(f"s.`{column}`")
        return F.expr(f"CASE WHEN s._fresh THEN s.`{column}` ELSE coalesce(s.`{column}`, t.`{column}`) END")

    written = {SEQUENCE: F.col(f"s.{ORDER}"), "_cdc_commit_time": F.col("s._cdc_commit_time")}
    inserted = {**{c: F.col(f"s.`{c}`") for c in (*keys, *data)}, **written}
    return {**{c: fill(c) for c in data}, **written}, inserted


def _deletes_values(job: JobSpec) -> dict[str, Column]:
    """A delete as the deletes table records it: its key, order and commit time (over the MERGE's source `s`)."""
    return {**{k: F.col(f"s.`{k}`") for k in job.transform.keys}, SEQUENCE: F.col(f"s.{ORDER}"),
            "_cdc_commit_time": F.col("s._cdc_commit_time")}


def merge_type1(spark, job: JobSpec, effective: DataFrame, table: StoragePath) -> None:
    """The effective changes into the type 1 table, each only over a row of an older change: a delete removes its
    key's row, any other change writes it."""
    from delta.tables import DeltaTable

    updated, inserted = _type1_values(job)
    (DeltaTable.forPath(spark, str(table)).alias("t")
     .merge(effective.alias("s"), " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in job.transform.keys))
     .whenMatchedDelete(condition=f"s.{DELETE} AND s.{ORDER} > t.{SEQUENCE}")
     .whenMatchedUpdate(condition=f"NOT s.{DELETE} AND s.{ORDER} > t.{SEQUENCE}", set=updated)
     .whenNotMatchedInsert(condition=f"NOT s.{DELETE}", values=inserted)
     .execute())


def type1_rows(job: JobSpec, effective: DataFrame) -> DataFrame:
    """What :func:`merge_type1` makes of a table that holds no row: the rows it inserts (appended instead: the same
    commit without the join)."""
    return effective.alias("s").where(~F.col(DELETE)).select(
        *[value.alias(column) for column, value in _type1_values(job)[1].items()])


def merge_deletes(spark, job: JobSpec, effective: DataFrame, deletes: StoragePath) -> None:
    """The effective changes into the deletes table: a delete records its key and order, a newer write forgets it
    (only the deletes and the writes of keys it holds are its source). A delete older than the table's row is
    recorded too: harmless, as what is known of a key is the newer of the two."""
    from delta.tables import DeltaTable

    recorded_delete = _deletes_values(job)
    (DeltaTable.forPath(spark, str(deletes)).alias("t")
     .merge(effective.where(F.col(DELETE) | F.col(TOMBSTONED)).alias("s"),
            " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in job.transform.keys))
     .whenMatchedUpdate(condition=f"s.{DELETE}",
                        set={k: v for k, v in recorded_delete.items() if k not in job.transform.keys})
     .whenMatchedDelete(condition=f"NOT s.{DELETE}")
     .whenNotMatchedInsert(condition=f"s.{DELETE}", values=recorded_delete)
     .execute())


def deletes_rows(job: JobSpec, effective: DataFrame) -> DataFrame:
    """What :func:`merge_deletes` makes of a deletes table that holds no row: the deletes, recorded."""
    return effective.alias("s").where(F.col(DELETE)).select(
        *[value.alias(column) for column, value in _deletes_values(job).items()])
