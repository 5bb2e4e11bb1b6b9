"""full-refresh: empty the job's sink tables (a new Delta version each; history kept), start a new checkpoint,
and rebuild from all source data, upstream first. Jobs downstream of a target read what it rebuilds, so they
must be rebuilt too (`--cascade`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from include.checkpoints.plan import downstream_jobs
from include.registry import JobSpec, Trigger
from include.storage.ownership import own_rows_condition
from include.storage.paths import StoragePath
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ActionRefused,
    ModeAction,
    Prepared,
    Step,
    move_aside,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class FullRefresh(ModeAction):
    mode = "full-refresh"

    def targets(self, ctx: ActionContext) -> list[str]:
        jobs = [ctx.registry.job(j).id for j in ctx.request.jobs]
        downstream = [d for j in jobs for d in downstream_jobs(ctx.registry, j) if d not in jobs]
        if downstream and not ctx.request.get("cascade"):
            raise ActionRefused(
                f"full-refresh of {', '.join(jobs)} rebuilds tables that {', '.join(dict.fromkeys(downstream))} "
                "read: their state and tables would no longer match; add --cascade to rebuild them too")
        return [j for j in ctx.registry.order if j in jobs + downstream]

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        emptied = ", ".join(t if (condition := own_rows_condition(ctx.registry, job, t)) is None
                            else f"its rows of {t} ({condition})" for t in job.tables_written())
        return (f"move {ctx.checkpoint(job.id)} aside, empty {emptied} (a new Delta version each; the "
                "history is kept) and rebuild them from all source data (available-now)")

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        resets = [Step(item.job, "move the checkpoint aside and empty " + ", ".join(
            ctx.registry.job(item.job).tables_written()), lambda item=item: reset(ctx, item)) for item in prepared]
        return resets + [Step(item.job, "rebuild from all source data (available-now)",
                              lambda job_id=item.job: rebuild(ctx, job_id)) for item in prepared]


def reset(ctx: ActionContext, prepared: Prepared) -> None:
    job = ctx.registry.job(prepared.job)
    move_aside(ctx.settings, prepared)
    for table in job.tables_written():
        empty_table(ctx.spark, ctx.settings.layout.table(table), own_rows_condition(ctx.registry, job, table),
                    job.sink.properties)


def rebuild(ctx: ActionContext, job_id: str) -> None:
    """An available-now run under the action's lease (again after a crash: it resumes its new checkpoint)."""
    from spark_jobs.streaming_query import run_job

    run_job(ctx.spark, ctx.settings, ctx.registry, job_id, Trigger(available_now=True),
            held=ctx.leases.get(job_id), action_id=ctx.action_id)


def empty_table(spark: SparkSession, path: StoragePath, where: str | None, properties: dict[str, str]) -> None:
    """Delete every row (`where`: those rows) as a new Delta version (history kept); an append-only table is
    opened for it and closed again as the registry's `properties` say."""
    from include.storage import delta as delta_store
    from spark_jobs.delta_tables import appends_opened

    if not delta_store.table_exists(path):
        return
    with appends_opened(spark, path, properties):
        spark.sql(f"DELETE FROM delta.`{path}`" + (f" WHERE {where}" if where else ""))
