"""The product's objects in the captured database: per logical database of the registry, its publication
`lakehouse_<database>` (FOR TABLE exactly the registry's tables of that database: made, then set again when the
registry gains or loses one) and its replication slot `lakehouse_<database>` (made by Debezium at the connector's
first start, `plugin.name=pgoutput`), both dropped by `lakehouse cdc down --purge`.

A slot keeps every WAL segment its reader has not confirmed: a slot whose connector is gone, or stopped, holds the
database's WAL, and its disk, without bound (PostgreSQL's `max_slot_wal_keep_size` is unlimited by default). Its lag
(`pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)`, in bytes) and whether a reader is attached (`active`)
are what `lakehouse cdc status` and `lakehouse health` show."""

from __future__ import annotations

import logging
import time

from include.registry import SourceSpec

log = logging.getLogger(__name__)


def publication_name(database: str) -> str:
    return f"lakehouse_{database}"


def slot_name(database: str) -> str:
    return f"lakehouse_{database}"


def quoted(cur, table: str) -> str:
    """`schema.table` quoted as an identifier of the server's."""
    from psycopg2 import sql

    return sql.Identifier(*table.split(".")).as_string(cur)


def ensure_publication(cur, database: str, sources: list[SourceSpec]) -> str:
    """The publication of `database`'s connector FOR TABLE exactly its sources' tables: created, or set again when the
    registry's tables changed; what was done, in a word (`created`, `updated`, `unchanged`)."""
    name, tables = publication_name(database), sorted({s.cdc.table for s in sources})
    listed = ", ".join(quoted(cur, t) for t in tables)
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
    if cur.fetchone() is None:
        cur.execute(f"CREATE PUBLICATION {name} FOR TABLE {listed}")
        log.info("created publication %s for %s", name, ", ".join(tables))
        return "created"
    cur.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s", (name,))
    if sorted(row[0] for row in cur.fetchall()) == tables:
        return "unchanged"
    cur.execute(f"ALTER PUBLICATION {name} SET TABLE {listed}")
    log.info("publication %s now for %s", name, ", ".join(tables))
    return "updated"


def publications(cur) -> list[str]:
    """The product's publications in the database (`lakehouse_*`)."""
    cur.execute("SELECT pubname FROM pg_publication WHERE pubname LIKE 'lakehouse\\_%%' ORDER BY pubname")
    return [row[0] for row in cur.fetchall()]


def slot_state(cur, slot: str) -> dict | None:
    """`active` (a reader is attached), `lag_bytes` (WAL the slot holds that its reader has not confirmed; None
    before the first confirmation) and `wal_status` of the slot, or None when it does not exist."""
    cur.execute("SELECT active, pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, wal_status "
                "FROM pg_replication_slots WHERE slot_name = %s", (slot,))
    row = cur.fetchone()
    return None if row is None else {"active": row[0], "lag_bytes": row[1], "wal_status": row[2]}


def slots(cur) -> list[str]:
    """The product's replication slots on the server (`lakehouse_*`)."""
    cur.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'lakehouse\\_%%' ORDER BY slot_name")
    return [row[0] for row in cur.fetchall()]


def drop(cur, database: str, timeout: float = 30.0) -> list[str]:
    """Drop `database`'s slot (once no reader is attached: its connector must be stopped first) and publication;
    what was dropped."""
    dropped, slot = [], slot_name(database)
    deadline = time.monotonic() + timeout
    while (state := slot_state(cur, slot)) is not None and state["active"] and time.monotonic() < deadline:
        time.sleep(0.5)  # the stopped task's replication connection closing
    if state is not None:
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))  # an active slot: an error naming its reader
        dropped.append(f"replication slot {slot}")
    name = publication_name(database)
    cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
    if cur.fetchone() is not None:
        cur.execute(f"DROP PUBLICATION {name}")
        dropped.append(f"publication {name}")
    for what in dropped:
        log.info("dropped %s", what)
    return dropped
