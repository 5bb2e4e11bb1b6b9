"""`lakehouse run`, `maintain` and `stop`: the registry's jobs as streaming queries, their tables' upkeep, and
stopping them at a batch boundary."""

from __future__ import annotations

import argparse
import sys

from include.cli.command import command
from include.ops.processes import stop_job, stop_jobs
from include.records import lease
from include.registry import load_registry
from include.settings import Settings
from spark_jobs.job_process import add_run_arguments
from spark_jobs.job_process import run as run_jobs


@command("run", "run registry jobs as streaming queries (as spark-submit spark_jobs/entrypoints/run_job.py does); "
                "several jobs share one driver, one after another", add_run_arguments)
def run(settings: Settings, args: argparse.Namespace) -> int:
    return run_jobs(settings, args)


def _maintain_arguments(maintain: argparse.ArgumentParser) -> None:
    maintain.add_argument("tables", nargs="*", help="tables such as bronze/clickstream (default: every table)")


@command("maintain", "compact (OPTIMIZE) and VACUUM Delta tables, per the registry", _maintain_arguments)
def maintain(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.table_maintenance import run

    return run(settings, args.tables)


def _stop_arguments(stop: argparse.ArgumentParser) -> None:
    stop.add_argument("job", nargs="?")
    stop.add_argument("--all", action="store_true", help="every running job (they stay stopped until started)")
    stop.add_argument("--reason", default="requested from the command line")
    stop.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the job to stop")


@command("stop", "ask a running job (or --all) to stop at its next batch boundary", _stop_arguments)
def stop(settings: Settings, args: argparse.Namespace) -> int:
    registry = load_registry(settings.registry_path)
    if bool(args.all) == bool(args.job):
        raise ValueError("name one job, or --all" if not args.all else "name one job or --all, not both")
    if args.all:
        holders = {j: lease.holder(settings, j) for j in registry.order}
        running = [j for j, owner in holders.items() if owner is not None and not owner.action]  # actions end alone
        left = stop_jobs(settings, running, args.reason, wait_seconds=args.wait)
        for job_id in running:
            sys.stdout.write(f"{job_id}: {'stop requested' if job_id in left else 'stopped'}\n")
        if not running:
            sys.stdout.write("no job runs\n")
        return 1 if left and args.wait else 0
    stopped = stop_job(settings, registry.job(args.job).id, args.reason, wait_seconds=args.wait)
    sys.stdout.write(f"{args.job}: {'stopped' if stopped else 'stop requested'}\n")
    return 0 if stopped or not args.wait else 1
