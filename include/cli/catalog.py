"""`lakehouse catalog`, `sql` and `query`: the Hive metastore that names the tables, the SQL endpoint over it, and
one read-only statement."""

from __future__ import annotations

import argparse
import sys

from include.catalog import metastore, sql_endpoint
from include.catalog.query import QueryError, render, run_query
from include.cli.command import command, print_status
from include.cli.server_commands import run_server_command, server_subcommands
from include.registry import load_registry
from include.settings import Settings
from include.spark_session import get_spark


def _catalog_arguments(catalog: argparse.ArgumentParser) -> None:
    server_subcommands(catalog, "catalog", up="start it in the background (Derby under <local>/_catalog/), wait until "
                                              "it answers",
                       down="stop the metastore `catalog up` started",
                       more={"serve": "run the metastore in the foreground (a container's command)",
                             "sync": "register or correct every table of the registry and the operational ones "
                                     "(idempotent; prints what it changed; never drops a table)"},
                       status="its URI, whether it answers, its backend and databases")


@command("catalog", "the catalog of the lakehouse's tables: a Hive metastore (LAKEHOUSE_METASTORE_URI)",
         _catalog_arguments, needs_root=False, reports=True)
def catalog(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.catalog_command == "up":
            _, message = metastore.up(settings)
            sys.stderr.write(message + "\n")
            sys.stdout.write(settings.metastore_uri + "\n")
            return catalog_sync(settings) if settings.root.exists() else 0
        if args.catalog_command == "down":
            sys.stdout.write(metastore.down(settings) + "\n")
            return 0
        if args.catalog_command == "serve":
            metastore.serve(settings)  # does not return
        if args.catalog_command == "sync":
            metastore.databases(settings.metastore_uri)  # one line when none answers, before a Spark driver starts
            return catalog_sync(settings)
    except metastore.CatalogError as exc:
        sys.stderr.write(f"lakehouse catalog {args.catalog_command}: {exc}\n")
        return 1
    info = metastore.status(settings)
    return print_status(info, args.json, metastore.render(info))


def catalog_sync(settings: Settings) -> int:
    """`lakehouse catalog sync`: every table by name, through a Spark session on the catalog (none started while no
    table exists yet)."""
    from include.catalog_client.tables import is_delta_table, named_tables, on_catalog, register

    tables = named_tables(settings, load_registry(settings.registry_path))
    if not any(is_delta_table(t.location) for t in tables):
        sys.stdout.write("catalog in sync: no table of the lakehouse exists yet (each job names its tables when it "
                         "creates them)\n")
        return 0
    spark = get_spark(settings, app_name="lakehouse-catalog-sync")
    if not on_catalog(spark):
        sys.stderr.write(f"lakehouse catalog sync: no catalog answers at {settings.metastore_uri}\n")
        return 1
    changes = register(spark, settings, tables)
    sys.stdout.write("\n".join(changes) + "\n" if changes else "catalog in sync: every table of the lakehouse is "
                                                                 "named\n")
    return 0


def _sql_arguments(sql: argparse.ArgumentParser) -> None:
    server_subcommands(sql, "sql", up="start it in the background (the catalog must answer), wait until it answers; "
                                      "prints its JDBC URL, user and password",
                       down="stop the endpoint `sql up` started", status="its JDBC URL, whether it answers, its user")


@command("sql", "the SQL endpoint over the catalog: Spark's Thrift server (JDBC, LAKEHOUSE_SQL_PORT), read-only, "
                "behind a login", _sql_arguments, needs_root=False, reports=True)
def sql(settings: Settings, args: argparse.Namespace) -> int:
    def status() -> int:
        info = sql_endpoint.status(settings)
        return print_status(info, args.json, f"SQL endpoint {info['jdbc_url']}: "
                                             f"{'answers' if info['up'] else 'does not answer'} (user {info['user']})")

    return run_server_command(
        "sql", args.sql_command, sql_endpoint.EndpointError, up=lambda: sql_endpoint.up(settings),
        printed=lambda: f"{sql_endpoint.jdbc_url(settings)}\nuser: {settings.sql_user}\n"
                        f"password: {sql_endpoint.password(settings)}",
        down=lambda: sql_endpoint.down(settings), status=status)


def _query_arguments(query: argparse.ArgumentParser) -> None:
    query.add_argument("statement", help='e.g. "SELECT count(*) FROM gold.user_activity_5m"')
    query.add_argument("--format", dest="output", choices=("table", "csv", "json"), default="table",
                       help="table (default), csv with a header, or a JSON array of objects")


@command("query", "one read-only SQL statement over the catalog: through the SQL endpoint when it answers, else in "
                  "a local session", _query_arguments, needs_root=False, reports=True)
def query(settings: Settings, args: argparse.Namespace) -> int:
    try:
        result = run_query(settings, args.statement)
    except QueryError as exc:
        sys.stderr.write(f"lakehouse query: {exc}\n")
        return 1
    sys.stdout.write(render(result, args.output) + "\n")
    return 0
