"""The project's Airflow connections (`include/airflow/connections.json`, read by Airflow's local-filesystem secrets
backend), read here for the code that needs one outside Airflow: the Kafka client, the cluster's own copy. No
Airflow import."""

from __future__ import annotations

import json
from typing import Any

from include.settings import PACKAGE_DIR

CONNECTIONS_FILE = PACKAGE_DIR / "airflow" / "connections.json"


def declared_connections() -> dict[str, dict[str, Any]]:
    """Every connection of the file, by id."""
    return json.loads(CONNECTIONS_FILE.read_text())


def connection_extra(connection: dict[str, Any]) -> dict[str, Any]:
    """A connection's `extra`, which Airflow takes as an object or as its JSON text."""
    extra = connection.get("extra") or {}
    return json.loads(extra) if isinstance(extra, str) else extra


def secrets_environment() -> dict[str, str]:
    """The environment that points Airflow (and a hook used outside it) at the connections file, through Airflow's
    local-filesystem secrets backend."""
    return {"AIRFLOW__SECRETS__BACKEND": "airflow.secrets.local_filesystem.LocalFilesystemBackend",
            "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"connections_file_path": str(CONNECTIONS_FILE)})}
