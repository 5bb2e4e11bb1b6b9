"""A PostgreSQL server the product runs on this machine from Debian's server binaries (`lakehouse cluster`'s Airflow
database, include/cluster/postgres.py; the local CDC database, include/cdc/database.py): a data directory of its
own under the lakehouse's state, made once with initdb, started and stopped with pg_ctl, listening on 127.0.0.1 only
(no Unix socket), password authentication over TCP. PostgreSQL refuses to run as root: as root, every server command
runs as Debian's `postgres` user. It imports nothing of the project."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "postgres"  # PostgreSQL refuses to run as root: as root, the server runs as this (Debian's) user
HOST = "127.0.0.1"
ELSEWHERE = Path("/var/lib/postgresql/lakehouse")  # data the server user cannot reach where it is named lives here


class PostgresError(RuntimeError):
    """A server cannot be made, started or stopped; the message is one line, `<server>: <what> failed: <why>`."""


def binaries(name: str = "postgres") -> Path:
    """The directory of initdb / pg_ctl: on PATH, else Debian's /usr/lib/postgresql/<version>/bin (the newest)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    installed = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if installed:
        return Path(installed[-1]).parent
    raise PostgresError(f"{name}: PostgreSQL's server is not installed: run `make cluster` (it installs Debian's "
                        "postgresql) or apt-get install postgresql")


def as_server_user(command: list[str]) -> list[str]:
    """`command` as the server's user: itself unless this process is root."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", SERVER_USER, "--", *command]


def _own(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


@dataclass(frozen=True)
class LocalPostgres:
    """One server: `name` (how its errors begin), `link` (where its data directory is named, under the lakehouse's
    state), its `port` on 127.0.0.1 and its superuser's (user `postgres`) password, read (or made) when first needed:
    `secret()`."""

    name: str
    link: Path
    port: int
    secret: Callable[[], str]

    @property
    def password(self) -> str:
        return self.secret()

    def _run(self, command: list[str], what: str) -> None:
        result = subprocess.run(as_server_user(command), capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise PostgresError(f"{self.name}: {what} failed: {last[0]}")

    def data_dir(self) -> Path:
        """The data directory: `link` itself. As root, when the server's user cannot reach it (a parent readable by
        root only), the data lives under /var/lib/postgresql/lakehouse/ and `link` is a symbolic link to it."""
        link = self.link
        if link.is_symlink() or os.geteuid() != 0:
            return link.resolve()
        link.parent.mkdir(parents=True, exist_ok=True)
        reach = subprocess.run(as_server_user(["test", "-x", str(link.parent)]), capture_output=True)
        if reach.returncode == 0 or (link / "PG_VERSION").exists():
            return link

        # named by its place and its password: a place made again (a new password) never meets an older one's data
        made_for = f"{link.parent}\0{self.password}"
        elsewhere = ELSEWHERE / hashlib.sha1(made_for.encode()).hexdigest()[:16]
        elsewhere.mkdir(parents=True, exist_ok=True)
        link.symlink_to(elsewhere, target_is_directory=True)
        return elsewhere

    @property
    def log(self) -> Path:
        """The server's own log (in its data directory: the server's user writes it)."""
        return self.data_dir() / "server.log"

    def initialize(self, configuration: str) -> bool:
        """Make the data directory once (UTF-8, locale C, the superuser's password), `configuration` appended to its
        postgresql.conf (after `listen_addresses` on 127.0.0.1 and no Unix socket); True when made now."""
        data = self.data_dir()
        if (data / "PG_VERSION").exists():
            return False
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)
        _own(data)
        password_file = data.parent / f".{data.name}-pwfile"
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        _own(password_file)
        try:
            self._run([str(binaries(self.name) / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8",
                       "--locale=C", "--auth-local=reject", "--auth-host=scram-sha-256", f"--pwfile={password_file}"],
                      "initdb")
        finally:
            password_file.unlink(missing_ok=True)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(f"\nlisten_addresses = '{HOST}'\nunix_socket_directories = ''\n{configuration}")
        return True

    def start(self, what: str = "starting the server") -> None:
        """pg_ctl start, waiting until it accepts connections (`what` names it in the error, with where its log is)."""
        self._run([str(binaries(self.name) / "pg_ctl"), "-D", str(self.data_dir()), "-l", str(self.log), "-o",
                   f"-p {self.port}", "-w", "-t", "60", "start"], what)

    def stop(self) -> bool:
        """Stop the server (fast shutdown: sessions end, data is flushed); False when it was not running."""
        if not self.running():
            return False
        self._run([str(binaries(self.name) / "pg_ctl"), "-D", str(self.data_dir()), "-m", "fast", "-w", "-t", "60",
                   "stop"], "stopping the server")
        return True

    def running(self) -> bool:
        """The server of this data directory runs (its postmaster.pid names a live process)."""
        try:
            pid = int((self.data_dir() / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, IndexError, ProcessLookupError, PermissionError):
            return False
        return True

    def connect(self, user: str = "postgres", password: str | None = None, database: str = "postgres"):
        """A psycopg2 connection to one of its databases (the superuser's unless another `user` is given)."""
        import psycopg2

        return psycopg2.connect(host=HOST, port=self.port, user=user,
                                password=self.password if password is None else password, dbname=database,
                                connect_timeout=3)

    def ensure_owned_database(self, user: str, password: str, database: str, replication: bool = False) -> None:
        """The role `user` (LOGIN, REPLICATION too when asked) and the database it owns (UTF-8), made unless they
        exist: it may create tables in `public`."""
        conn = self.connect()
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE ROLE {user} LOGIN{' REPLICATION' if replication else ''} PASSWORD %s",
                                (password,))
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE DATABASE {database} OWNER {user} ENCODING 'UTF8' TEMPLATE template0")
        finally:
            conn.close()

    def answers(self) -> bool:
        """It accepts the superuser's connection."""
        try:
            self.connect().close()
        except Exception:  # psycopg2.OperationalError, or psycopg2 missing: not answering either way
            return False
        return True
