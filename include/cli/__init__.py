"""The `lakehouse` command line: each command declared once (:mod:`.command`), one module per group of commands,
the parser built and the command dispatched from their one list. The top floor: it may import every package of
include/ and spark_jobs/, and none of them imports it; pyspark, Great Expectations and Airflow only inside handlers.

- :mod:`.generate`: `generate` (and `generate_into`, which the demo and the benchmarks share).
- :mod:`.jobs`: `run`, `maintain`, `stop`.
- :mod:`.demo`: `demo`, with the servers it starts for itself.
- :mod:`.airflow`: `airflow-setup`, `airflow`, `airflow-history`.
- :mod:`.reports`: `summary`, `quality`, `health`, `metrics`, `lineage`.
- :mod:`.monitor`: `monitor`.
- :mod:`.checkpoints`: `checkpoint`, `state`, `schema`.
- :mod:`.catalog`: `catalog`, `sql`, `query`.
- :mod:`.servers`: `kafka`, `storage`, `cluster`.
- :mod:`.cdc`: `cdc`.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from include.cli import airflow, catalog, cdc, checkpoints, demo, generate, jobs, monitor, reports, servers
from include.cli.catalog import catalog_sync
from include.cli.command import Command
from include.cli.demo import broker_for_demo, catalog_for_demo, demo_through_airflow, run_demo, store_for_demo
from include.cli.generate import generate_into
from include.failures import report_failure
from include.logging_setup import configure_logging
from include.settings import load_settings

__all__ = ["COMMANDS", "Command", "broker_for_demo", "build_parser", "catalog_for_demo", "catalog_sync",
           "demo_through_airflow", "generate_into", "main", "run_demo", "store_for_demo"]

# every command, in the order `lakehouse --help` lists them
COMMANDS: tuple[Command, ...] = (
    generate.generate, jobs.run, demo.demo, airflow.airflow_setup, airflow.airflow, airflow.airflow_history,
    reports.summary, reports.quality, checkpoints.checkpoint, checkpoints.state, checkpoints.schema, jobs.maintain,
    reports.health, reports.metrics, reports.lineage, monitor.monitor, servers.kafka, cdc.cdc, catalog.catalog, catalog.sql,
    catalog.query, servers.storage, servers.cluster, jobs.stop,
)
BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}
DESCRIPTION = (f"The lakehouse's command line: {len(COMMANDS)} commands, each with its help below; "
               "`lakehouse COMMAND --help` says what a command takes (its arguments, its subcommands).")


def build_parser() -> argparse.ArgumentParser:
    """`lakehouse`'s parser: a subcommand per command of `COMMANDS`."""
    parser = argparse.ArgumentParser(prog="lakehouse", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for c in COMMANDS:
        c.add_to(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse, load the settings (and check the root, for a command that needs it), run the command; its exit code."""
    args = build_parser().parse_args(argv)
    chosen = BY_NAME[args.command]
    try:
        settings = load_settings()
        if chosen.needs_root:
            settings.require_writable_root()
    except ValueError as exc:
        sys.stderr.write(f"lakehouse: {exc}\n")
        return 2
    if chosen.prints_a_report(args) and "LAKEHOUSE_LOG_LEVEL" not in os.environ:
        settings = replace(settings, log_level="WARNING")  # the report alone, unless logs are asked for
    configure_logging(settings)
    try:
        return chosen.handler(settings, args)
    except Exception as exc:
        return report_failure(f"lakehouse {args.command}", exc)
