"""SQL for everyone who reads the lakehouse: Spark's Thrift server (HiveServer2's protocol: beeline, DBeaver,
Superset, PyHive, any JDBC client) over the catalog: `lakehouse sql up | down | status`.

It listens on `LAKEHOUSE_SQL_PORT` (10000) at `LAKEHOUSE_SQL_BIND` (127.0.0.1: loopback unless configured), is
spark-submitted on the `spark_default` connection like the jobs (its driver sized by LAKEHOUSE_SPARK_DRIVER_MEMORY),
with the lakehouse's session confs (Delta, the storage's, the catalog's) and two pieces of the project's JVM jar:
`lakehouse.SqlLogin` (the login: `LAKEHOUSE_SQL_USER`, `LAKEHOUSE_SQL_PASSWORD`; a password made once and kept,
readable by its owner only, when none is set) and `lakehouse.ReadOnlySql` (every statement that would change a table
or the catalog is refused, naming it: the pipelines stay the only writers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from include.connections import secrets_environment
from include.daemons import DaemonFiles, port_taken
from include.ops.launch import job_environment, submit_kwargs
from include.settings import Settings
from include.spark_session import READ_ONLY_EXTENSION, lakehouse_confs

log = logging.getLogger(__name__)

THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
LOGIN_CLASS = "lakehouse.SqlLogin"
START_TIMEOUT_SECONDS = 240.0
STOP_TIMEOUT_SECONDS = 60.0


class EndpointError(RuntimeError):
    """The SQL endpoint cannot be started or reached; the message is one line saying why."""


@dataclass(frozen=True)
class EndpointFiles(DaemonFiles, daemon="the SQL endpoint", log="thrift-server.log", pid="thrift-server.pid"):
    """Where `lakehouse sql up` keeps the endpoint's files (Layout.sql_endpoint)."""

    @property
    def password(self) -> Path:
        return self.home / "password"


def client_host(settings: Settings) -> str:
    """Where a client on this host reaches the endpoint: its bind address, or loopback when it binds every one."""
    return "127.0.0.1" if settings.sql_bind in ("0.0.0.0", "") else settings.sql_bind


def jdbc_url(settings: Settings) -> str:
    host = client_host(settings)
    return f"jdbc:hive2://{host}:{settings.sql_port}/default"


def password(settings: Settings) -> str:
    """LAKEHOUSE_SQL_PASSWORD, else the one made once and kept under the endpoint's files (owner-only)."""
    if settings.sql_password:
        return settings.sql_password
    files = EndpointFiles(settings.layout.sql_endpoint)
    if files.password.is_file():
        return files.password.read_text().strip()
    files.home.mkdir(parents=True, exist_ok=True)
    made = secrets.token_urlsafe(18)
    descriptor = os.open(files.password, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(made + "\n")
    return made


def answers(settings: Settings, timeout: float = 2.0) -> bool:
    """Something accepts connections on the endpoint's port (HiveServer2 opens it once it is ready)."""
    host = client_host(settings)
    try:
        with socket.create_connection((host, settings.sql_port), timeout=timeout):
            return True
    except OSError:
        return False


def submit_command(settings: Settings) -> list[str]:
    """spark-submit of the Thrift server on the `spark_default` connection, with the lakehouse's confs."""
    for key, value in secrets_environment().items():  # the connections file, for a command outside Airflow
        os.environ.setdefault(key, value)
    with contextlib.redirect_stdout(sys.stderr):
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


    confs = lakehouse_confs(settings)
    if confs.get("spark.sql.catalogImplementation") != "hive":
        raise EndpointError(f"no catalog answers at {settings.metastore_uri}: start it first (lakehouse catalog up)")
    confs["spark.sql.extensions"] = f"{confs['spark.sql.extensions']},{READ_ONLY_EXTENSION}"
    kwargs = submit_kwargs(settings, "lakehouse-sql", [
        "--hiveconf", f"hive.server2.thrift.port={settings.sql_port}",
        "--hiveconf", f"hive.server2.thrift.bind.host={settings.sql_bind}",
        "--hiveconf", "hive.server2.authentication=CUSTOM",
        "--hiveconf", f"hive.server2.custom.authentication.class={LOGIN_CLASS}",
    ])
    kwargs["conf"] = {**confs, **kwargs["conf"]}
    kwargs["java_class"] = THRIFT_SERVER_CLASS
    # on the driver's class path, not only --jars: the server's sessions load Delta's catalog and the login there
    kwargs["driver_class_path"] = kwargs["jars"].replace(",", os.pathsep)
    with contextlib.redirect_stdout(sys.stderr):  # the hook's log lines (Airflow logs to stdout) are not our output
        return SparkSubmitHook(**kwargs)._build_spark_submit_command("spark-internal")


def up(settings: Settings) -> tuple[bool, str]:
    """Start the endpoint in the background unless one answers on its port; wait until it answers.
    Returns (started, message); raises EndpointError saying why it cannot start."""
    if answers(settings):
        return False, f"the SQL endpoint already answers at {jdbc_url(settings)}"
    if port_taken(settings.sql_bind or "0.0.0.0", settings.sql_port):
        raise EndpointError(f"port {settings.sql_port} is taken by another program (the SQL endpoint needs it): free "
                            "it, or set LAKEHOUSE_SQL_PORT to another port")
    files = EndpointFiles(settings.layout.sql_endpoint)
    files.home.mkdir(parents=True, exist_ok=True)
    command = submit_command(settings)
    env = {**os.environ, **job_environment(settings), "LAKEHOUSE_SQL_USER": settings.sql_user,
           "LAKEHOUSE_SQL_PASSWORD": password(settings)}
    process = files.daemon.start_and_wait(  # outlives this command
        command, lambda: answers(settings), EndpointError, what="the SQL endpoint", timeout=START_TIMEOUT_SECONDS,
        stop_timeout=STOP_TIMEOUT_SECONDS, poll=1.0, env=env, cwd=files.home)
    return True, f"SQL endpoint up at {jdbc_url(settings)} (pid {process.pid}; log {files.log})"


def down(settings: Settings) -> str:
    return EndpointFiles(settings.layout.sql_endpoint).daemon.stop_saying(
        "SQL endpoint stopped", "no SQL endpoint started by `lakehouse sql up` runs", STOP_TIMEOUT_SECONDS)


def status(settings: Settings) -> dict:
    """`jdbc_url`, `host`, `port`, `up`, `user`."""
    host = client_host(settings)
    return {"jdbc_url": jdbc_url(settings), "host": host, "port": settings.sql_port, "up": answers(settings),
            "user": settings.sql_user}
