"""`lakehouse summary`, `quality` and `health`: reports on the tables, their checks and the jobs."""

from __future__ import annotations

import argparse
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
