"""The entry point of a job process: `spark-submit spark_jobs/entrypoints/run_job.py <job>... [--trigger ...]`, which
both DAGs launch (include.ops.launch), and `lakehouse run <job>...`, the same thing in this process. Several jobs
share one driver, one after another (the backfill DAG's `run_jobs`: one JVM start instead of one per job).

Exit codes: see :class:`include.failures.ExitCode` (0 done, 1 failed, 2 bad input, 75 refused).
SIGTERM and SIGINT, to this process or to its whole process group, stop the query at its next batch
boundary (exit 0); the driver JVM ignores them.
"""

from __future__ import annotations

import argparse
import logging
import sys

from include import arguments
from include.checkpoints.preflight import preflight
from include.failures import ExitCode, classify_failure, report_failure
from include.logging_setup import configure_logging
from include.records import run_outcomes
from include.registry import load_registry
from include.settings import Settings, load_settings
from include.storage.paths import storage_path
from spark_jobs import batch_hooks
from spark_jobs.driver import SharedDriver
from spark_jobs.group_driver import run_group

log = logging.getLogger("lakehouse")


def add_run_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("jobs", nargs="*", metavar="job",
                        help="one job, or several to run one after another in one driver (dependency order, "
                             "available-now triggers only)")
    parser.add_argument("--group", default=None,
                        help="run a group of the registry's live jobs in one driver: with a live trigger "
                             "a streaming query per job, side by side; available-now, one after another")
    parser.add_argument("--trigger", type=arguments.trigger, default=None,
                        help="'available-now', 'processing-time=10 seconds' or 'on-upstream-commit' (default: the job's "
                             "backfill trigger)")
    parser.add_argument("--shuffle-partitions", type=arguments.partition_count, default=None)
    parser.add_argument("--outcomes", default=None,
                        help="write how each job ended to this directory (a path or a URI under the lakehouse's "
                             "storage), one JSON file per job "
                             "(the backfill DAG's run_jobs task)")
    return parser


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run registry jobs in this process until each drains (available-now) or is stopped.

    One job: its failure is raised (one line and its exit code, from `main`). Several jobs share one driver and run
    one after another in dependency order: a job that fails or is refused is recorded and the run goes on with the
    jobs that do not read its tables (its readers are `not_run`: run now, they would miss what it adds when it runs
    later); the exit code is the first failure's (75 when some were only refused)."""
    registry = load_registry(settings.registry_path)
    if args.outcomes:
        args.outcomes = storage_path(args.outcomes, settings.s3)
    if settings.batch_hooks:
        batch_hooks.install_named(settings.batch_hooks)
    if bool(args.group) == bool(args.jobs):
        raise ValueError("name jobs, or one group with --group, not both" if args.group else "name a job (or --group)")
    if args.group:
        members = registry.group_members(args.group)
        trigger = args.trigger or registry.job(members[0]).triggers["live"]
        if not trigger.available_now:
            if args.shuffle_partitions is not None:
                raise ValueError("--shuffle-partitions applies to one job: run the jobs one at a time")
            return run_group(settings, registry, args.group, None if args.trigger is None else trigger,
                             SharedDriver(settings, registry.resources(args.group).jit(live=True), live=True))
        args.jobs = members
    jobs = [registry.job(j) for j in dict.fromkeys(args.jobs)]
    if len(jobs) > 1:
        jobs = [registry.job(j) for j in registry.order if j in {job.id for job in jobs}]
        refuse_a_shared_driver(jobs, args)
    live = args.trigger is not None and not args.trigger.available_now
    driver = SharedDriver(settings, registry.resources(jobs[0].id).jit(live), live=live)
    if args.outcomes:
        run_outcomes.clear(args.outcomes)
    outcomes: dict[str, run_outcomes.Outcome] = {}
    codes: list[int] = []
    for job in jobs:
        # A reader of a job that did not run here waits for it: run after it (alone, by its own task) it sees its input
        blocked = [u for u in registry.upstream(job.id)
                   if u in outcomes and outcomes[u].status in ("failed", "refused", "not_run")]
        if driver.stop.is_set() or blocked:
            why = f"upstream {', '.join(blocked)} did not run in this run" if blocked else "the run was stopped first"
            outcome = run_outcomes.Outcome(job.id, "not_run", why)
        else:
            try:
                outcome = run_one(settings, registry, job, args, driver)
            except Exception as exc:
                if len(jobs) == 1 and not args.outcomes:
                    raise
                code, line = classify_failure(exc) or (ExitCode.FAILED, str(exc).splitlines()[0][:500])
                if code != ExitCode.REFUSED:
                    log.error("job=%s failed", job.id, exc_info=exc)
                sys.stderr.write(f"lakehouse run: {job.id}: {line}\n")
                codes.append(code)
                outcome = run_outcomes.Outcome(job.id, "refused" if code == ExitCode.REFUSED else "failed", line)
        outcomes[job.id] = outcome
        if args.outcomes:
            run_outcomes.record(args.outcomes, outcome)
    if len(jobs) > 1:
        log.info("jobs run in this driver: %s", ", ".join(f"{o.job} {o.status}" for o in outcomes.values()))
    failures = [c for c in codes if c != ExitCode.REFUSED]
    return failures[0] if failures else ExitCode.REFUSED if codes else ExitCode.OK


def refuse_a_shared_driver(jobs: list, args: argparse.Namespace) -> None:
    """Several jobs share a driver one after another: each must end by itself (available-now)."""
    if args.shuffle_partitions is not None:
        raise ValueError("--shuffle-partitions applies to one job: run the jobs one at a time")
    live = [j.id for j in jobs if not (args.trigger or j.triggers["backfill"]).available_now]
    if live:
        raise ValueError(f"several jobs run one after another in one driver, so each must drain and stop "
                         f"(available-now): {', '.join(live)} would not; run it on its own")


def run_one(settings: Settings, registry, job, args: argparse.Namespace, driver: SharedDriver) -> run_outcomes.Outcome:
    """One job in the shared driver, refused before the driver starts when it cannot run (the preflight)."""
    from spark_jobs.streaming_query import run_job

    trigger = args.trigger or job.triggers["backfill"]
    preflight(settings, registry, job, shuffle_partitions=args.shuffle_partitions)
    names = args.jobs if len(args.jobs) == 1 else ["jobs"]
    spark = driver.session(f"lakehouse-{'-'.join(names)}")
    result = run_job(spark, settings, registry, job.id, trigger, shuffle_partitions=args.shuffle_partitions,
                     stop_requested=driver.stop)  # its summary line ends its part of the log
    return run_outcomes.Outcome(job.id, result.status, summary=result.summary)


def main(argv: list[str] | None = None) -> int:
    parser = add_run_arguments(argparse.ArgumentParser(prog="spark_jobs/entrypoints/run_job.py", description=__doc__))
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        settings.require_writable_root()
    except ValueError as exc:
        sys.stderr.write(f"lakehouse run: {exc}\n")
        return ExitCode.BAD_INPUT
    configure_logging(settings)
    try:
        return run(settings, args)
    except Exception as exc:
        return report_failure("lakehouse run", exc)
