"""repartition: move a stateful job's state to the registry's `state_store.shuffle_partitions` offline, with
Spark's checkpoint repartition (nothing is reprocessed). The registry is the only source of the count."""

from __future__ import annotations

from include import checkpoints
from include.checkpoints.plan import read_fingerprint, write_fingerprint
from include.registry import JobSpec
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ActionRefused,
    ModeAction,
    Prepared,
    Step,
    copy_aside,
    from_the_copy,
    put_back_text,
)


class Repartition(ModeAction):
    mode = "repartition"

    def check(self, ctx: ActionContext, job: JobSpec) -> dict:
        recorded = checkpoints.shuffle_partitions(ctx.checkpoint(job.id))
        if recorded is None:
            raise ActionRefused(f"job {job.id!r} has no checkpoint at {ctx.checkpoint(job.id)}: nothing to repartition")
        if not job.stateful:
            raise ActionRefused(f"job {job.id!r} keeps no state: its shuffle partitions need no repartition")
        wanted = job.state_store.shuffle_partitions
        if recorded == wanted:
            raise ActionRefused(f"job {job.id!r}: its checkpoint already has {wanted} partitions, the registry's "
                                "state_store.shuffle_partitions (the only source of the count): nothing to "
                                "repartition; change the registry first")
        return {"partitions": wanted}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        checkpoint = ctx.checkpoint(job.id)
        return (f"copy {checkpoint} aside and repartition its state from {checkpoints.shuffle_partitions(checkpoint)} "
                f"to {prepared.data['partitions']} partitions (the registry's state_store.shuffle_partitions; "
                "nothing is reprocessed)")

    def undo(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:  # the tables are not touched
        return (f"{put_back_text(ctx, prepared)} and set state_store.shuffle_partitions back to "
                f"{checkpoints.shuffle_partitions(ctx.checkpoint(job.id))} in the registry")

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        steps = []
        for item in prepared:
            job, partitions = ctx.registry.job(item.job), item.data["partitions"]
            steps += [Step(job.id, "copy the checkpoint aside", lambda item=item: copy_aside(ctx.settings, item)),
                      Step(job.id, f"repartition the state to {partitions} partitions",
                           lambda item=item, job=job, partitions=partitions: repartition_state(ctx, job, item,
                                                                                                partitions)),
                      Step(job.id, "record the new count in the fingerprint",
                           lambda job=job, partitions=partitions: record_partitions(ctx.checkpoint(job.id),
                                                                                    partitions))]
        return steps


def repartition_state(ctx: ActionContext, job: JobSpec, prepared: Prepared, partitions: int) -> None:
    """Spark's offline repartition, from the checkpoint as it was before the action (its copy)."""
    from spark_jobs.streaming_query import configure_session

    from_the_copy(ctx.settings, prepared)
    spark = ctx.spark
    configure_session(spark, job, partitions)  # the state store the job writes with
    spark.streams.active  # noqa: B018 - starts the state store coordinator, as a first query would
    spark._streamingCheckpointManager.repartition(str(ctx.checkpoint(job.id)), partitions)


def record_partitions(checkpoint, partitions: int) -> None:
    recorded = read_fingerprint(checkpoint)
    if recorded is not None:
        write_fingerprint(checkpoint, {**recorded, "shuffle_partitions": partitions})
