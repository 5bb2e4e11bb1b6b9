"""`lakehouse summary`, `quality`, `health`, `metrics` and `lineage`: reports on the tables, their checks, the jobs and
what feeds what."""

from __future__ import annotations

import argparse
import json
import sys

from include.cdc.health import cdc_health
from include.cdc.health import render as render_connectors
from include.cli.command import command
from include.registry import load_registry
from include.settings import Settings


@command("summary", "rows per table, state rows, quarantined lines", reports=True)
def summary(settings: Settings, args: argparse.Namespace) -> int:
    from include.summary import summarize

    sys.stdout.write(summarize(settings, load_registry(settings.registry_path)).render() + "\n")
    return 0


def _quality_arguments(quality: argparse.ArgumentParser) -> None:
    quality_sub = quality.add_subparsers(dest="quality_command", required=True)
    quality_run = quality_sub.add_parser("run", help="validate (new versions of) the tables with a suite")
    quality_run.add_argument("tables", nargs="*", help="tables such as gold/user_activity_5m (default: all)")
    quality_run.add_argument("--full", action="store_true", help="validate every row, not only new versions")


@command("quality", "Great Expectations checks of the gold tables (and bronze's rescued fields)", _quality_arguments,
         reports=True)
def quality(settings: Settings, args: argparse.Namespace) -> int:
    from include.quality.runner import run_quality

    report = run_quality(settings, load_registry(settings.registry_path), args.tables or None, full=args.full)
    sys.stdout.write(report.render() + "\n")
    return 1 if report.blocking_failures else 0


def _health_arguments(health: argparse.ArgumentParser) -> None:
    health.add_argument("--report", action="store_true",
                        help="also rebuild the pipeline-health report (as the DAGs' health_report task does)")


@command("health", "each job's batches, status and health problems; each CDC connector's and its slot's",
         _health_arguments, reports=True)
def health(settings: Settings, args: argparse.Namespace) -> int:
    from include.ops import health_report

    registry = load_registry(settings.registry_path)
    sys.stdout.write(health_report.render_table(health_report.health_rows(settings, registry)) + "\n")
    connectors = cdc_health(settings, registry)
    if connectors:
        sys.stdout.write("\n" + render_connectors(connectors) + "\n")
    if args.report:
        sys.stdout.write(f"pipeline-health report: {health_report.build(settings, registry)}\n")
    return 0


def _metrics_arguments(metrics: argparse.ArgumentParser) -> None:
    metrics.add_argument("--serve", action="store_true",
                         help="serve them at http://LAKEHOUSE_METRICS_BIND:LAKEHOUSE_METRICS_PORT/metrics until "
                              "stopped (what Prometheus scrapes), with Alertmanager's webhook at /alerts")


@command("metrics", "the jobs' and tables' metrics in Prometheus' text format (`--serve`: the endpoint to scrape)",
         _metrics_arguments, reports=True)
def metrics(settings: Settings, args: argparse.Namespace) -> int:
    if args.serve:
        from include.monitor.endpoint import serve

        serve(settings)
    else:
        from include.ops.metrics import exposition

        sys.stdout.write(exposition(settings))
    return 0


def _lineage_arguments(lineage_parser: argparse.ArgumentParser) -> None:
    lineage_parser.add_argument("table", help="a table as the registry names it, e.g. gold/user_activity_5m")
    lineage_parser.add_argument("--json", action="store_true",
                                help="as JSON: table, catalog_name, written_by, upstream and downstream (each edge: "
                                     "from, job, to), columns (each column's dataset, column, transformation, job), "
                                     "catalog_names")


@command("lineage", "what a table is made from and what is made from it: tables, jobs and columns (from the registry)",
         _lineage_arguments, needs_root=False, reports=True)
def lineage(settings: Settings, args: argparse.Namespace) -> int:
    from include.lineage.graph import render, table_lineage

    try:
        found = table_lineage(load_registry(settings.registry_path), args.table)
    except ValueError as exc:
        sys.stderr.write(f"lakehouse lineage: {exc}\n")
        return 2
    sys.stdout.write((json.dumps(found, indent=2) if args.json else render(found)) + "\n")
    return 0
