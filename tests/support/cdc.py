"""The CDC chain of a test session (a plugin of tests/conftest.py): the local PostgreSQL, the Kafka Connect worker and
Debezium's connector, started once per pytest worker by `lakehouse cdc up` on the session's broker
(`cdc_chain`: its tests share the broker's worker, tests/support/scheduling.py), on ports of their own, with a
registry of its own (customers and orders of the demo database `shop`); and what its tests read: the topics'
messages, the database, the REST API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from include.daemons.postgres import ELSEWHERE
from include.settings import Settings, load_settings
from tests.support.helpers import run_cli

TOPICS = {"customers": "shop.public.customers", "orders": "shop.public.orders"}
CONNECTOR = "lakehouse-shop"
SAMPLES = Path(__file__).with_name("debezium_samples.json")


def cdc_registry(sources: dict | None = None) -> dict:
    """A registry of bronze jobs on `cdc:` sources (by default the demo's customers and orders of `shop`)."""
    sources = sources or {
        "customers": {"cdc": {"database": "shop", "table": "public.customers", "keys": ["id"]},
                      "schema": {"id": "long", "name": "string", "email": "string", "country": "string",
                                 "updated_at": "timestamp"}},
        "orders": {"cdc": {"database": "shop", "table": "public.orders", "keys": ["id"]},
                   "schema": {"id": "long", "customer_id": "long", "amount": "double", "status": "string",
                              "updated_at": "timestamp"}},
    }
    jobs = {f"bronze_{name}": {"description": f"{name}' changes to bronze", "source": {"cdc": name},
                               "transform": {"kind": "parse_json"},
                               "sink": {"table": f"bronze/{name}", "mode": "append",
                                        "quarantine_table": f"bronze/{name}_quarantine"}}
            for name in sources}
    return {"defaults": {"triggers": {"backfill": "available-now", "live": "processing-time=30 seconds"}},
            "sources": sources, "jobs": jobs}


def write_registry(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@dataclass(frozen=True)
class CdcChain:
    env: dict  # a `lakehouse` command's environment on this chain
    settings: Settings  # the same, in this process
    bootstrap: str
    first_run: dict  # `generate --source shop`'s summary of the run before `cdc up` (the snapshot's rows)
    up: subprocess.CompletedProcess

    def cli(self, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
        return run_cli(list(args), {**self.env, **env}, timeout=timeout)

    def rest(self, method: str, path: str) -> tuple[int, dict | list]:
        from include.cdc.connect import rest

        return rest(self.settings.connect_url, method, path)


@pytest.fixture(scope="session")
def cdc_chain(kafka_broker, tmp_path_factory) -> CdcChain:
    """`generate --source shop` (which starts the local database) then `cdc up`, once; `cdc down --purge` at the end,
    and the local database's data removed. A test that takes the chain down brings it up again before it ends."""
    from include.daemons import free_port_block
    from tests.support.kafka import delete_topics

    home = tmp_path_factory.mktemp("cdc")
    registry = write_registry(home / "registry.yaml", cdc_registry())
    port, connect_port = free_port_block([0]), free_port_block([0])
    env = {**os.environ, "LAKEHOUSE_ROOT": str(home / "lakehouse"), "LAKEHOUSE_REGISTRY": str(registry),
           "LAKEHOUSE_CDC_POSTGRES_PORT": str(port), "LAKEHOUSE_CONNECT_URL": f"http://127.0.0.1:{connect_port}"}
    env.pop("LAKEHOUSE_CDC_DATABASE_URL", None)
    settings = replace(load_settings(), root=home / "lakehouse", registry_path=registry, cdc_postgres_port=port,
                       connect_url=env["LAKEHOUSE_CONNECT_URL"], cdc_database_url="")
    from include.cdc.connect import INTERNAL_TOPICS

    delete_topics(kafka_broker, [*TOPICS.values(), *INTERNAL_TOPICS.values()])  # this broker's earlier chains'
    first = run_cli(["generate", "--source", "shop", "--events", "40", "--seed", "11"], env, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    keep_commit_times(settings)
    up = run_cli(["cdc", "up"], env, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr[-3000:]
    chain = CdcChain(env, settings, kafka_broker, json.loads(first.stdout), up)
    yield chain
    from include.cdc import connect
    from include.cdc.database import local_server

    if connect.answers(settings.connect_url):
        down = chain.cli("cdc", "down", "--purge")
        assert down.returncode == 0, down.stdout + down.stderr
    data = local_server(settings).data_dir()
    local_server(settings).stop()
    if data.is_relative_to(ELSEWHERE):  # the postgres user could not reach the session's directory: data moved
        shutil.rmtree(data, ignore_errors=True)


def keep_commit_times(settings: Settings) -> None:
    """The local database keeps each transaction's commit time from now on (`track_commit_timestamp`, which takes a
    restart): tests/test_cdc_oracle.py compares the SCD type 2 table's `__start_at` / `__end_at` with
    `pg_xact_commit_timestamp` of the generator's transactions. Before `cdc up`: no connector sees the restart."""
    from include.cdc.database import local_server

    superuser_query(settings, "ALTER SYSTEM SET track_commit_timestamp = on")
    server = local_server(settings)
    server.stop()
    server.start("restarting the server (track_commit_timestamp)")
    assert superuser_query(settings, "SHOW track_commit_timestamp") == [("on",)]


def messages(bootstrap: str, topic: str, at_least: int = 0, timeout: float = 60.0) -> list[tuple[dict, dict | None]]:
    """Every message of the (one-partition) topic, (key, value) as JSON (a tombstone's value None), once it holds at
    least `at_least`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-tests", "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + timeout
        while True:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if high - low >= at_least or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        consumer.assign([TopicPartition(topic, 0, low)])
        found: list[tuple[dict, dict | None]] = []
        while len(found) < high - low:
            message = consumer.poll(10)
            assert message is not None, f"{topic}: {len(found)} of {high - low} messages read"
            if message.error():
                continue
            value = message.value()
            found.append((json.loads(message.key()), None if value is None else json.loads(value)))
        return found
    finally:
        consumer.close()


def query(settings: Settings, sql: str, params: tuple = ()) -> list[tuple]:
    """The rows of one statement on the captured database (as its owner)."""
    from include.cdc import database

    conn = database.connect(database.address(settings))
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def superuser_query(settings: Settings, sql: str) -> list[tuple]:
    """The rows of one statement run as the local server's superuser (on `postgres`)."""
    from include.cdc.database import local_server

    conn = local_server(settings).connect()
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()
