"""repartition's steps: per job, copy the checkpoint aside, repartition the state (always from that copy) with
Spark's offline checkpoint repartition, record the new count (its rules: include/checkpoints/modes.py)."""

from __future__ import annotations

from include.checkpoints.modes import RepartitionRules
from include.checkpoints.plan import read_fingerprint, write_fingerprint
from include.registry import JobSpec
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ModeAction,
    Prepared,
    Step,
    copy_aside,
    from_the_copy,
)
from spark_jobs.query_session import configure_session


class Repartition(RepartitionRules, ModeAction):
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
    from_the_copy(ctx.settings, prepared)
    spark = ctx.spark
    configure_session(spark, job, partitions)  # the state store the job writes with
    spark.streams.active  # noqa: B018 - starts the state store coordinator, as a first query would
    spark._streamingCheckpointManager.repartition(str(ctx.checkpoint(job.id)), partitions)


def record_partitions(checkpoint, partitions: int) -> None:
    recorded = read_fingerprint(checkpoint)
    if recorded is not None:
        write_fingerprint(checkpoint, {**recorded, "shuffle_partitions": partitions})
