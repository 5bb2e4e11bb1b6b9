"""`lakehouse kafka`, `storage` and `cluster`: the Kafka broker, the S3 server, and the production topology on this
machine (each started in the background, stopped, asked for its status)."""

from __future__ import annotations

import argparse
import json
import sys

from include import arguments
from include.cli.command import command, print_status
from include.cli.server_commands import run_server_command, server_subcommands
from include.cluster import manager
from include.cluster.postgres import ClusterError
from include.kafka import broker
from include.kafka.connection import bootstrap_servers
from include.objectstore import server
from include.settings import Settings, load_settings


def _kafka_arguments(kafka: argparse.ArgumentParser) -> None:
    server_subcommands(kafka, "kafka", up="format its data directory once, start it in the background, wait until it "
                                          "answers",
                       down="stop the broker `kafka up` started",
                       status="whether a broker answers, and its topics with their partitions", status_json=False)


@command("kafka", "the Kafka broker of the Kafka sources (LAKEHOUSE_KAFKA_BOOTSTRAP)", _kafka_arguments,
         needs_root=False, reports=True)
def kafka(settings: Settings, args: argparse.Namespace) -> int:
    bootstrap = bootstrap_servers(settings)

    def status() -> int:
        topics = broker.list_topics(bootstrap)
        lines = [f"Kafka broker answers at {bootstrap}: {len(topics)} topic(s)"]
        sys.stdout.write("\n".join(lines + [f"  {t.name}: {t.partitions} partition(s)" for t in topics]) + "\n")
        return 0

    return run_server_command("kafka", args.kafka_command, broker.BrokerError, up=lambda: broker.up(settings, bootstrap),
                              printed=lambda: bootstrap, down=lambda: broker.down(settings), status=status)


def _storage_arguments(storage: argparse.ArgumentParser) -> None:
    server_subcommands(storage, "storage", up="start it in the background (data under <local>/_s3/), create "
                                              "LAKEHOUSE_ROOT's bucket, wait until it answers",
                       down="stop the server `storage up` started",
                       status="its endpoint, the root, whether it answers, the credentials")


@command("storage", "the S3 server of a lakehouse on S3 (LAKEHOUSE_S3_ENDPOINT): SeaweedFS", _storage_arguments,
         needs_root=False, reports=True)
def storage(settings: Settings, args: argparse.Namespace) -> int:
    def credentials() -> str:
        info = server.status(load_settings())  # with the credentials `up` may just have made
        return (f"{info['endpoint']}\naccess key id: {info['access_key_id']}\n"
                f"secret access key: {info['secret_access_key']}")

    def status() -> int:
        info = server.status(settings)
        return print_status(info, args.json,
                            f"S3 server at {info['endpoint']}: {'answers' if info['up'] else 'does not answer'}\n"
                            f"lakehouse root: {info['root']}\naccess key id: {info['access_key_id'] or '-'}\n"
                            f"data (a server `storage up` started here): {info['data']}")

    return run_server_command("storage", args.storage_command, server.StorageError, up=lambda: server.up(settings),
                              printed=credentials, down=lambda: server.down(settings), status=status)


def _cluster_arguments(cluster: argparse.ArgumentParser) -> None:
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    cluster_up = cluster_sub.add_parser("up", help="start every part (each waited for until it answers)")
    cluster_up.add_argument("--workers", type=arguments.positive_int, default=2,
                            help="Spark workers, 1 core each (default 2)")
    cluster_up.add_argument("--storage", choices=("local", "s3"), default=None,
                            help="where the lakehouse lives: this machine's disk, or the S3 server started with the "
                                 "rest (LAKEHOUSE_ROOT if it is an S3 URI, else s3://lakehouse/cluster); default: as "
                                 "the running cluster, else LAKEHOUSE_ROOT's kind")
    cluster_status = cluster_sub.add_parser("status", help="each part, its address and whether it answers")
    cluster_status.add_argument("--json", action="store_true", help="as JSON (the logins too)")
    cluster_sub.add_parser("down", help="stop every part, in order; the data stays")


@command("cluster", "the production topology on this machine: PostgreSQL, Airflow's components, a Spark standalone "
                    "master and workers, Kafka, and the CDC chain when the registry captures a database",
         _cluster_arguments, needs_root=False, reports=True)
def cluster(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.cluster_command == "up":
            sys.stdout.write("\n".join(manager.up(settings, args.workers, args.storage)) + "\n")
        elif args.cluster_command == "down":
            sys.stdout.write("\n".join(manager.down(settings)) + "\n")
        else:
            info = manager.status(settings)
            sys.stdout.write((json.dumps(info, indent=2) if args.json else manager.render(info)) + "\n")
    except ClusterError as exc:
        sys.stderr.write(f"lakehouse cluster {args.cluster_command}: {exc}\n")
        return 1
    return 0
