"""What every checkpoint action's steps share: the step, setting a checkpoint aside (moved or copied) and back,
pruning old copies, and the audit rows.

An action is a list of named :class:`Step` s built from what its checks found (:class:`Prepared`, plain data kept
in the action's journal): the checks run first (include/checkpoints/actions.py: no Spark), against the registry,
the checkpoint and the tables; the steps only apply what they decided. A step may be cut short by a crash and run again from its start (`lakehouse
checkpoint resume-action`), so each is written to give, run twice, what it gives run once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from include import checkpoints
from include.checkpoints.actions import ActionContext, ActionRefused, ModeRules, Prepared
from include.checkpoints.ownership import written_versions
from include.checkpoints.plan import plan_job
from include.registry import JobSpec
from include.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Step:
    job: str
    name: str
    run: Callable[[], None]


class ModeAction(ModeRules):
    """A mode's rules (include/checkpoints/actions.py) and its steps, which apply what the rules decided."""

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        raise NotImplementedError


def move_aside(settings: Settings, prepared: Prepared) -> None:
    """Move the job's checkpoint to `prepared.archive_to` (done already when it is there and the job has none).

    Locally a rename; on S3 a copy, a marker, then a delete (include/storage/paths.py): a crash in between leaves
    both, and the step run again finishes the move (the marker says the copy is whole)."""
    checkpoint = settings.layout.checkpoint(prepared.job)
    if prepared.archive_to is None or not checkpoint.exists():
        return
    target = settings.path(prepared.archive_to)
    if target.exists() and checkpoint.is_local:
        if not (checkpoint / "offsets").is_dir():
            return  # moved already: what is there is the new checkpoint's start (a step run again after a crash)
        raise ActionRefused(f"job {prepared.job!r}: both {checkpoint} and {target} exist; the action cannot tell "
                            "which one is the job's: move one of them aside by hand")
    checkpoint.move_to(target)  # on S3, after a crash: what is left of the source is the old checkpoint's
    log.info("job=%s: checkpoint %s moved to %s", prepared.job, checkpoint, target)


def copy_aside(settings: Settings, prepared: Prepared) -> None:
    """Copy the job's checkpoint to `prepared.archive_to` (again, whole, after a copy a crash cut short)."""
    if prepared.archive_to is None:
        return
    target = settings.path(prepared.archive_to)
    target.rmtree()
    settings.layout.checkpoint(prepared.job).copytree(target)
    log.info("job=%s: checkpoint copied to %s", prepared.job, target)


def from_the_copy(settings: Settings, prepared: Prepared) -> None:
    """Put back the checkpoint as it was before the action (its copy aside): a step that rewrites the checkpoint
    in place starts from there, also when a crash cut its first try short."""
    checkpoint = settings.layout.checkpoint(prepared.job)
    checkpoint.rmtree()
    settings.path(prepared.archive_to).copytree(checkpoint)


def prune(settings: Settings, job_id: str, keep: int) -> None:
    """Remove the job's oldest archived checkpoints beyond the `keep` most recent."""
    for old in settings.layout.archived_checkpoints(job_id)[:-keep]:
        old.rmtree()
        log.info("job=%s: removed old checkpoint %s (keeping the %d most recent)", job_id, old, keep)


def audit_row(ctx: ActionContext, job: JobSpec, mode: str, actor: str) -> dict:
    """The `_ops/checkpoint_audit` row of `job`, with its plan and state before the action."""
    plan = plan_job(job, ctx.registry, ctx.checkpoint(job.id), settings=ctx.settings)
    return {"at": datetime.now(UTC), "actor": actor, "job": job.id, "mode": mode,
            "dry_run": ctx.request.dry_run, "outcome": "", "detail": "",
            "plan": json.dumps(plan.as_dict(), default=str), "archived_to": None,
            **job_state(ctx.settings, job, "before"), "batch_after": None, "versions_after": None}


def job_state(settings: Settings, job: JobSpec, when: str) -> dict:
    """`batch_<when>` and `versions_<when>` (JSON {table: Delta version}) of the job's checkpoint and tables."""
    versions = written_versions(settings, job)
    return {f"batch_{when}": checkpoints.latest_committed_batch(settings.layout.checkpoint(job.id)),
            f"versions_{when}": json.dumps(versions)}
