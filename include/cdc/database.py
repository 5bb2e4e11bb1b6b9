"""The database whose changes are captured: a team's own (`LAKEHOUSE_CDC_DATABASE_URL`, used as it is), or the local
one the product starts when that is unset and none answers (Debian's PostgreSQL server, include/daemons/postgres.py,
its data under `<local>/_cdc/postgres`, on 127.0.0.1:`LAKEHOUSE_CDC_POSTGRES_PORT`, with logical decoding on, the
demo database `shop` (shop.sql) owned by the role `lakehouse`, which may replicate).

On either, the product checks before it creates anything: logical decoding on (`wal_level = logical`, slots and WAL
senders allowed), the user allowed to replicate, each table the registry's `cdc:` sources name there with exactly
the registry's keys as its primary key; each refusal is one line naming what to change. On a team's database it
creates no table: only its publication (:mod:`include.cdc.slots`) and the replication slot Debezium makes.
psycopg2 is imported inside functions: the preflight imports this module (:func:`check_source`)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from include.addresses import PostgresAddress, postgres_address
from include.daemons import port_taken
from include.daemons.postgres import HOST, LocalPostgres, PostgresError
from include.registry import SourceSpec
from include.settings import Settings
from include.storage.files import kept_secrets

log = logging.getLogger(__name__)

LOCAL_DATABASE = "shop"  # the demo database of the local server (shop.sql)
LOCAL_USER = "lakehouse"  # its owner, the user Debezium connects as (LOGIN REPLICATION)
SHOP_SCHEMA = Path(__file__).with_name("shop.sql")
# logical decoding (pgoutput), a slot and a WAL sender per connector; a small server
CONFIGURATION = ("# lakehouse CDC\nwal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n"
                 "max_connections = 50\n")
URL_SETTING = "LAKEHOUSE_CDC_DATABASE_URL"


class CdcError(RuntimeError):
    """A part of the CDC chain cannot be started or reached; the message is one line saying why."""


class CdcRefused(ValueError):
    """The database, or the registry, is not what the capture needs; the message is one line naming what to change
    (a bad input: exit code 2)."""


def _secrets(settings: Settings) -> dict[str, str]:
    """The local database's passwords (its superuser's, the `lakehouse` role's), made once, kept owner-only."""
    return kept_secrets(settings.layout.cdc / "secrets.json", {"postgres_password": lambda: secrets.token_urlsafe(18),
                                                                "lakehouse_password": lambda: secrets.token_urlsafe(18)})


def local_server(settings: Settings) -> LocalPostgres:
    return LocalPostgres("cdc database", settings.layout.cdc / "postgres", settings.cdc_postgres_port,
                         lambda: _secrets(settings)["postgres_password"])


def is_local(settings: Settings) -> bool:
    """The captured database is the local one (LAKEHOUSE_CDC_DATABASE_URL unset)."""
    return not settings.cdc_database_url


def address(settings: Settings) -> PostgresAddress:
    """The captured database: LAKEHOUSE_CDC_DATABASE_URL's, else the local `shop` (as its owner, `lakehouse`)."""
    if settings.cdc_database_url:
        return postgres_address(settings.cdc_database_url, URL_SETTING)
    return PostgresAddress(HOST, settings.cdc_postgres_port, LOCAL_DATABASE, LOCAL_USER,
                           _secrets(settings)["lakehouse_password"])


def connect(database: PostgresAddress, timeout: int = 3):
    """A psycopg2 connection (autocommit) to `database`."""
    import psycopg2

    conn = psycopg2.connect(host=database.host, port=database.port, user=database.user, password=database.password,
                            dbname=database.database, connect_timeout=timeout)
    conn.autocommit = True
    return conn


@contextmanager
def cursor(database: PostgresAddress, what: str) -> Iterator:
    """A cursor on `database` (autocommit), closed after; a statement's failure is a CdcError naming `what` it was
    for, the database and the server's reason, in one line."""
    import psycopg2

    try:
        conn = connect(database)
        try:
            with conn.cursor() as cur:
                yield cur
        finally:
            conn.close()
    except psycopg2.Error as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CdcError(f"{what} in {database.shown}: {reason}") from None


def why_not_answering(database: PostgresAddress) -> str | None:
    """None when `database` accepts a connection, else psycopg2's reason in one line."""
    import psycopg2

    try:
        connect(database).close()
    except psycopg2.Error as exc:
        return (str(exc).strip().splitlines() or ["no reason given"])[0]
    return None


def ensure_local(settings: Settings) -> tuple[bool, str]:
    """The local database, started unless it answers (its data made once: logical decoding, the `lakehouse` role, the
    `shop` database and its tables); nothing when LAKEHOUSE_CDC_DATABASE_URL names another. (started now, a line)."""
    if not is_local(settings):
        return False, f"the CDC database is {address(settings).shown} ({URL_SETTING})"
    server, where = local_server(settings), f"{HOST}:{settings.cdc_postgres_port}"
    started = not server.running()
    if started:
        if port_taken(HOST, settings.cdc_postgres_port):
            raise CdcError(f"port {settings.cdc_postgres_port} on {HOST} is taken by another program: free it, or set "
                           f"LAKEHOUSE_CDC_POSTGRES_PORT to another port (or {URL_SETTING} to a database to use)")
        try:
            server.initialize(CONFIGURATION)
            server.start(f"starting the server (log {server.log})")
        except PostgresError as exc:
            raise CdcError(str(exc)) from None
    _ensure_shop(settings, server)
    return started, (f"local CDC database {'started' if started else 'runs'} at {where} (database {LOCAL_DATABASE}, "
                     f"data {server.link})")


def _ensure_shop(settings: Settings, server: LocalPostgres) -> None:
    """The `lakehouse` role (LOGIN REPLICATION), the `shop` database it owns, and shop.sql's tables (idempotent)."""
    server.ensure_owned_database(LOCAL_USER, _secrets(settings)["lakehouse_password"], LOCAL_DATABASE,
                                 replication=True)
    with cursor(address(settings), "creating the demo's tables (include/cdc/shop.sql)") as cur:
        cur.execute(SHOP_SCHEMA.read_text())


def stop_local(settings: Settings) -> str | None:
    """Stop the local database when it runs (a line saying so), else None."""
    server = local_server(settings)
    try:
        return f"local CDC database stopped ({HOST}:{settings.cdc_postgres_port})" if server.stop() else None
    except PostgresError as exc:
        raise CdcError(str(exc)) from None


def server_problems(cur, database: PostgresAddress) -> list[str]:
    """What keeps the server from logical decoding for this user: a line each."""
    cur.execute("SELECT name, setting FROM pg_settings WHERE name IN "
                "('wal_level', 'max_replication_slots', 'max_wal_senders')")
    found = dict(cur.fetchall())
    problems = []
    if found.get("wal_level") != "logical":
        problems.append(f"the CDC database {database.shown} has wal_level = {found.get('wal_level')}, not logical: set "
                        "`wal_level = logical` in its postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and "
                        "restart it")
    for name in ("max_replication_slots", "max_wal_senders"):
        if int(found.get(name) or 0) < 1:
            problems.append(f"the CDC database {database.shown} has {name} = {found.get(name)}: set `{name} = 10` in "
                            "its postgresql.conf and restart it")
    cur.execute("SELECT r.rolreplication OR r.rolsuper OR EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g "
                "ON g.oid = m.roleid WHERE m.member = r.oid AND g.rolname = 'rds_replication') "  # Amazon RDS's grant
                "FROM pg_roles r WHERE r.rolname = current_user")
    if not cur.fetchone()[0]:
        problems.append(f"the CDC database's user {database.user!r} may not replicate: ALTER ROLE {database.user} "
                        f"REPLICATION (or give {URL_SETTING} a user that may)")
    return problems


def table_problem(cur, database: PostgresAddress, source: SourceSpec) -> str | None:
    """Why the table `source` captures does not fit the registry: missing, or its primary key is not the keys."""
    table, keys = source.cdc.table, source.cdc.keys
    schema, name = table.split(".")
    cur.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text))", (schema, name))
    if cur.fetchone()[0] is None:
        return (f"source {source.name!r}: table {table} does not exist in {database.shown}: create it there, or "
                "correct the source's `cdc.table` in the registry")
    cur.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = format('%%I.%%I', %s::text, %s::text)::regclass "
                "AND i.indisprimary ORDER BY array_position(i.indkey, a.attnum)", (schema, name))
    primary = [row[0] for row in cur.fetchall()]
    if not primary:
        return (f"source {source.name!r}: table {table} in {database.shown} has no primary key; the registry's keys "
                f"are ({', '.join(keys)}): give the table that primary key")
    if set(primary) != set(keys):
        return (f"source {source.name!r}: the primary key of {table} in {database.shown} is ({', '.join(primary)}), "
                f"not the registry's keys ({', '.join(keys)}): correct the source's `cdc.keys` in the registry")
    return None


def refuse_unless_capturable(settings: Settings, sources: Iterable[SourceSpec]) -> None:
    """CdcRefused naming, in one line, every problem of the database and of the sources' tables (before anything is
    created); CdcError when the database does not answer."""
    database = address(settings)
    reason = why_not_answering(database)
    if reason is not None:
        raise CdcError(f"the CDC database does not answer at {database.shown}: {reason}")
    with cursor(database, "checking logical decoding and the registry's tables") as cur:
        problems = server_problems(cur, database)
        problems += [p for p in (table_problem(cur, database, s) for s in sources) if p]
    if problems:
        raise CdcRefused("; ".join(problems))


def check_source(settings: Settings, source: SourceSpec) -> str | None:
    """The preflight's check of a job's `cdc:` source: the one line of what keeps its database from capturing it
    (logical decoding off, a user that may not replicate, its table missing or keyed otherwise), or None; None too
    when the database does not answer (the job may still read what its topic holds) or `source` is no CDC source."""
    import psycopg2

    if source.cdc is None or (is_local(settings) and not (settings.layout.cdc / "secrets.json").exists()):
        return None  # no CDC source, or no local database was ever made here
    try:
        database = address(settings)
        conn = connect(database)
    except (psycopg2.Error, ValueError):
        return None
    try:
        with conn.cursor() as cur:
            problems = server_problems(cur, database)
            return problems[0] if problems else table_problem(cur, database, source)
    finally:
        conn.close()
