"""Delta Lake through delta-rs (`deltalake`), where starting a JVM would be wrong: the operational tables
(`_ops/*`, small rows appended by Airflow callbacks, the quality runner and the job's listener), and
reads by the quality checks, `lakehouse summary`, health checks and the tests.

The data tables themselves are written by Spark's executors through delta-spark (`spark_jobs`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import TableNotFoundError

from include.registry.columns import COLUMN_TYPES

log = logging.getLogger(__name__)

def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a registry column type (include.registry.columns)."""
    column_type = COLUMN_TYPES[name]
    arrow = pa.type_for_alias(column_type.arrow)
    return pa.timestamp(arrow.unit, tz="UTC") if column_type.utc else arrow


def arrow_schema(columns: Mapping[str, str]) -> pa.Schema:
    """Arrow schema for a registry schema (column -> type name)."""
    return pa.schema([pa.field(name, arrow_type(ctype)) for name, ctype in columns.items()])


def table_exists(path: Path | str) -> bool:
    return DeltaTable.is_deltatable(str(path))


def ensure_table(path: Path | str, columns: Mapping[str, str], partition_by: Sequence[str] = (),
                 new_columns_at_end: bool = False) -> bool:
    """Create an empty (operational) Delta table with this schema unless one exists; an existing one must match
    (or, with `new_columns_at_end`, be its first columns: a later version of the project added the others; then
    True: a write must add them)."""
    schema = arrow_schema(columns)
    if table_exists(path):
        existing = pa.schema(DeltaTable(str(path)).schema().to_arrow())
        added_at_end = new_columns_at_end and existing.names == schema.names[:len(existing.names)]
        if existing.names != schema.names and not added_at_end:
            raise ValueError(
                f"Delta table {path} has columns {existing.names}, the registry declares {schema.names}; "
                "migrate or move the table before running this job"
            )
        return existing.names != schema.names
    Path(path).mkdir(parents=True, exist_ok=True)
    DeltaTable.create(str(path), schema, mode="ignore", partition_by=list(partition_by) or None)
    log.info("created Delta table %s", path)
    return False


def committed_batch(path: Path | str, app_id: str) -> int | None:
    """The last batch id `app_id` committed to the table (its Delta app transaction), or None."""
    try:
        return DeltaTable(str(path)).transaction_version(app_id)
    except TableNotFoundError:
        return None


def append_rows(path: Path | str, columns: Mapping[str, str], rows: Sequence[Mapping]) -> None:
    """Append plain rows to an operational table, creating it if needed (no idempotency key); columns the project
    added since the table was made are added to it (its older rows read null there)."""
    evolve = ensure_table(path, columns, new_columns_at_end=True)
    data = pa.Table.from_pylist([dict(r) for r in rows], schema=arrow_schema(columns))
    write_deltalake(str(path), data, mode="append", schema_mode="merge" if evolve else None,
                    commit_properties=CommitProperties(max_commit_retries=50))


def read_table(path: Path | str, version: int | None = None, columns: Sequence[str] | None = None) -> pa.Table:
    """A whole version (default: the latest) of a Delta table, optionally only some columns.

    Reads through delta-rs's own query engine: its pyarrow-dataset path aborts the interpreter
    at exit ("terminate called without an active exception") with pyarrow 26.
    """
    table = DeltaTable(str(path), version=version)
    schema = pa.schema(table.schema().to_arrow())
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    projection = ", ".join(f'"{c}"' for c in schema.names) if columns is not None else "*"
    reader = QueryBuilder().register("t", table).execute(f"SELECT {projection} FROM t")
    return pa.table(reader.read_all()).cast(schema)  # plain types, not string_view


def count_rows(path: Path | str, where: str | None = None) -> int:
    """Rows of the table's latest version (those matching the SQL condition `where`); 0 without a table."""
    if not table_exists(path):
        return 0
    if where is None:
        return DeltaTable(str(path)).count()
    reader = QueryBuilder().register("t", DeltaTable(str(path))).execute(f"SELECT count(*) AS n FROM t WHERE {where}")
    return int(pa.table(reader.read_all())["n"][0].as_py())


def commit_files(path: Path | str, version: int) -> list[dict]:
    """The `add` actions (path, size, partitionValues) of one commit that add rows (a compaction's
    rewritten files are not); rejects commits that remove rows."""
    log_file = Path(path) / "_delta_log" / f"{version:020d}.json"
    try:
        lines = log_file.read_text().splitlines()
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"Delta commit {version} of {path} is gone (log cleaned up?); the reading job must be reset"
        ) from exc
    adds = []
    for line in lines:
        action = json.loads(line)
        if "add" in action and action["add"].get("dataChange", True):  # not a compaction's rewritten rows
            adds.append(action["add"])
        elif "remove" in action and action["remove"].get("dataChange", True):
            raise ValueError(
                f"Delta table {path} version {version} removes data; streaming reads need an append-only table"
            )
    return adds


def latest_version(path: Path | str) -> int:
    return DeltaTable(str(path)).version()

