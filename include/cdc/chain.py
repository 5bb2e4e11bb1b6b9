"""`lakehouse cdc up | down | status`: the change data capture chain, database -> Debezium on a Kafka Connect worker ->
the product's broker, brought up in order, each part waited for, and taken down again.

`up` (idempotent: a second one changes nothing): the local database when `LAKEHOUSE_CDC_DATABASE_URL` is unset and
none answers; the checks of the database and of every table the registry's `cdc:` sources name (a refusal: one
line, nothing created); the broker must answer (`lakehouse kafka up` starts it: this command does not); the Connect
worker; per logical database, its publication, its tables' topics (one partition each: a table's changes in commit
order) and its connector, waited for until its task runs.

`down` stops the worker and the local database; the replication slots stay (a line says what each one holds while
no connector reads it). `down --purge` first deletes the connectors with their offsets, then drops their slots and
publications: a later `up` snapshots the tables afresh.

`snapshot` (a full refresh of a chain whose topics lost changes to retention, include/checkpoints/cdc_refresh.py) has a
logical database's connector read its tables again and waits until the snapshot is on their topics.
"""

from __future__ import annotations

import logging

from include.cdc import connect, connectors, database, slots
from include.cdc.capture import partition_ends, wait_snapshot_read
from include.cdc.database import CdcError
from include.kafka.produce import ensure_topic
from include.registry import Registry, SourceSpec
from include.settings import Settings

log = logging.getLogger(__name__)


def up(settings: Settings, registry: Registry, bootstrap: str) -> list[str]:
    """Bring the chain up; a line per part (what was started, created or found as it was)."""
    captured = registry.cdc_sources()
    lines = [database.ensure_local(settings)[1]]
    sources = [s for tables in captured.values() for s in tables]
    if sources:
        database.refuse_unless_capturable(settings, sources)
    lines.append(connect.up(settings, bootstrap)[1])
    for logical, tables in captured.items():
        lines += _connector_up(settings, bootstrap, logical, tables)
    if not captured:
        lines.append(f"no `cdc:` source in the registry ({settings.registry_path}): no connector to register")
    return lines


def _connector_up(settings: Settings, bootstrap: str, logical: str, tables: list[SourceSpec]) -> list[str]:
    """One logical database's publication, topics and connector, running; its lines."""
    address, url = database.address(settings), settings.connect_url
    with database.cursor(address, f"publication {slots.publication_name(logical)} (its tables' owner may make "
                                  "it)") as cur:
        made = slots.ensure_publication(cur, logical, tables)
        slot_gone = slots.slot_state(cur, slots.slot_name(logical)) is None
    for source in tables:  # before the first change: a job may start on a table nothing has changed yet
        ensure_topic(bootstrap, source.cdc.topic, 1)
    name = connectors.connector_name(logical)
    registered = connectors.connector_status(url, name) is not None
    done = connectors.register(url, name, connectors.connector_config(address, logical, tables))
    lines = []
    if registered and slot_gone:  # its offsets name a position in a slot dropped behind its back: read it all again
        connectors.snapshot_again(url, name)
        lines.append(f"replication slot {slots.slot_name(logical)} of connector {name} was dropped while the "
                     "connector kept its position: the changes since are lost to it, so it takes a new snapshot; "
                     "rows deleted meanwhile stay in the tables until `lakehouse checkpoint full-refresh "
                     "<bronze job> --cascade` rebuilds them")
    elif connectors.failed(connectors.connector_status(url, name)):  # e.g. its publication was gone
        connectors.restart_failed(url, name)
        done += ", its failed task restarted"
    connectors.wait_running(url, name)
    return [*lines, f"connector {name} {done}, running (publication {slots.publication_name(logical)} {made}; "
                    f"topics {', '.join(sorted(s.cdc.topic for s in tables))})"]


def down(settings: Settings, registry: Registry, bootstrap: str, purge: bool = False) -> list[str]:
    """Take the chain down: with `purge`, the connectors (and their offsets), slots and publications first; then the
    worker and the local database."""
    lines = _purge(settings, bootstrap) if purge else _kept_slots(settings)
    lines.append(connect.down(settings))
    return lines + stop_local_database(settings)


def stop_local_database(settings: Settings) -> list[str]:
    """The local database stopped, when it is the one captured (a line); nothing for a team's."""
    if not database.is_local(settings):
        return []
    return [database.stop_local(settings) or "the local CDC database was not running"]


def _purge(settings: Settings, bootstrap: str) -> list[str]:
    """Every `lakehouse-*` connector deleted with its offsets (the worker started for it when it is down), then every
    `lakehouse_*` slot and publication of the database dropped."""
    if database.is_local(settings):
        database.ensure_local(settings)
    connect.up(settings, bootstrap)
    removed = [name for name in connectors.connectors(settings.connect_url) if name.startswith("lakehouse-")
               and connectors.remove(settings.connect_url, name)]
    address = database.address(settings)
    reason = database.why_not_answering(address)
    if reason is not None:
        raise CdcError(f"the CDC database does not answer at {address.shown}: {reason}; its slots were not dropped")
    with database.cursor(address, "dropping the product's slots and publications") as cur:
        logical = {name.removeprefix("lakehouse_") for name in slots.slots(cur) + slots.publications(cur)}
        dropped = [what for each in sorted(logical) for what in slots.drop(cur, each)]
    return [f"deleted connector(s): {', '.join(removed) or 'none'}", f"dropped: {', '.join(dropped) or 'nothing'}"]


def _kept_slots(settings: Settings) -> list[str]:
    """A line per replication slot of the product that `down` leaves behind."""
    address = database.address(settings)
    if database.why_not_answering(address) is not None:
        return []
    with database.cursor(address, "listing the product's slots") as cur:
        kept = slots.slots(cur)
    return [f"replication slot {slot} kept: it holds the database's WAL until a connector reads it again (`lakehouse "
            "cdc up`); `lakehouse cdc down --purge` drops it" for slot in kept]


def status(settings: Settings, registry: Registry) -> dict:
    """`database` (its DSN without the password), `local`, `database_up`, `connect_url`, `worker_up`, `up` (the
    database and the worker answer, every connector of the registry runs), and per connector its `database`,
    `tables`, `state`, `tasks`, `trace`, `slot`, `slot_active`, `slot_lag_bytes`."""
    address = database.address(settings)
    database_up = database.why_not_answering(address) is None
    worker_up = connect.answers(settings.connect_url)
    found = {}
    for logical, tables in registry.cdc_sources().items():
        name = connectors.connector_name(logical)
        state = connectors.connector_status(settings.connect_url, name) if worker_up else None
        found[name] = {"database": logical, "tables": sorted(s.cdc.table for s in tables),
                       "state": state["state"] if state else None, "tasks": state["tasks"] if state else [],
                       "trace": state["trace"] if state else None, "slot": slots.slot_name(logical),
                       **_slot(address, logical, database_up)}
    running = all(c["state"] == "RUNNING" and c["tasks"] and set(c["tasks"]) == {"RUNNING"} for c in found.values())
    return {"database": address.shown, "local": database.is_local(settings), "database_up": database_up,
            "connect_url": settings.connect_url, "worker_up": worker_up, "up": database_up and worker_up and running,
            "connectors": found}


def _slot(address, logical: str, database_up: bool) -> dict:
    state = None
    if database_up:
        with database.cursor(address, "reading the slot") as cur:
            state = slots.slot_state(cur, slots.slot_name(logical))
    return {"slot_exists": state is not None, "slot_active": state["active"] if state else None,
            "slot_lag_bytes": state["lag_bytes"] if state else None}


def render(info: dict) -> str:
    """`lakehouse cdc status` as text."""
    lines = [f"database: {info['database']} ({'local, ' if info['local'] else ''}"
             f"{'answers' if info['database_up'] else 'does not answer'})",
             f"Connect worker: {info['connect_url']} ({'answers' if info['worker_up'] else 'does not answer'})"]
    for name, each in info["connectors"].items():
        slot = (f"slot {each['slot']} {'active' if each['slot_active'] else 'INACTIVE'}, lag {each['slot_lag_bytes']} "
                "bytes" if each["slot_exists"] else f"slot {each['slot']} "
                + ("not made yet" if info["database_up"] else "unknown (the database does not answer)"))
        state = each["state"] or ("not registered" if info["worker_up"] else "unknown (the worker does not answer)")
        lines.append(f"connector {name}: {state}, tasks {', '.join(each['tasks']) or '-'}; "
                     f"{slot}; tables {', '.join(each['tables'])}" + (f"; {each['trace']}" if each["trace"] else ""))
    if not info["connectors"]:
        lines.append("no `cdc:` source in the registry: no connector")
    return "\n".join(lines)


def sources_of(registry: Registry, database_name: str) -> list[SourceSpec]:
    """The registry's `cdc:` sources of one logical database ([] when it has none)."""
    return registry.cdc_sources().get(database_name, [])


def snapshot(settings: Settings, registry: Registry, logical: str, bootstrap: str) -> str:
    """A new snapshot of the logical database's captured tables by its connector (its offsets deleted,
    :func:`include.cdc.connectors.snapshot_again`), waited for until each table holding rows has its last snapshot
    row on its topic; a line saying so."""
    sources = sources_of(registry, logical)
    if not sources:
        raise CdcError(f"no `cdc:` source of the logical database {logical!r} in the registry")
    topics = [s.cdc.topic for s in sources]
    with database.cursor(database.address(settings), "reading the captured tables") as cur:
        holding = []
        for source in sources:
            cur.execute(f"SELECT EXISTS (SELECT 1 FROM {slots.quoted(cur, source.cdc.table)})")
            if cur.fetchone()[0]:
                holding.append(source.cdc.topic)
    since = partition_ends(bootstrap, topics)
    name = connectors.connector_name(logical)
    connectors.snapshot_again(settings.connect_url, name)
    wait_snapshot_read(bootstrap, holding, since)
    return (f"connector {name}: a new snapshot of {', '.join(s.cdc.table for s in sources)} read onto "
            f"{', '.join(topics)}")
