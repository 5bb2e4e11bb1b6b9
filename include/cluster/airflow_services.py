"""Airflow 3's components as separate processes on PostgreSQL: api-server, scheduler, dag-processor, triggerer; and
`history`, which keeps Airflow's runs and logs to LAKEHOUSE_AIRFLOW_HISTORY_DAYS (include/airflow/history.py)."""

from __future__ import annotations

import json

from include.airflow.environment import airflow_command, airflow_environment
from include.cluster.topology import AIRFLOW_USER, HOST, Topology, airflow_settings, cluster_connections
from include.connections import declared_connections
from include.daemons import Daemon, get_json
from include.entrypoints import lakehouse_command
from include.settings import Settings

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "history")
HISTORY_EVERY_MINUTES = 60
HISTORY_COMMAND = ["airflow-history", "--every", str(HISTORY_EVERY_MINUTES)]  # a `lakehouse` command
HEALTH_KEYS = {"scheduler": "scheduler", "dag-processor": "dag_processor", "triggerer": "triggerer"}


def environment(settings: Settings, top: Topology) -> dict[str, str]:
    return {**airflow_environment(settings), **airflow_settings(top)}


def daemon(top: Topology, component: str) -> Daemon:
    return Daemon(f"airflow-{component}", top.run / f"airflow-{component}.pid", top.logs / f"airflow-{component}.log")


def write_files(top: Topology) -> None:
    """The login's password file and the cluster's connections (spark_default on the standalone master)."""
    top.airflow_home.mkdir(parents=True, exist_ok=True)
    passwords = top.airflow_home / "passwords.json"
    passwords.write_text(json.dumps({AIRFLOW_USER: top.secrets()["airflow_password"]}))
    passwords.chmod(0o600)
    connections = cluster_connections(declared_connections(), top)
    top.connections_file.write_text(json.dumps(connections, indent=2) + "\n")


def command(top: Topology, component: str) -> list[str]:
    if component == "history":
        return [*lakehouse_command(), *HISTORY_COMMAND]
    return airflow_command() + [component] + (
        ["--host", HOST, "--port", str(top.ports.airflow)] if component == "api-server" else [])


def start(settings: Settings, top: Topology, component: str) -> None:
    # kept: Airflow's components exit when PostgreSQL goes away and count on a supervisor to start them again
    daemon(top, component).start(command(top, component), env=environment(settings, top), cwd=top.airflow_home,
                                 kept=True)


def health(top: Topology) -> dict | None:
    """The API server's health document (metadatabase, scheduler, triggerer, dag_processor), or None."""
    return get_json(f"{top.airflow_url}/api/v2/monitor/health")


def answers(top: Topology, component: str, report: dict | None) -> bool:
    """The component runs and (but for the API server, which answers itself, and `history`, a loop) reports
    healthy."""
    if daemon(top, component).running_pid() is None:
        return False
    if component == "history":
        return True
    if report is None:
        return False
    if component == "api-server":
        return True
    return (report.get(HEALTH_KEYS[component]) or {}).get("status") == "healthy"
