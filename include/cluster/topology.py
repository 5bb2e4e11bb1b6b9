"""The production topology on one machine: where each part listens, its files, and the settings Airflow's components
and the Spark jobs share. The single source of those settings for `lakehouse cluster` and docker-compose.yaml
(tests/test_compose.py checks that the compose file agrees)."""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from include.settings import Settings
from include.storage.files import kept_secrets

HOST = "127.0.0.1"
SPARK_MASTER_PORT = 7077
AIRFLOW_USER = "admin"
POSTGRES_DATABASE = "airflow"
POSTGRES_USER = "airflow"
METASTORE_DATABASE = "metastore"  # the catalog's tables, apart from Airflow's (include/catalog/metastore.py)
METASTORE_USER = "metastore"
WORKER_CORES = 1
WORKER_MEMORY = "2g"


@dataclass(frozen=True)
class Ports:
    """Ports of the parts (LAKEHOUSE_CLUSTER_PORTS=postgres,airflow,spark_ui[,spark_master]: other ports for a second
    cluster)."""

    postgres: int = 5433
    airflow: int = 8280
    spark_master: int = SPARK_MASTER_PORT
    spark_master_ui: int = 8180  # workers' UIs: the next ports

    @classmethod
    def from_env(cls) -> Ports:
        return cls.parse(os.environ.get("LAKEHOUSE_CLUSTER_PORTS", ""))

    @classmethod
    def parse(cls, value: str) -> Ports:
        value = value.strip()
        if not value:
            return cls()
        try:
            ports = [int(p) for p in value.split(",")]
            if len(ports) not in (3, 4):
                raise ValueError(f"{len(ports)} ports")
        except ValueError as exc:
            raise ValueError(f"LAKEHOUSE_CLUSTER_PORTS={value!r}: expected three or four ports, "
                             "postgres,airflow,spark_ui[,spark_master] (e.g. 5433,8280,8180 or 5433,8280,8180,7077)"
                             ) from exc
        postgres, airflow, spark_ui, spark_master = [*ports, SPARK_MASTER_PORT][:4]
        return cls(postgres, airflow, spark_master, spark_ui)


@dataclass(frozen=True)
class Topology:
    """`LAKEHOUSE_ROOT/_cluster/`: postgres/ (its data), airflow/ (AIRFLOW_HOME), spark/ (workers' directories),
    logs/ (one log per part), run/ (pid files), secrets.json, connections.json, cluster.json (what `up` started)."""

    home: Path
    ports: Ports
    workers: int = 2

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        return self.home / "run"

    @property
    def postgres_data(self) -> Path:
        return self.home / "postgres"

    @property
    def airflow_home(self) -> Path:
        return self.home / "airflow"

    @property
    def spark_dir(self) -> Path:
        return self.home / "spark"

    @property
    def state_file(self) -> Path:
        return self.home / "cluster.json"

    @property
    def connections_file(self) -> Path:
        return self.home / "connections.json"

    @property
    def spark_master(self) -> str:
        return f"spark://{HOST}:{self.ports.spark_master}"

    @property
    def spark_master_ui(self) -> str:
        return f"http://{HOST}:{self.ports.spark_master_ui}"

    @property
    def airflow_url(self) -> str:
        return f"http://{HOST}:{self.ports.airflow}"

    def secrets(self) -> dict[str, str]:
        """Passwords and keys, each made once and kept in secrets.json (readable by this user only)."""
        return kept_secrets(self.home / "secrets.json", {
            "postgres_password": lambda: secrets.token_urlsafe(18),
            "airflow_db_password": lambda: secrets.token_urlsafe(18),
            "airflow_password": lambda: secrets.token_urlsafe(12),
            "jwt_secret": lambda: secrets.token_urlsafe(32),
            "fernet_key": lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            "metastore_db_password": lambda: secrets.token_urlsafe(18),  # a cluster made before the catalog lacks it
        })

    def database_url(self) -> str:
        password = self.secrets()["airflow_db_password"]
        return f"postgresql+psycopg2://{POSTGRES_USER}:{password}@{HOST}:{self.ports.postgres}/{POSTGRES_DATABASE}"


    def metastore_db(self) -> str:
        """LAKEHOUSE_METASTORE_DB of the cluster's catalog: its own database on the cluster's PostgreSQL."""
        password = self.secrets()["metastore_db_password"]
        return f"postgresql://{METASTORE_USER}:{password}@{HOST}:{self.ports.postgres}/{METASTORE_DATABASE}"


def topology(settings: Settings, workers: int = 2) -> Topology:
    return Topology(settings.layout.cluster, Ports.from_env(), workers)


# Identical in every deployment of the topology (`lakehouse cluster` and docker-compose.yaml: tests/test_compose.py).
SHARED_AIRFLOW_SETTINGS = {
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__API_AUTH__JWT_ISSUER": "lakehouse",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
}
# Set in every deployment, to values of its own (addresses, secrets, files).
DEPLOYMENT_AIRFLOW_SETTINGS = (
    "AIRFLOW_HOME", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW__API__BASE_URL", "AIRFLOW__CORE__DAGS_FOLDER",
    "AIRFLOW__CORE__PLUGINS_FOLDER",
)


def airflow_settings(top: Topology) -> dict[str, str]:
    """What every Airflow component of the cluster shares, beyond the project's embedded settings
    (include.airflow.environment, which sets the DAGs and plugins folders): the database, the executor, one JWT secret
    and fernet key, the execution API's URL, the login, the connections with `spark_default` on the standalone
    master."""
    keys = top.secrets()
    return {
        **SHARED_AIRFLOW_SETTINGS,
        "AIRFLOW_HOME": str(top.airflow_home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": top.database_url(),
        "AIRFLOW__CORE__FERNET_KEY": keys["fernet_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{top.airflow_url}/execution/",
        "AIRFLOW__API__BASE_URL": top.airflow_url,
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(top.ports.airflow),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(top.airflow_home / "passwords.json"),
        "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"connections_file_path": str(top.connections_file)}),
    }


def cluster_connections(project_connections: dict, top: Topology) -> dict:
    """The project's connections with `spark_default` on the standalone master (client deploy mode)."""
    connections = json.loads(json.dumps(project_connections))
    connections["spark_default"]["host"] = top.spark_master
    connections["spark_default"]["extra"] = {"deploy-mode": "client"}
    connections["spark_default"]["description"] = "The Spark standalone master of `lakehouse cluster`."
    return connections
