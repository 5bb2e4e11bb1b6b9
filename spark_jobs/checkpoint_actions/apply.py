"""Running a checkpoint request: check every target, audit, apply each step (or, in a dry run, say what would
happen), and the process entry point the spark-submit script and `lakehouse checkpoint` share."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from include.checkpoints.request import MODES, CheckpointRequest, add_arguments, from_args
from include.ops import checkpoint_audit, lease
from include.registry import Registry
from include.settings import Settings
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ModeAction,
    audit_row,
    job_state,
    prune,
)
from spark_jobs.checkpoint_actions.full_refresh import FullRefresh
from spark_jobs.checkpoint_actions.repartition import Repartition
from spark_jobs.checkpoint_actions.reset_checkpoint import ResetCheckpoint
from spark_jobs.checkpoint_actions.rollback import Rollback

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ACTIONS: dict[str, ModeAction] = {a.mode: a for a in (FullRefresh(), ResetCheckpoint(), Repartition(), Rollback())}


def apply(spark: SparkSession | None, settings: Settings, registry: Registry, request: CheckpointRequest) -> list[dict]:
    """Apply `request` to its jobs (and, with --cascade, their downstream jobs); returns the audit rows.
    A dry run needs no Spark session (`spark` None), and notes jobs that run now instead of refusing."""
    action = ACTIONS[request.mode]
    ctx = ActionContext(settings, registry, request, spark)
    jobs = action.targets(ctx)
    prepared = [action.prepare(ctx, registry.job(j)) for j in jobs]
    actor = request.actor or checkpoint_audit.default_actor()
    rows = [audit_row(ctx, registry.job(j), request.mode, actor) for j in jobs]
    for row, item in zip(rows, prepared, strict=True):
        row["detail"] = action.describe(ctx, registry.job(item.job), item)
    if request.dry_run:
        for row in rows:
            running = " (it runs now: it must be stopped first)" if lease.is_held(settings, row["job"]) else ""
            row.update(outcome="dry-run", detail=f"would {row['detail']}{running}")
        checkpoint_audit.record(settings, rows)
        return rows
    try:
        for step in action.steps(ctx, prepared):
            log.info("job=%s: %s: %s", step.job, request.mode, step.name)
            step.run()
        for row, item in zip(rows, prepared, strict=True):
            row.update(outcome="done", archived_to=item.archive_to, **job_state(settings, registry.job(row["job"]),
                                                                                "after"))
    except Exception as exc:
        for row in rows:
            if row["outcome"] != "done":
                row.update(outcome="failed", detail=f"{row['detail']}; failed: {type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        checkpoint_audit.record(settings, [r for r in rows if r["outcome"]])
        for job_id in jobs:
            prune(settings, job_id, request.keep)
    return rows


def run_request(settings: Settings, request: CheckpointRequest) -> int:
    """Apply (or verify) `request` in this process; prints one line per job."""
    from include.registry import load_registry
    from include.spark_session import get_spark
    from spark_jobs.checkpoint_actions.verify import verify

    registry = load_registry(settings.registry_path)
    for job_id in request.jobs:
        registry.job(job_id)  # an unknown job: KeyError naming the known ones, before Spark starts
    if request.mode == "verify":
        run = not request.get("no_run")
        spark = get_spark(settings, app_name="lakehouse-checkpoint") if run else None
        rows = verify(spark, settings, registry, list(request.jobs), run=run, actor=request.actor)
    else:
        spark = None if request.dry_run else get_spark(settings, app_name="lakehouse-checkpoint")
        rows = apply(spark, settings, registry, request)
    for row in rows:
        sys.stdout.write(f"{row['job']}: {request.mode} {row['outcome']}: {row['detail']}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`spark-submit spark_jobs/entrypoints/checkpoint_action.py <mode> <job>... [options]` (the checkpoint_reset
    DAG)."""
    from include.logging_setup import configure_logging
    from include.ops.launch import report_failure
    from include.settings import load_settings

    parser = argparse.ArgumentParser(prog="spark_jobs/entrypoints/checkpoint_action.py", description=main.__doc__)
    modes = parser.add_subparsers(dest="checkpoint_command", required=True)
    for name, mode in MODES.items():
        add_arguments(modes.add_parser(name, help=mode.help), name)
    args = parser.parse_args(argv)
    command = f"lakehouse checkpoint {args.checkpoint_command}"
    try:
        request = from_args(args.checkpoint_command, args)
        settings = load_settings()
        settings.require_writable_root()
    except ValueError as exc:
        return report_failure(command, exc)
    configure_logging(settings)
    try:
        return run_request(settings, request)
    except Exception as exc:
        return report_failure(command, exc)
