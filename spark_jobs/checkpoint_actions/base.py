"""What every checkpoint action shares: the context it runs in, its steps, the guardrails common to all modes,
and setting a checkpoint aside.

An action is a list of named :class:`Step` s built from what its checks found (:class:`Prepared`, plain data kept
in the action's journal): the checks run first, against the registry, the checkpoint and the tables; the steps
only apply what they decided. A step may be cut short by a crash and run again from its start (`lakehouse
checkpoint resume-action`), so each is written to give, run twice, what it gives run once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from include import checkpoints
from include.checkpoints.plan import plan_job
from include.checkpoints.request import CheckpointRequest
from include.ops import lease
from include.registry import JobSpec, Registry
from include.settings import Settings
from include.storage.paths import StoragePath

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class ActionRefused(ValueError):
    """The action would leave something inconsistent, or the registry forbids it."""


@dataclass
class ActionContext:
    settings: Settings
    registry: Registry
    request: CheckpointRequest
    session: SparkSession | None = None  # started on first use (`spark`): steps on files need none
    leases: dict[str, lease.Lease] = field(default_factory=dict)  # the targets' leases, held by the action
    action_id: str | None = None  # the journal's id while the action runs

    def checkpoint(self, job_id: str) -> StoragePath:
        return self.settings.layout.checkpoint(job_id)

    @property
    def spark(self) -> SparkSession:
        if self.session is None:
            from include.spark_session import get_spark

            self.session = get_spark(self.settings, app_name="lakehouse-checkpoint")
        return self.session


@dataclass
class Prepared:
    """What the checks found for one job, as plain data: what its steps apply."""

    job: str
    archive_to: str | None = None  # where its checkpoint goes aside (None: it has none)
    data: dict[str, Any] = field(default_factory=dict)  # per mode: the versions to restore, the position, ...

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Step:
    job: str
    name: str
    run: Callable[[], None]


class ModeAction:
    """A mode's behaviour: which jobs it touches, what it checks, how it reads to a person, its steps."""

    mode = ""

    def targets(self, ctx: ActionContext) -> list[str]:
        """The jobs the action touches, in dependency order."""
        jobs = [ctx.registry.job(j).id for j in ctx.request.jobs]
        return [j for j in ctx.registry.order if j in jobs]

    def check(self, ctx: ActionContext, job: JobSpec) -> dict[str, Any]:
        """Raise ActionRefused unless the mode may act on `job`; the data its steps need."""
        return {}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        raise NotImplementedError

    def undo(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        """How a person puts `job` back as it is now, after the action (its tables' versions now, its checkpoint's
        place aside): the tables restored, then the checkpoint put back."""
        return "; ".join(filter(None, (restore_tables_text(ctx.settings, job), put_back_text(ctx, prepared))))

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        raise NotImplementedError

    def prepare(self, ctx: ActionContext, job: JobSpec) -> Prepared:
        if ctx.request.destructive and not job.reset_allowed:
            raise ActionRefused(f"job {job.id!r} has reset_allowed: false in the registry: {ctx.request.mode} "
                                "would discard its checkpoint; change the registry first if this is intended")
        return Prepared(job.id, next_archive(ctx.settings, job.id), self.check(ctx, job))


def next_archive(settings: Settings, job_id: str) -> str | None:
    """Where the job's checkpoint goes aside next (`<job>.reset-<n>`), or None when it has no checkpoint."""
    if not settings.layout.checkpoint(job_id).exists():
        return None
    existing = settings.layout.archived_checkpoints(job_id)
    number = int(existing[-1].name.rsplit("-", 1)[1]) + 1 if existing else 1
    return str(settings.layout.archived_checkpoint(job_id, number))


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


def restore_tables_text(settings: Settings, job: JobSpec) -> str:
    """`RESTORE TABLE ... TO VERSION AS OF <now>` for each of the job's tables (Delta keeps the history)."""
    from include.storage import delta as delta_store

    return "; ".join(f"RESTORE TABLE delta.`{settings.layout.table(t)}` TO VERSION AS OF "
                     f"{delta_store.latest_version(settings.layout.table(t))}" for t in job.tables_written()
                     if delta_store.table_exists(settings.layout.table(t)))


def put_back_text(ctx: ActionContext, prepared: Prepared) -> str:
    if prepared.archive_to is None:
        return "no checkpoint to put back (the job has none yet)"
    return f"replace {ctx.checkpoint(prepared.job)} with {prepared.archive_to}"


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
    from include.storage import delta as delta_store

    versions = {t: delta_store.latest_version(settings.layout.table(t)) for t in job.tables_written()
                if delta_store.table_exists(settings.layout.table(t))}
    return {f"batch_{when}": checkpoints.latest_committed_batch(settings.layout.checkpoint(job.id)),
            f"versions_{when}": json.dumps(versions)}
