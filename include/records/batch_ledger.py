"""The batch ledger `_ops/batch_ledger`: per job, query and micro-batch, the Delta version of each table the
job writes once the batch has committed, and the Airflow run that ran it. It pairs a checkpoint's batch
with its tables' versions, which `lakehouse checkpoint rollback --to-batch B` restores together.

A batch replayed after a crash writes nothing new and records its versions again (the same ones, or later
ones when maintenance committed in between: the same rows); the first record of a batch counts. After a
rollback the writer records under a new generation of its app id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime

import pyarrow.compute as pc

from include.records import ops_tables
from include.settings import Settings
from include.storage import delta as delta_store

LEDGER_TABLE = "batch_ledger"
LEDGER_SCHEMA: dict[str, str] = {
    "job": "string",
    "app_id": "string",  # the writer's idempotency key: <job>:<query id>[:g<rollback generation>]
    "batch_id": "long",
    "table": "string",
    "version": "long",  # the table's Delta version after the batch committed
    "airflow_run_id": "string",  # AIRFLOW_CTX_DAG_RUN_ID of the task that ran the job, if any
    "recorded_at": "timestamp",
    "rows_written": "long",  # rows the batch added to the table (0 for a replay; added later: null in older rows)
}


def record(settings: Settings, job_id: str, app_id: str, batch_id: int, versions: Mapping[str, int],
           written: Mapping[str, int]) -> None:
    """Record `versions` ({table: its Delta version holding the batch}) as the state after `batch_id`, and the rows
    it wrote into each (`written`: {table: rows}, a table missing from it none)."""
    now = datetime.now(UTC)
    run_id = os.environ.get("AIRFLOW_CTX_DAG_RUN_ID", "")
    rows = [{"job": job_id, "app_id": app_id, "batch_id": batch_id, "table": table, "version": version,
             "airflow_run_id": run_id, "recorded_at": now, "rows_written": written.get(table, 0)}
            for table, version in versions.items()]
    ops_tables.append(settings, LEDGER_TABLE, LEDGER_SCHEMA, rows)


def rows_written(settings: Settings) -> dict[tuple[str, str], int]:
    """{(job, table): rows} its recorded batches wrote (a batch recorded again after a replay counts once)."""
    path = settings.layout.ops_table(LEDGER_TABLE)
    if not delta_store.table_exists(path):
        return {}
    table = delta_store.read_table(path)
    if "rows_written" not in table.column_names:  # a ledger from before the column, not appended to since
        return {}
    totals: dict[tuple[str, str], int] = {}
    seen = set()
    columns = (table[c].to_pylist() for c in ("job", "app_id", "batch_id", "table", "rows_written"))
    for job, app_id, batch_id, name, rows in zip(*columns, strict=True):
        if (job, app_id, batch_id, name) not in seen:
            seen.add((job, app_id, batch_id, name))
            totals[(job, name)] = totals.get((job, name), 0) + (rows or 0)
    return totals


def recorded(settings: Settings, job_id: str, app_id: str, batch_id: int) -> bool:
    """The writer `app_id` (this generation exactly) recorded `batch_id` of `job_id`: its writes are all done, so a
    replay of that batch under the same writer writes nothing again."""
    path = settings.layout.ops_table(LEDGER_TABLE)
    if not delta_store.table_exists(path):
        return False
    table = delta_store.read_table(path)
    mask = pc.and_(pc.and_(pc.equal(table["job"], job_id), pc.equal(table["app_id"], app_id)),
                   pc.equal(table["batch_id"], batch_id))
    return table.filter(mask).num_rows > 0


def versions_after(settings: Settings, job_id: str, app_id: str, batch_id: int) -> dict[str, int]:
    """{table: version} recorded after `batch_id` by the writer `app_id`, or, for a batch from before a
    rollback, by the generation before it (empty when the ledger has no such batch)."""
    path = settings.layout.ops_table(LEDGER_TABLE)
    if not delta_store.table_exists(path):
        return {}
    table = delta_store.read_table(path)
    table = table.filter(pc.and_(pc.equal(table["job"], job_id), pc.equal(table["batch_id"], batch_id)))
    rows = sorted(table.to_pylist(), key=lambda r: r["recorded_at"])
    base, _, generation = app_id.partition(":g")
    for generation_number in range(int(generation or 0), -1, -1):
        writer = f"{base}:g{generation_number}" if generation_number else base
        versions: dict[str, int] = {}
        for row in (r for r in rows if r["app_id"] == writer):
            versions.setdefault(row["table"], row["version"])
        if versions:
            return versions
    return {}
