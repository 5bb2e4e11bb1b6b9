"""May this job start? The one check every starter runs, before anything is paid for: `lakehouse run` and a job
process before their JVM, a group's driver before each query, a job's run before its query starts (and again after a
restart), the live supervisor before it starts or restarts one. A refusal names its cause and what fixes it.

:func:`preflight` raises the refusal; :func:`check_start` returns it, typed (:class:`Refusal`), for a caller that
decides what to do with it (the supervisor: include/ops/supervisor.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from include import checkpoints
from include.cdc.database import check_source
from include.checkpoints.journal import ActionPending, refuse_if_pending
from include.checkpoints.plan import PENDING, Plan, PlanRequired, plan_job, read_start_position
from include.checkpoints.validate import CheckpointDamaged, check_job_files
from include.kafka.broker import BrokerError
from include.kafka.connection import unreachable_broker
from include.records import lease
from include.registry import JobSpec, Registry
from include.settings import Settings


class CheckpointConflict(ValueError):
    """The requested settings, or the job's tables, contradict what its checkpoint has fixed."""


class SourceUncapturable(ValueError):
    """The database of one of the job's `cdc:` sources cannot capture its table as the registry declares it."""


class BrokerDown(BrokerError):
    """The broker of one of the job's Kafka sources does not answer (`down` says which)."""

    def __init__(self, job_id: str, down: str):
        self.down = down
        super().__init__(f"{down}: job {job_id!r} not started (its checkpoint keeps its place)")


@dataclass(frozen=True)
class Startable:
    """A job that may start: as it runs (its shuffle partitions resolved against its checkpoint), and its plan
    (`resume`, or `evolve`, which its start applies)."""

    job: JobSpec
    plan: Plan

    @property
    def partitions(self) -> int:
        return self.job.state_store.shuffle_partitions


# What refuses a start, by kind: another writer, an unfinished checkpoint action, damaged checkpoint files, a
# checkpoint the job cannot resume as it is, a plan other than resume or evolve, a Kafka source's broker down, a CDC
# source's database that cannot capture its table as declared.
KINDS: tuple[tuple[type[Exception], str], ...] = (
    (lease.LeaseHeld, "held"), (ActionPending, "action"), (CheckpointDamaged, "damaged"),
    (CheckpointConflict, "checkpoint"), (PlanRequired, "plan"), (BrokerDown, "broker"),
    (SourceUncapturable, "source"),
)


@dataclass(frozen=True)
class Refusal:
    kind: str  # a name of KINDS
    error: Exception  # what a starter raises

    @property
    def reason(self) -> str:
        return str(self.error)

    @property
    def plan(self) -> Plan | None:
        return self.error.plan if isinstance(self.error, PlanRequired) else None

    @property
    def pending_action(self) -> bool:
        return self.kind == "action" or (self.plan is not None and self.plan.mode == PENDING)


def preflight(settings: Settings, registry: Registry, job: JobSpec, *, shuffle_partitions: int | None = None,
              inside_action: str | None = None, lease_held: bool = False) -> Startable:
    """Raise the first reason the job may not start now, else what it starts as. `lease_held`: the caller holds the
    job's lease (a run); `inside_action`: the checkpoint action that runs it, whose own journal does not refuse it."""
    if not lease_held:
        lease.refuse_if_held(settings, job.id)
    refuse_if_pending(settings, job.id, inside=inside_action)
    check_job_files(settings, job)
    refuse_python_source_checkpoint(settings, job)
    refuse_lost_checkpoint(settings, registry, job)
    partitions = resolve_shuffle_partitions(settings, job, shuffle_partitions)
    job = replace(job, state_store=replace(job.state_store, shuffle_partitions=partitions))
    plan = plan_job(job, registry, settings.layout.checkpoint(job.id), inside_action=inside_action, settings=settings)
    if not plan.startable:
        raise PlanRequired(plan)
    down = unreachable_broker(settings, job)
    if down:
        raise BrokerDown(job.id, down)
    for source in job.sources:
        problem = check_source(settings, source) if source.cdc is not None else None
        if problem:
            raise SourceUncapturable(f"job {job.id!r}: {problem}")
    return Startable(job, plan)


def check_start(settings: Settings, registry: Registry, job: JobSpec, **options) -> Startable | Refusal:
    """:func:`preflight`, its refusal returned instead of raised."""
    try:
        return preflight(settings, registry, job, **options)
    except tuple(kind for kind, _ in KINDS) as exc:
        return Refusal(next(name for kind, name in KINDS if isinstance(exc, kind)), exc)


def resolve_shuffle_partitions(settings: Settings, job: JobSpec, override: int | None) -> int:
    """The shuffle partition count for this run; an explicit override may not contradict the checkpoint (a changed
    registry value is the checkpoint plan's business)."""
    checkpoint = settings.layout.checkpoint(job.id)
    fixed = checkpoints.shuffle_partitions(checkpoint)
    if override is not None and fixed is not None and fixed != override:
        raise CheckpointConflict(
            f"job {job.id!r}: checkpoint {checkpoint} has its state in {fixed} shuffle partitions; {override} cannot "
            f"take effect without repartitioning the checkpoint (lakehouse checkpoint repartition {job.id} "
            f"--partitions {override})"
        )
    return override or job.state_store.shuffle_partitions


def refuse_python_source_checkpoint(settings: Settings, job: JobSpec) -> None:
    """A checkpoint whose Delta source offsets were written by the project's former Python source (offsets
    ``{"version": n}``) cannot be resumed by Delta's own streaming source: refuse, never silently start from zero
    (which would duplicate every row in the sink)."""
    checkpoint = settings.layout.checkpoint(job.id)
    if not any(s.kind == "delta" for s in job.sources) or not checkpoints.written_by_python_delta_source(checkpoint):
        return
    raise CheckpointConflict(
        f"job {job.id!r}: checkpoint {checkpoint} was written by the former Python Delta source (before native "
        f"Delta) and cannot be resumed by Delta's streaming source; rebuild the job: move {checkpoint} and its "
        f"sink table {settings.layout.table(job.sink.table)} aside, then run it (and every job downstream of it, "
        "the same way) again"
    )


def refuse_lost_checkpoint(settings: Settings, registry: Registry, job: JobSpec) -> None:
    """A job without a checkpoint whose tables already hold rows of its own would start from zero and write them
    all again: refuse, and name the checkpoint commands that fit. A new checkpoint made by `lakehouse checkpoint`
    (full-refresh empties the tables; reset-checkpoint records where to start) passes."""
    checkpoint = settings.layout.checkpoint(job.id)
    if checkpoints.latest_offsets_batch(checkpoint) is not None or read_start_position(checkpoint) is not None:
        return
    # reads the tables (deltalake): kept out of every command's start
    from include.checkpoints.ownership import count_own_rows

    filled = [t for t in job.tables_written() if count_own_rows(settings, registry, job, t)]
    if not filled:
        return
    archived = settings.layout.archived_checkpoints(job.id)
    fixes = [f"rebuild it from all its input with `lakehouse checkpoint full-refresh {job.id}`"]
    if all(s.kind != "landing" for s in job.sources):
        fixes.append(f"keep the table and go on from new data with `lakehouse checkpoint reset-checkpoint {job.id} "
                     "--from-latest`")
    fixes.append(f"or put the checkpoint back at {checkpoint}" + (f" (archived copies: {archived[-1]})"
                                                                  if archived else ""))
    raise CheckpointConflict(
        f"job {job.id!r}: no checkpoint at {checkpoint}, but {', '.join(filled)} already hold rows of an earlier "
        f"run; starting from zero would write them again. {'; '.join(fixes)}"
    )
