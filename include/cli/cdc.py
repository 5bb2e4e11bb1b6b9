"""`lakehouse cdc`: the change data capture chain (include/cdc): the database, the Kafka Connect worker and Debezium's
connectors, brought up, taken down (`--purge`: the connectors, slots and publications too), asked for their status."""

from __future__ import annotations

import argparse

from include.cdc import chain, connect
from include.cdc.database import CdcError
from include.cli.command import command, print_status
from include.cli.server_commands import run_server_command, server_subcommands
from include.kafka.connection import bootstrap_servers
from include.registry import load_registry
from include.settings import Settings


def _arguments(cdc: argparse.ArgumentParser) -> None:
    parsers = server_subcommands(
        cdc, "cdc", up="the local database (unless LAKEHOUSE_CDC_DATABASE_URL names one, or one answers), the checks "
                       "of the registry's tables, the Connect worker (the broker must answer), a publication and a "
                       "connector per database of the registry's `cdc:` sources; idempotent",
        down="stop the Connect worker and the local database (the replication slots stay: --purge)",
        more={"serve": "run the Connect worker in the foreground (a container's command)"},
        status="the database, the worker, each connector's and task's state, its slot's lag in bytes")
    parsers["down"].add_argument("--purge", action="store_true",
                                 help="first delete the connectors with their offsets, then drop their replication "
                                      "slots and publications (a later `up` snapshots the tables afresh)")


@command("cdc", "change data capture: a PostgreSQL database's changes through Debezium on Kafka Connect into topics "
                "(LAKEHOUSE_CDC_DATABASE_URL, LAKEHOUSE_CONNECT_URL)", _arguments, needs_root=False, reports=True)
def cdc(settings: Settings, args: argparse.Namespace) -> int:
    registry = load_registry(settings.registry_path)  # an invalid registry: one line, exit 2 (before anything starts)
    bootstrap = bootstrap_servers(settings)
    if args.cdc_command == "serve":
        connect.serve(settings, bootstrap)  # does not return

    def status() -> int:
        info = chain.status(settings, registry)
        return print_status(info, args.json, chain.render(info))

    def up() -> tuple[bool, str]:
        return True, "\n".join(chain.up(settings, registry, bootstrap))

    return run_server_command("cdc", args.cdc_command, CdcError, up=up, printed=lambda: settings.connect_url,
                              down=lambda: "\n".join(chain.down(settings, registry, bootstrap, args.purge)),
                              status=status)
