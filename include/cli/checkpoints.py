"""`lakehouse checkpoint`, `state` and `schema`: a job's checkpoint (inspect, plan, the actions that reset or
repartition it), its state store, and filling the columns a schema change added."""

from __future__ import annotations

import argparse
import json
import sys

from include import arguments
from include.checkpoints import inspect
from include.checkpoints.plan import plan_job
from include.checkpoints.request import MODES, add_arguments, from_args
from include.cli.command import command
from include.registry import load_registry
from include.settings import Settings
from include.spark_session import get_spark


def _checkpoint_arguments(checkpoint: argparse.ArgumentParser) -> None:
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    inspecting = checkpoint_sub.add_parser("inspect", help="what a job's checkpoint holds (the job may be stopped)")
    inspecting.add_argument("job")
    inspecting.add_argument("--json", action="store_true")
    inspecting.add_argument("--no-state", action="store_true", help="skip the state operators (no Spark started)")
    plan = checkpoint_sub.add_parser("plan", help="what each job's checkpoint needs after registry changes")
    plan.add_argument("jobs", nargs="*", help="jobs (default: every job)")
    plan.add_argument("--json", action="store_true")
    for name, mode in MODES.items():
        add_arguments(checkpoint_sub.add_parser(name, help=mode.help), name)


@command("checkpoint", "inspect, plan and reset / repartition job checkpoints", _checkpoint_arguments,
         reports=("plan", "inspect"))
def checkpoint(settings: Settings, args: argparse.Namespace) -> int:
    registry = load_registry(settings.registry_path)
    if args.checkpoint_command == "plan":
        plans = [plan_job(registry.job(j), registry, settings.layout.checkpoint(j), settings=settings) for j in args.jobs or registry.order]
        text = (json.dumps([p.as_dict() for p in plans], indent=2, default=str) if args.json
                else "\n".join(p.render() for p in plans))
        sys.stdout.write(text + "\n")
        return 0
    if args.checkpoint_command == "inspect":
        job = registry.job(args.job)
        operators = None
        if not args.no_state:
            from spark_jobs.state_inspect import state_operators

            operators = state_operators(get_spark(settings, app_name="lakehouse-inspect"),
                                        settings.layout.checkpoint(job.id))
        report = inspect.inspect(settings, registry, job, operators)
        sys.stdout.write((json.dumps(report, indent=2, default=str) if args.json else inspect.render(report)) + "\n")
        return 0
    from spark_jobs.checkpoint_actions import run_request

    return run_request(settings, from_args(args.checkpoint_command, args))


def _state_arguments(state: argparse.ArgumentParser) -> None:
    state.add_argument("job")
    state.add_argument("--json", action="store_true")
    state.add_argument("--changes", type=arguments.batch_range, metavar="B1:B2",
                       help="the state change feed from batch B1 to B2 (needs changelog checkpointing)")


@command("state", "what a job's state store holds, per operator (the job may be stopped)", _state_arguments,
         reports=True)
def state(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.state_inspect import StateUnavailable, inspect_state, readable_state, render

    registry = load_registry(settings.registry_path)
    try:
        readable_state(settings, registry, args.job, args.changes)  # what it refuses, refused before Spark starts
        report = inspect_state(get_spark(settings, app_name="lakehouse-state"), settings, registry, args.job,
                               args.changes)
    except StateUnavailable as exc:
        sys.stdout.write(f"{exc}\n")
        return 0
    sys.stdout.write((json.dumps(report, indent=2, default=str) if args.json else render(report)) + "\n")
    return 0


def _schema_arguments(schema: argparse.ArgumentParser) -> None:
    schema_sub = schema.add_subparsers(dest="schema_command", required=True)
    backfill = schema_sub.add_parser(
        "backfill", help="fill columns the registry added in the rows written before, from `_rescued`, in the "
                         "bronze job's table and its pass-through copies (one Delta version each; the jobs stopped)")
    backfill.add_argument("job", help="the bronze (parse_json) job, e.g. bronze_clickstream")
    backfill.add_argument("--column", action="append", dest="columns", metavar="NAME",
                          help="a column of the source's schema (repeatable; default: every one)")
    backfill.add_argument("--dry-run", action="store_true", help="count what would be filled; change nothing")


@command("schema", "schema changes: fill added columns from what bronze rescued", _schema_arguments, reports=True)
def schema(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.rescued_backfill import backfill, backfill_jobs, fill_columns, render

    registry = load_registry(settings.registry_path)
    fill_columns(backfill_jobs(registry, args.job)[0], args.columns)  # bad input fails before Spark starts
    report = backfill(get_spark(settings, app_name="lakehouse-schema-backfill"), settings, registry, args.job,
                      args.columns, dry_run=args.dry_run)
    sys.stdout.write(render(report, args.dry_run) + "\n")
    return 0
