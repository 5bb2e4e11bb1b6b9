"""A private PostgreSQL server for Airflow's metadata: Debian's server binaries, a data directory of its own under the
cluster's home, listening on 127.0.0.1 only (no Unix socket), password authentication over TCP."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from include.cluster.topology import (
    HOST,
    METASTORE_DATABASE,
    METASTORE_USER,
    POSTGRES_DATABASE,
    POSTGRES_USER,
    Topology,
)

SERVER_USER = "postgres"  # PostgreSQL refuses to run as root: as root, the server runs as this (Debian's) user


class ClusterError(RuntimeError):
    """A part of the cluster cannot start or stop; the message says which and why."""


def binaries() -> Path:
    """The directory of initdb / pg_ctl: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if installed:
        return Path(installed[-1]).parent
    raise ClusterError("postgres: PostgreSQL's server is not installed: run `make cluster` (it installs Debian's "
                       "postgresql) or apt-get install postgresql")


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", SERVER_USER, "--", *command]


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(_as_server_user(command), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ClusterError(f"postgres: {what} failed: {last[0]}")


def data_dir(top: Topology) -> Path:
    """The server's data directory: `_cluster/postgres`. As root, when Debian's `postgres` user cannot reach it
    (a parent readable by root only), the data lives under /var/lib/postgresql/lakehouse/ and `_cluster/postgres`
    is a link to it."""
    link = top.postgres_data
    if link.is_symlink() or os.geteuid() != 0:
        return link.resolve()
    top.home.mkdir(parents=True, exist_ok=True)
    reach = subprocess.run(_as_server_user(["test", "-x", str(top.home)]), capture_output=True)
    if reach.returncode == 0 or (link / "PG_VERSION").exists():
        return link

    # named by this home's secrets: a home made again (new passwords) never meets an older home's data
    made_for = f"{top.home}\0{top.secrets()['postgres_password']}"
    elsewhere = Path("/var/lib/postgresql/lakehouse") / hashlib.sha1(made_for.encode()).hexdigest()[:16]
    elsewhere.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    return elsewhere


def server_log(top: Topology) -> Path:
    return data_dir(top) / "server.log"


def initialize(top: Topology) -> bool:
    """Make the data directory once (UTF-8, superuser password from secrets.json); True when made now."""
    data = data_dir(top)
    if (data / "PG_VERSION").exists():
        return False
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    _own(data)
    password_file = data.parent / f".{data.name}-pwfile"
    password_file.write_text(top.secrets()["postgres_password"] + "\n")
    password_file.chmod(0o600)
    _own(password_file)
    try:
        _run([str(binaries() / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8", "--locale=C",
              "--auth-local=reject", "--auth-host=scram-sha-256", f"--pwfile={password_file}"], "initdb")
    finally:
        password_file.unlink(missing_ok=True)
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(f"\n# lakehouse cluster\nlisten_addresses = '{HOST}'\n"
                   "unix_socket_directories = ''\nmax_connections = 200\n")
    return True


def start(top: Topology) -> None:
    log, link = server_log(top), top.logs / "postgres.log"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to(log)
    _run([str(binaries() / "pg_ctl"), "-D", str(data_dir(top)), "-l", str(log), "-o", f"-p {top.ports.postgres}",
          "-w", "-t", "60", "start"],
         f"starting the server (log {link})")


def stop(top: Topology) -> bool:
    """Stop the server (fast shutdown: sessions end, data is flushed); False when it was not running."""
    if not running(top):
        return False
    _run([str(binaries() / "pg_ctl"), "-D", str(data_dir(top)), "-m", "fast", "-w", "-t", "60", "stop"],
         "stopping the server")
    return True


def running(top: Topology) -> bool:
    """The server of this data directory runs (its postmaster.pid names a live process)."""
    try:
        pid = int((data_dir(top) / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, IndexError, ProcessLookupError, PermissionError):
        return False
    return True


def connect(top: Topology, user: str = "postgres", database: str = "postgres"):
    import psycopg2

    keys = top.secrets()
    password = keys["postgres_password"] if user == "postgres" else keys["airflow_db_password"]
    return psycopg2.connect(host=HOST, port=top.ports.postgres, user=user, password=password, dbname=database,
                            connect_timeout=3)


def answers(top: Topology) -> bool:
    try:
        connect(top).close()
    except Exception:  # psycopg2.OperationalError, or psycopg2 missing: not answering either way
        return False
    return True


def ensure_database(top: Topology) -> None:
    """Airflow's user and database, and the catalog's (each owned by its user, so that it may create tables in
    `public`)."""
    keys = top.secrets()
    conn = connect(top)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for user, password, database in ((POSTGRES_USER, keys["airflow_db_password"], POSTGRES_DATABASE),
                                             (METASTORE_USER, keys["metastore_db_password"], METASTORE_DATABASE)):
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE ROLE {user} LOGIN PASSWORD %s", (password,))
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE DATABASE {database} OWNER {user} ENCODING 'UTF8' TEMPLATE template0")
            cur.execute(AIRFLOW_IDLE_TRANSACTIONS.format(user=POSTGRES_USER))
    finally:
        conn.close()


# A scheduler killed inside a transaction (its dag run rows locked FOR UPDATE) leaves the session open while the
# LocalExecutor workers it forked live on, holding its connection: every later scheduler skips the locked run, for
# good (seen: a backfill never scheduled again after its scheduler's SIGKILL). The server ends such a session after
# two minutes idle in its transaction; no Airflow component waits that long between a query and its commit.
AIRFLOW_IDLE_TRANSACTIONS = "ALTER ROLE {user} SET idle_in_transaction_session_timeout = '2min'"
