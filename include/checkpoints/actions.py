"""What every checkpoint action decides before it touches anything, without Spark: the context it runs in, what its
checks found (:class:`Prepared`, plain data kept in the action's journal), the rules of a mode (:class:`ModeRules`:
its targets, checks, description and undo), and where a checkpoint goes aside. The Airflow layer's approval preview
(:mod:`include.checkpoints.preview`) reads these; spark_jobs.checkpoint_actions adds each mode's steps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from include.checkpoints.request import CheckpointRequest
from include.records import lease
from include.registry import JobSpec, Registry
from include.settings import Settings
from include.spark_session import get_spark
from include.storage.paths import StoragePath

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


class ModeRules:
    """What a mode decides before anything is touched: which jobs it touches, what it checks, how it reads to a person
    and how to undo it (its steps, which apply it, are spark_jobs.checkpoint_actions')."""

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
