"""The Debezium connectors: one per logical database of the registry's `cdc:` sources, named `lakehouse-<database>`,
registered through the Connect worker's REST API (`PUT /connectors/<name>/config`, only when its configuration
differs: a second `lakehouse cdc up` changes nothing), its status read, its failed tasks restarted, made to take a
new snapshot (a full refresh of a chain whose topic lost changes to retention), and, for `lakehouse cdc down
--purge`, stopped, its offsets deleted and itself deleted.

Its configuration, and why:

- `plugin.name=pgoutput`: PostgreSQL's own logical decoding plugin, no extension to install.
- `slot.name=lakehouse_<database>` and `publication.name=lakehouse_<database>` with
  `publication.autocreate.mode=disabled`: the product makes the publication (FOR TABLE exactly the registry's
  tables, include/cdc/slots.py) before it registers the connector, so that Debezium needs no ownership of the
  tables; Debezium makes the slot at its first start and reads it from then on.
- `topic.prefix=<database>` and `table.include.list`: the topics `<database>.<schema>.<table>` the registry's
  sources read (`CdcTable.topic`).
- `snapshot.mode=initial`: the tables' rows first (`op: r`), then every change from the slot, with no gap.
- `decimal.handling.mode=double`, `time.precision.mode=connect`: numbers and instants as JSON numbers
  (`amount` a double, `updated_at` epoch milliseconds) that Spark reads without Connect's schemas.
- `tombstones.on.delete=true`: a delete is followed by a message with the key and a null value (compaction).
- `topic.creation.default.replication.factor=1`, `...partitions=1`: the worker creates each topic before its first
  message (the broker creates none by itself); one partition keeps a table's changes in commit order.

The slot's confirmed position moves with the captured tables' changes (Connect commits the offsets of what it wrote,
then Debezium confirms their LSN): while they are quiet and other databases of the same server write, its lag grows
(seen: 5.7 MB after another database's inserts, back to 60 kB at the next captured change; heartbeats,
`heartbeat.interval.ms`, did not move it: with pgoutput on PostgreSQL 15 the slot receives nothing for other
databases' transactions). Debezium's remedy, `heartbeat.action.query` writing to a captured table, needs a table of
the product's in the database, which a team's database does not get: `lakehouse health` names a lag that grows.
"""

from __future__ import annotations

import logging
import time

from include.addresses import PostgresAddress
from include.cdc.connect import rest
from include.cdc.database import CdcError
from include.cdc.slots import publication_name, slot_name
from include.registry import SourceSpec

log = logging.getLogger(__name__)

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"


def connector_name(database: str) -> str:
    return f"lakehouse-{database}"


def connector_config(database: PostgresAddress, logical: str, sources: list[SourceSpec]) -> dict[str, str]:
    """The connector of the logical database `logical`, reading `database` (see the module's docstring)."""
    return {
        "connector.class": CONNECTOR_CLASS, "tasks.max": "1",
        "database.hostname": database.host, "database.port": str(database.port), "database.user": database.user,
        "database.password": database.password, "database.dbname": database.database,
        "plugin.name": "pgoutput", "slot.name": slot_name(logical), "publication.name": publication_name(logical),
        "publication.autocreate.mode": "disabled", "topic.prefix": logical,
        "table.include.list": ",".join(sorted({s.cdc.table for s in sources})),
        "snapshot.mode": "initial", "decimal.handling.mode": "double", "time.precision.mode": "connect",
        "tombstones.on.delete": "true",
        "topic.creation.default.replication.factor": "1", "topic.creation.default.partitions": "1",
    }


def register(url: str, name: str, config: dict[str, str]) -> str:
    """Put the connector's configuration unless it is already that; `created`, `updated` or `unchanged`."""
    status, current = rest(url, "GET", f"/connectors/{name}/config")
    if status == 200 and current == {**config, "name": name}:  # the worker's answer names it too
        return "unchanged"
    status, answer = rest(url, "PUT", f"/connectors/{name}/config", config)
    if status not in (200, 201):
        raise CdcError(f"connector {name}: the Connect worker at {url} refused its configuration (HTTP {status}): "
                       f"{_message(answer)}")
    log.info("connector %s %s", name, "created" if status == 201 else "updated")
    return "created" if status == 201 else "updated"


def _message(answer: dict | list) -> str:
    text = answer.get("message", str(answer)) if isinstance(answer, dict) else str(answer)
    return " ".join(str(text).split())[:400]


def connectors(url: str) -> list[str]:
    """The connectors registered on the worker; CdcError when it does not say (e.g. still starting)."""
    status, answer = rest(url, "GET", "/connectors")
    if status != 200 or not isinstance(answer, list):
        raise CdcError(f"the Kafka Connect worker at {url} did not list its connectors (HTTP {status}): "
                       f"{_message(answer)}")
    return sorted(answer)


def connector_status(url: str, name: str) -> dict | None:
    """`state` (RUNNING, PAUSED, STOPPED, FAILED, UNASSIGNED, RESTARTING), `tasks` (each task's state), `trace` (the
    deepest cause of a failed task's or connector's error, in a line), or None when no such connector is
    registered."""
    status, answer = rest(url, "GET", f"/connectors/{name}/status")
    if status == 404:
        return None
    if status != 200 or not isinstance(answer, dict):
        raise CdcError(f"connector {name}: status not read from {url} (HTTP {status}): {_message(answer)}")
    tasks = answer.get("tasks") or []
    traces = [part.get("trace") for part in [answer.get("connector") or {}, *tasks] if part.get("trace")]
    return {"state": (answer.get("connector") or {}).get("state"), "tasks": [t.get("state") for t in tasks],
            "trace": _cause(traces[0]) if traces else None}


def _cause(trace: str) -> str:
    """A Java stack trace's deepest cause, in a line (Debezium wraps the reason: "This connector will be stopped")."""
    lines = [line.strip() for line in trace.strip().splitlines()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    return (causes or lines or ["no trace"])[-1][:400]


def failed(state: dict | None) -> bool:
    return bool(state) and (state["state"] == "FAILED" or "FAILED" in state["tasks"])


def wait_running(url: str, name: str, timeout: float = 90.0) -> dict:
    """Wait until the connector and its task run; CdcError with the failure's first line when one fails first."""
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = connector_status(url, name)
        if failed(state):
            raise CdcError(f"connector {name} failed: {state['trace'] or 'no trace'} (GET {url}/connectors/{name}/"
                           "status; the worker's log)")
        if state and state["state"] == "RUNNING" and state["tasks"] and set(state["tasks"]) == {"RUNNING"}:
            return state
        time.sleep(0.5)
    raise CdcError(f"connector {name} did not run within {timeout:.0f} s (last status: {state})")


def restart_failed(url: str, name: str) -> bool:
    """Restart the connector's failed parts (`POST .../restart?includeTasks=true&onlyFailed=true`); True if asked."""
    status, answer = rest(url, "POST", f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true")
    if status not in (200, 202, 204):
        raise CdcError(f"connector {name}: restart refused by {url} (HTTP {status}): {_message(answer)}")
    deadline = time.monotonic() + 15.0  # until the worker says so: a status read at once may still say FAILED
    while failed(connector_status(url, name)) and time.monotonic() < deadline:
        time.sleep(0.5)
    log.info("connector %s: failed parts restarted", name)
    return True


def remove(url: str, name: str, timeout: float = 60.0) -> bool:
    """Stop the connector, delete its source offsets (a connector made again snapshots afresh, never resumes from a
    position of a slot that is gone) and delete it; False when none was registered."""
    if connector_status(url, name) is None:
        return False
    _forget_offsets(url, name, timeout)
    _expect(url, name, "DELETE", f"/connectors/{name}")
    log.info("connector %s deleted with its offsets", name)
    return True


def snapshot_again(url: str, name: str, timeout: float = 60.0) -> None:
    """Stop the connector, delete its source offsets and resume it: with no offsets, `snapshot.mode=initial` reads
    its tables again (`op: r`), then streams from its replication slot, which kept every change since the position
    it confirmed last (nothing is missed; a change also in the snapshot is delivered twice, and applied once)."""
    if connector_status(url, name) is None:
        raise CdcError(f"connector {name} is not registered on {url}: `lakehouse cdc up` registers it")
    _forget_offsets(url, name, timeout)
    _expect(url, name, "PUT", f"/connectors/{name}/resume")
    wait_running(url, name, timeout)
    log.info("connector %s: offsets deleted, a new snapshot under way", name)


def _forget_offsets(url: str, name: str, timeout: float) -> None:
    """Stop the connector (Connect's STOPPED: its tasks shut down, its configuration kept) and delete its offsets."""
    _expect(url, name, "PUT", f"/connectors/{name}/stop")
    deadline = time.monotonic() + timeout
    while (state := connector_status(url, name)) and state["state"] != "STOPPED" and time.monotonic() < deadline:
        time.sleep(0.5)
    _expect(url, name, "DELETE", f"/connectors/{name}/offsets")


def _expect(url: str, name: str, method: str, path: str) -> None:
    status, answer = rest(url, method, path)
    if status not in (200, 202, 204):
        raise CdcError(f"connector {name}: {method} {path} refused by {url} (HTTP {status}): {_message(answer)}")
