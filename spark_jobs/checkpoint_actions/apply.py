"""Running a checkpoint request: take the targets' leases, check every target, write the action's journal, audit,
and apply each step, recording it; or, in a dry run, say what would happen. `resume-action` runs the steps an
interrupted action left. Also the process entry point the spark-submit script and `lakehouse checkpoint` share."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from include.checkpoints import journal as journals
from include.checkpoints.request import MODES, CheckpointRequest, add_arguments, from_args
from include.failures import report_failure
from include.logging_setup import configure_logging
from include.records import checkpoint_audit, lease
from include.registry import Registry, load_registry
from include.settings import Settings, load_settings
from include.spark_session import get_spark
from spark_jobs import batch_hooks
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ActionRefused,
    ModeAction,
    Prepared,
    audit_row,
    job_state,
    prune,
)
from spark_jobs.checkpoint_actions.full_refresh import FullRefresh
from spark_jobs.checkpoint_actions.repartition import Repartition
from spark_jobs.checkpoint_actions.reset_checkpoint import ResetCheckpoint
from spark_jobs.checkpoint_actions.rollback import Rollback
from spark_jobs.checkpoint_actions.verify import verify

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ACTIONS: dict[str, ModeAction] = {a.mode: a for a in (FullRefresh(), ResetCheckpoint(), Repartition(), Rollback())}


def apply(spark: SparkSession | None, settings: Settings, registry: Registry, request: CheckpointRequest) -> list[dict]:
    """Apply `request` to its jobs (and, with --cascade, their downstream jobs); returns the audit rows.
    A dry run needs no Spark session (`spark` None), and notes jobs that run now instead of refusing; otherwise
    Spark starts when a step needs it (`spark` None)."""
    if request.mode == "resume-action":
        return resume(spark, settings, registry, request)
    action = ACTIONS[request.mode]
    ctx = ActionContext(settings, registry, request, spark)
    jobs = action.targets(ctx)
    for job_id in jobs:
        journals.refuse_if_pending(settings, job_id)
    actor = request.actor or checkpoint_audit.default_actor()
    if request.dry_run:
        prepared = [action.prepare(ctx, registry.job(j)) for j in jobs]
        rows = _described_rows(ctx, action, prepared, actor)
        for row in rows:
            running = " (it runs now: it must be stopped first)" if lease.is_held(settings, row["job"]) else ""
            row.update(outcome="dry-run", detail=f"would {row['detail']}{running}")
        checkpoint_audit.record(settings, rows)
        return rows
    with lease.hold(settings, jobs, action=f"checkpoint {request.mode} by {actor}") as held:
        ctx.leases = held
        prepared = [action.prepare(ctx, registry.job(j)) for j in jobs]
        rows = _described_rows(ctx, action, prepared, actor)
        steps = action.steps(ctx, prepared)
        journal = journals.start(settings, _request_record(request, actor), jobs, [p.as_dict() for p in prepared],
                                 [(s.job, s.name) for s in steps])
        return _run(ctx, action, journal, prepared, rows, "started")


def resume(spark: SparkSession | None, settings: Settings, registry: Registry, request: CheckpointRequest) -> list[dict]:
    """Run the steps the unfinished action on the request's job left (a dry run: say which)."""
    [job_id] = request.jobs
    registry.job(job_id)  # an unknown job: KeyError naming the known ones
    journal = journals.pending_for(settings, job_id)
    if journal is None:
        raise ActionRefused(f"job {job_id!r} has no unfinished checkpoint action: nothing to resume "
                            f"(`lakehouse checkpoint plan {job_id}` says what its checkpoint needs)")
    original = CheckpointRequest(**{**journal.request, "dry_run": False})
    action = ACTIONS[original.mode]
    actor = request.actor or checkpoint_audit.default_actor()
    ctx = ActionContext(settings, registry, original, spark, action_id=journal.id)
    prepared = [Prepared(**p) for p in journal.prepared]
    rows = [audit_row(ctx, registry.job(j), original.mode, actor) for j in journal.targets]
    if request.dry_run:
        for row in rows:
            row.update(outcome="dry-run", detail=f"would finish: {journal.describe()}")
        checkpoint_audit.record(settings, rows)
        return rows
    with lease.hold(settings, journal.targets, action=f"checkpoint {original.mode} resumed by {actor}") as held:
        ctx.leases = held
        steps = action.steps(ctx, prepared)
        if [(s.job, s.name) for s in steps] != [(s["job"], s["name"]) for s in journal.steps]:
            raise ActionRefused(f"the registry changed since {journal.describe()}: its steps are now different; "
                                f"restore the registry the action started with ({journal.started_at}) to finish it")
        for row in rows:
            row["detail"] = f"resumed by {actor}: {journal.progress()}"
        return _run(ctx, action, journal, prepared, rows, "resumed")


def _run(ctx: ActionContext, action: ModeAction, journal: journals.Journal, prepared: list[Prepared],
         rows: list[dict], start_outcome: str) -> list[dict]:
    """Run the journal's steps not done yet, each recorded when done; audit the start, each step, the end."""
    settings, registry = ctx.settings, ctx.registry
    checkpoint_audit.record(settings, [{**row, "outcome": start_outcome, "at": datetime.now(UTC)} for row in rows])
    by_job = {row["job"]: row for row in rows}
    ctx.action_id = journal.id
    try:
        for index, step in enumerate(action.steps(ctx, prepared)):
            if journal.steps[index]["done"]:
                continue
            log.info("job=%s: %s: %s", step.job, action.mode, step.name)
            batch_hooks.fire(step.job, "before_step", index)
            step.run()
            batch_hooks.fire(step.job, "after_step", index)
            journal.mark_done(index)
            checkpoint_audit.record(settings, [{**by_job[step.job], "at": datetime.now(UTC), "outcome": "step done",
                                                "detail": step.name}])
        for row, item in zip(rows, prepared, strict=True):
            row.update(at=datetime.now(UTC), outcome="done", archived_to=item.archive_to,
                       **job_state(settings, registry.job(row["job"]), "after"))
    except Exception as exc:
        for row in rows:
            detail = (f"{row['detail']}; failed: {type(exc).__name__}: {exc}; the action's journal keeps what is "
                      f"done: `lakehouse checkpoint resume-action {journal.targets[0]}` finishes it")
            row.update(at=datetime.now(UTC), outcome="failed", detail=detail[:2000])
        raise
    finally:
        checkpoint_audit.record(settings, [r for r in rows if r["outcome"] in ("done", "failed")])
    journal.remove()
    for job_id in journal.targets:
        prune(settings, job_id, ctx.request.keep)
    return rows


def _described_rows(ctx: ActionContext, action: ModeAction, prepared: list[Prepared], actor: str) -> list[dict]:
    rows = []
    for item in prepared:
        job = ctx.registry.job(item.job)
        rows.append({**audit_row(ctx, job, ctx.request.mode, actor), "detail": action.describe(ctx, job, item)})
    return rows


def _request_record(request: CheckpointRequest, actor: str) -> dict:
    return {"mode": request.mode, "jobs": list(request.jobs), "keep": request.keep, "actor": actor,
            "options": dict(request.options)}


def run_request(settings: Settings, request: CheckpointRequest, spark: SparkSession | None = None) -> int:
    """Apply (or verify) `request` in this process; prints one line per job."""
    registry = load_registry(settings.registry_path)
    for job_id in request.jobs:
        registry.job(job_id)  # an unknown job: KeyError naming the known ones, before Spark starts
    if settings.batch_hooks:
        batch_hooks.install_named(settings.batch_hooks)
    if request.mode == "verify":
        run = not request.get("no_run")
        if run and spark is None:
            spark = get_spark(settings, app_name="lakehouse-checkpoint")
        rows = verify(spark, settings, registry, list(request.jobs), run=run, actor=request.actor)
    else:
        rows = apply(spark, settings, registry, request)
    for row in rows:
        sys.stdout.write(f"{row['job']}: {request.mode} {row['outcome']}: {row['detail']}\n")
    return 0


def parse_request(argv: list[str] | None) -> CheckpointRequest:
    """The request of `<mode> <job>... [options]` (the spark-submit entry point's arguments)."""
    parser = argparse.ArgumentParser(prog="spark_jobs/entrypoints/checkpoint_action.py",
                                     description="a checkpoint action: <mode> <job>... [options]")
    modes = parser.add_subparsers(dest="checkpoint_command", required=True)
    for name, mode in MODES.items():
        add_arguments(modes.add_parser(name, help=mode.help), name)
    args = parser.parse_args(argv)
    return from_args(args.checkpoint_command, args)


def main(argv: list[str] | None = None) -> int:
    """`spark-submit spark_jobs/entrypoints/checkpoint_action.py <mode> <job>... [options]` (the checkpoint_reset
    DAG)."""
    command = f"lakehouse checkpoint {(argv or sys.argv[1:] or ['?'])[0]}"
    try:
        request = parse_request(argv)
        settings = load_settings()
        settings.require_writable_root()
    except ValueError as exc:
        return report_failure(command, exc)
    configure_logging(settings)
    try:
        return run_request(settings, request)
    except Exception as exc:
        return report_failure(command, exc)
