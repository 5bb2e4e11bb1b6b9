"""full-refresh's steps: per job, move the checkpoint aside and empty its tables (a new Delta version each; history
kept), then a new snapshot of each database whose topics lost changes (include/checkpoints/cdc_refresh.py), then per
job, rebuild from all source data, upstream first (its rules: include/checkpoints/modes.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from include.cdc.chain import snapshot
from include.checkpoints.cdc_refresh import NEW_SNAPSHOT
from include.checkpoints.modes import FullRefreshRules
from include.checkpoints.ownership import own_rows_condition
from include.kafka.connection import bootstrap_servers
from include.registry import Trigger
from include.storage import delta as delta_store
from include.storage.paths import StoragePath
from spark_jobs.checkpoint_actions.base import ActionContext, ModeAction, Prepared, Step, move_aside
from spark_jobs.delta_tables import appends_opened
from spark_jobs.schemas import spark_schema
from spark_jobs.streaming_query import run_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class FullRefresh(FullRefreshRules, ModeAction):
    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        resets = [Step(item.job, "move the checkpoint aside and empty " + ", ".join(
            ctx.registry.job(item.job).tables_written()), lambda item=item: reset(ctx, item)) for item in prepared]
        snapshots = {database: item.job for item in prepared for database in item.data.get(NEW_SNAPSHOT, ())}
        new_snapshots = [Step(job_id, f"take a new snapshot of the {database} database's captured tables",
                              lambda database=database, job_id=job_id: new_snapshot(ctx, job_id, database))
                         for database, job_id in snapshots.items()]
        return resets + new_snapshots + [Step(item.job, "rebuild from all source data (available-now)",
                                              lambda job_id=item.job: rebuild(ctx, job_id)) for item in prepared]


def reset(ctx: ActionContext, prepared: Prepared) -> None:
    job = ctx.registry.job(prepared.job)
    move_aside(ctx.settings, prepared)
    for table in job.tables_written():  # the sink, a quarantine table, a type 1 job's deletes table: each its schema
        empty_table(ctx.spark, ctx.settings.layout.table(table), own_rows_condition(ctx.registry, job, table),
                    job.sink.properties, ctx.registry.table_schemas[table],
                    job.sink.partition_by if table == job.sink.table else ())


def new_snapshot(ctx: ActionContext, job_id: str, database: str) -> None:
    """The connector of `database` reads its tables again, onto the topics `job_id` rebuilds from (its offsets
    deleted: again after a crash, a snapshot more, which duplicates nothing: include/checkpoints/cdc_refresh.py)."""
    source = next(s for s in ctx.registry.job(job_id).sources if s.cdc is not None and s.cdc.database == database)
    log.info("job=%s: %s", job_id, snapshot(ctx.settings, ctx.registry, database,
                                            bootstrap_servers(ctx.settings, source.kafka.connection)))


def rebuild(ctx: ActionContext, job_id: str) -> None:
    """An available-now run under the action's lease (again after a crash: it resumes its new checkpoint)."""
    run_job(ctx.spark, ctx.settings, ctx.registry, job_id, Trigger(available_now=True),
            held=ctx.leases.get(job_id), action_id=ctx.action_id)


def empty_table(spark: SparkSession, path: StoragePath, where: str | None, properties: dict[str, str],
                columns: dict[str, str], partition_by: tuple[str, ...] = ()) -> None:
    """Delete every row (`where`: those rows) as a new Delta version (history kept); an append-only table is
    opened for it and closed again as the registry's `properties` say. A table the job writes alone whose columns
    are not the registry's (one dropped, renamed or retyped: what made the plan a full refresh) is emptied by an
    overwrite with the registry's schema instead, also one version."""
    from delta.tables import DeltaTable


    if not delta_store.table_exists(path):
        return
    schema = spark_schema(columns)
    with appends_opened(spark, path, properties):
        current = spark.read.format("delta").load(str(path)).schema
        if where is None and [(f.name, f.dataType) for f in current.fields] != [(f.name, f.dataType) for f in
                                                                                 schema.fields]:
            (spark.createDataFrame([], schema).write.format("delta").mode("overwrite")
             .option("overwriteSchema", "true").partitionBy(*partition_by).save(str(path)))
        else:
            DeltaTable.forPath(spark, str(path)).delete(where)
