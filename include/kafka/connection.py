"""Where a Kafka source's broker is: `LAKEHOUSE_KAFKA_BOOTSTRAP` when set, else the source's Airflow connection
(`kafka_default` unless the registry names another: Airflow's `AIRFLOW_CONN_<ID>` variable, else
include/airflow/connections.json), else 127.0.0.1:9092. The same answer for the CLI, the jobs and the DAGs."""

from __future__ import annotations

import json
import os
from urllib.parse import parse_qs, urlparse

from include.connections import connection_extra, declared_connections
from include.kafka.broker import answers
from include.registry import JobSpec
from include.settings import Settings, check_bootstrap

DEFAULT_CONNECTION = "kafka_default"


def bootstrap_servers(settings: Settings, connection_id: str = DEFAULT_CONNECTION) -> str:
    """The `host:port[,host:port]` of the broker behind `connection_id`; ValueError naming what is wrong."""
    if settings.kafka_bootstrap_set:
        return settings.kafka_bootstrap
    servers = _from_environment(connection_id) or _from_file(connection_id)
    if servers is None:
        return settings.kafka_bootstrap
    check_bootstrap(f"connection {connection_id!r}: bootstrap.servers", servers)
    return servers


def _from_environment(connection_id: str) -> str | None:
    raw = os.environ.get(f"AIRFLOW_CONN_{connection_id.upper()}", "").strip()
    if not raw:
        return None
    if raw.startswith("{"):
        return connection_extra(json.loads(raw)).get("bootstrap.servers")
    query = parse_qs(urlparse(raw).query)  # kafka://?bootstrap.servers=host%3A9092 (Airflow's URI form)
    return (query.get("bootstrap.servers") or [None])[0]


def _from_file(connection_id: str) -> str | None:
    return connection_extra(declared_connections().get(connection_id) or {}).get("bootstrap.servers")


def unreachable_broker(settings: Settings, job: JobSpec) -> str | None:
    """"broker unreachable at host:port" when the broker of one of the job's Kafka sources does not answer."""
    for source in job.sources:
        if source.kind == "kafka":
            bootstrap = bootstrap_servers(settings, source.kafka.connection)
            if not answers(bootstrap):
                return f"broker unreachable at {bootstrap}"
    return None
