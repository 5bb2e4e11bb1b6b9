"""What every checkpoint action shares: the context it runs in, its steps, the guardrails common to all modes,
and moving a checkpoint aside.

An action is a list of named :class:`Step` s built from what its checks found (:class:`Prepared`): the checks run
first, against the registry, the checkpoint and the tables; the steps only apply what they decided.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include import checkpoints
from include.checkpoints.plan import plan_job
from include.checkpoints.request import CheckpointRequest
from include.ops import lease
from include.registry import JobSpec, Registry
from include.settings import Settings

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
    spark: SparkSession | None = None  # None for a dry run

    def checkpoint(self, job_id: str) -> Path:
        return self.settings.layout.checkpoint(job_id)


@dataclass
class Prepared:
    """What the checks found for one job, as plain data: what its steps apply."""

    job: str
    archive_to: str | None = None  # where its checkpoint goes aside (None: it has none)
    data: dict[str, Any] = field(default_factory=dict)  # per mode: the versions to restore, the position, ...


@dataclass(frozen=True)
class Step:
    job: str
    name: str
    run: Callable[[], None]


class ModeAction:
    """A mode's behaviour: which jobs it touches, what it checks, how it reads to a person, its steps."""

    mode = ""
    copies_checkpoint = False  # the old checkpoint is copied aside (it stays in use) rather than moved

    def targets(self, ctx: ActionContext) -> list[str]:
        """The jobs the action touches, in dependency order."""
        jobs = [ctx.registry.job(j).id for j in ctx.request.jobs]
        return [j for j in ctx.registry.order if j in jobs]

    def check(self, ctx: ActionContext, job: JobSpec) -> dict[str, Any]:
        """Raise ActionRefused unless the mode may act on `job`; the data its steps need."""
        return {}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        raise NotImplementedError

    def job_steps(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> list[Step]:
        raise NotImplementedError

    def final_steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        """Steps after every job's own (a full refresh's rebuild)."""
        return []

    def prepare(self, ctx: ActionContext, job: JobSpec) -> Prepared:
        check_common(ctx, job)
        data = self.check(ctx, job)
        return Prepared(job.id, next_archive(ctx.settings, job.id), data)

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        steps = []
        for item in prepared:
            job = ctx.registry.job(item.job)
            steps.append(Step(job.id, "set the checkpoint aside",
                              lambda item=item: archive(ctx.settings, item, copy=self.copies_checkpoint)))
            steps += self.job_steps(ctx, job, item)
        return steps + self.final_steps(ctx, prepared)


def check_common(ctx: ActionContext, job: JobSpec) -> None:
    """The guardrails of every mode: no running writer; `reset_allowed: false` refuses destructive modes."""
    if lease.is_held(ctx.settings, job.id) and not ctx.request.dry_run:
        raise lease.LeaseHeld(f"{lease.describe_holder(job.id, lease.read_lease(ctx.settings, job.id))}; stop it "
                              f"first (lakehouse stop {job.id} --wait 120)")
    if ctx.request.destructive and not job.reset_allowed:
        raise ActionRefused(f"job {job.id!r} has reset_allowed: false in the registry: {ctx.request.mode} would "
                            "discard its checkpoint; change the registry first if this is intended")


def next_archive(settings: Settings, job_id: str) -> str | None:
    """Where the job's checkpoint goes aside next (`<job>.reset-<n>`), or None when it has no checkpoint."""
    if not settings.layout.checkpoint(job_id).exists():
        return None
    existing = settings.layout.archived_checkpoints(job_id)
    number = int(existing[-1].name.rsplit("-", 1)[1]) + 1 if existing else 1
    return str(settings.layout.archived_checkpoint(job_id, number))


def archive(settings: Settings, prepared: Prepared, copy: bool) -> None:
    """Move (or copy) the job's checkpoint to `prepared.archive_to`."""
    if prepared.archive_to is None:
        return
    checkpoint, target = settings.layout.checkpoint(prepared.job), Path(prepared.archive_to)
    if copy:
        shutil.copytree(checkpoint, target)
    else:
        checkpoint.rename(target)
    log.info("job=%s: checkpoint %s %s to %s", prepared.job, checkpoint, "copied" if copy else "moved", target)


def prune(settings: Settings, job_id: str, keep: int) -> None:
    """Remove the job's oldest archived checkpoints beyond the `keep` most recent."""
    for old in settings.layout.archived_checkpoints(job_id)[:-keep]:
        shutil.rmtree(old)
        log.info("job=%s: removed old checkpoint %s (keeping the %d most recent)", job_id, old, keep)


def audit_row(ctx: ActionContext, job: JobSpec, mode: str, actor: str) -> dict:
    """The `_ops/checkpoint_audit` row of `job`, with its plan and state before the action."""
    plan = plan_job(job, ctx.registry, ctx.checkpoint(job.id))
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
