"""reset-checkpoint: keep the sink table, move the checkpoint aside, and start a new one at a position of the
job's source tables (a version, a timestamp, or the latest): what lies between the old position and the new one
is missed or read again, and the description says which."""

from __future__ import annotations

import json
from typing import Any

from include import checkpoints
from include.checkpoints.plan import write_start_position
from include.registry import JobSpec
from spark_jobs.checkpoint_actions.base import ActionContext, ActionRefused, ModeAction, Prepared, Step


class ResetCheckpoint(ModeAction):
    mode = "reset-checkpoint"

    def check(self, ctx: ActionContext, job: JobSpec) -> dict[str, Any]:
        kind, value = ctx.request.position
        if any(s.kind == "landing" for s in job.sources):
            raise ActionRefused(f"job {job.id!r} reads landing files, which have no versions to start from: use "
                                "full-refresh (it keeps no state worth keeping) or move new files in only")
        if kind == "version" and len(job.sources) > 1:
            raise ActionRefused(f"job {job.id!r} reads {len(job.sources)} tables: --from-version names a version "
                                "of one table; use --from-timestamp or --from-latest")
        return {"starting": starting_options(kind, value)}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        return f"move {ctx.checkpoint(job.id)} aside; keep {job.sink.table}; " + position_effect(ctx, job)

    def job_steps(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> list[Step]:
        return [Step(job.id, "record where the new checkpoint starts",
                     lambda: write_start_position(ctx.checkpoint(job.id), prepared.data["starting"]))]


def starting_options(kind: str, value: Any) -> dict[str, str]:
    """Delta source options of a new checkpoint starting at the position."""
    if kind == "version":
        return {"startingVersion": str(value)}
    if kind == "timestamp":
        return {"startingTimestamp": str(value)}
    return {"startingVersion": "latest"}


def position_effect(ctx: ActionContext, job: JobSpec) -> str:
    """What a reset to the requested position may miss or repeat, per source table, in plain words."""
    from include.storage import delta as delta_store

    kind, value = ctx.request.position
    checkpoint = ctx.checkpoint(job.id)
    batch = checkpoints.latest_committed_batch(checkpoint)
    offsets = [json.loads(o) for o in checkpoints.source_offsets(checkpoint, batch)] if batch is not None else []
    parts = []
    for source, offset in zip(job.sources, offsets or [{}] * len(job.sources), strict=False):
        read_to = offset.get("reservoirVersion")
        latest = delta_store.latest_version(ctx.settings.layout.table(source.name))
        done = f"the old checkpoint had read {source.name} up to version {read_to}" if read_to is not None \
            else f"the old checkpoint had not read {source.name}"
        if kind == "latest":
            effect = f"versions after {read_to if read_to is not None else -1} up to {latest} are NOT read (missed)"
        elif kind == "timestamp":
            effect = (f"it starts at the first version committed at or after {value}: versions "
                      "between the old position and that one are missed, versions before the old position read again")
        elif read_to is None or value > read_to:
            effect = f"versions {read_to if read_to is not None else 0}..{value - 1} are NOT read (missed)"
        else:
            effect = f"versions {value}..{read_to} are read again: their rows are written to {job.sink.table} again"
        parts.append(f"{done}; from now on {effect}")
    return "; ".join(parts)
