"""A private PostgreSQL server for Airflow's metadata (and the catalog's): the server include/daemons/postgres.py runs,
its data directory under the cluster's home (`_cluster/postgres`), listening on 127.0.0.1 only (no Unix socket),
password authentication over TCP. (The CDC chain's database is another: include/cdc/database.py.)"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path

from include.cluster.topology import (
    METASTORE_DATABASE,
    METASTORE_USER,
    POSTGRES_DATABASE,
    POSTGRES_USER,
    Topology,
)
from include.daemons.postgres import LocalPostgres, PostgresError

CONFIGURATION = "# lakehouse cluster\nmax_connections = 200\n"  # Airflow's components, each a pool of connections


class ClusterError(RuntimeError):
    """A part of the cluster cannot start or stop; the message says which and why."""


def server(top: Topology) -> LocalPostgres:
    """The cluster's server: its data under `_cluster/postgres`, its superuser's password in secrets.json."""
    return LocalPostgres("postgres", top.postgres_data, top.ports.postgres, lambda: top.secrets()["postgres_password"])


def _as_cluster_error(act: Callable) -> Callable:
    """The server's failure as a ClusterError (its line unchanged: `postgres: <what> failed: <why>`)."""
    @wraps(act)
    def done(*args, **kwargs):
        try:
            return act(*args, **kwargs)
        except PostgresError as exc:
            raise ClusterError(str(exc)) from None
    return done


def data_dir(top: Topology) -> Path:
    """The server's data directory (`_cluster/postgres`, or where it links to: include/daemons/postgres.py)."""
    return server(top).data_dir()


def server_log(top: Topology) -> Path:
    return server(top).log


@_as_cluster_error
def initialize(top: Topology) -> bool:
    """Make the data directory once (UTF-8, superuser password from secrets.json); True when made now."""
    return server(top).initialize(CONFIGURATION)


@_as_cluster_error
def start(top: Topology) -> None:
    log, link = server_log(top), top.logs / "postgres.log"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to(log)
    server(top).start(f"starting the server (log {link})")


@_as_cluster_error
def stop(top: Topology) -> bool:
    """Stop the server (fast shutdown: sessions end, data is flushed); False when it was not running."""
    return server(top).stop()


def running(top: Topology) -> bool:
    """The server of this data directory runs (its postmaster.pid names a live process)."""
    return server(top).running()


def connect(top: Topology, user: str = "postgres", database: str = "postgres"):
    keys = top.secrets()
    return server(top).connect(user, None if user == "postgres" else keys["airflow_db_password"], database)


def answers(top: Topology) -> bool:
    return server(top).answers()


def ensure_database(top: Topology) -> None:
    """Airflow's user and database, and the catalog's (each owned by its user, so that it may create tables in
    `public`)."""
    keys = top.secrets()
    server(top).ensure_owned_database(POSTGRES_USER, keys["airflow_db_password"], POSTGRES_DATABASE)
    server(top).ensure_owned_database(METASTORE_USER, keys["metastore_db_password"], METASTORE_DATABASE)
    conn = connect(top)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(AIRFLOW_IDLE_TRANSACTIONS.format(user=POSTGRES_USER))
    finally:
        conn.close()


# A scheduler killed inside a transaction (its dag run rows locked FOR UPDATE) leaves the session open while the
# LocalExecutor workers it forked live on, holding its connection: every later scheduler skips the locked run, for
# good (seen: a backfill never scheduled again after its scheduler's SIGKILL). The server ends such a session after
# two minutes idle in its transaction; no Airflow component waits that long between a query and its commit.
AIRFLOW_IDLE_TRANSACTIONS = "ALTER ROLE {user} SET idle_in_transaction_session_timeout = '2min'"
