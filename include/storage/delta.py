"""Delta Lake without a JVM: the operational tables (`_ops/*`, small rows appended by Airflow callbacks, the quality
runner and the job's listener) written through delta-rs (`deltalake`), every table's versions, transactions and
commits; the rows of any table are read through include/storage/reader.py (`read_table`, `count_rows`), which reads
what delta-rs cannot (widened types, column mapping).

The data tables themselves are written by Spark's executors through delta-spark (`spark_jobs`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from include.registry.columns import column_type
from include.storage import reader
from include.storage.delta_open import Location, location, open_table, table_exists  # noqa: F401 - re-exported
from include.storage.paths import StoragePath, as_storage
from include.storage.reader import read_files, read_table  # noqa: F401 - the one reader of a table's rows

log = logging.getLogger(__name__)

COLUMN_MAPPING = "delta.columnMapping.mode"  # `name`: columns renamed and dropped in place
TYPE_WIDENING = "delta.enableTypeWidening"


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a registry column type (include.registry.columns)."""
    declared = column_type(name)
    if declared.params:
        return getattr(pa, declared.arrow)(*declared.params)
    arrow = pa.type_for_alias(declared.arrow)
    return pa.timestamp(arrow.unit, tz="UTC") if declared.utc else arrow


def arrow_schema(columns: Mapping[str, str]) -> pa.Schema:
    """Arrow schema for a registry schema (column -> type name)."""
    return pa.schema([pa.field(name, arrow_type(ctype)) for name, ctype in columns.items()])


def ensure_table(path: Location, columns: Mapping[str, str], partition_by: Sequence[str] = (),
                 new_columns_at_end: bool = False) -> bool:
    """Create an empty (operational) Delta table with this schema unless one exists; an existing one must match
    (or, with `new_columns_at_end`, be its first columns: a later version of the project added the others; then
    True: a write must add them)."""
    schema = arrow_schema(columns)
    if table_exists(path):
        existing = pa.schema(open_table(path).schema().to_arrow())
        added_at_end = new_columns_at_end and existing.names == schema.names[:len(existing.names)]
        if existing.names != schema.names and not added_at_end:
            raise ValueError(
                f"Delta table {path} has columns {existing.names}, the registry declares {schema.names}; "
                "migrate or move the table before running this job"
            )
        return existing.names != schema.names
    uri, options = location(path)
    if not options:  # a local table: delta-rs wants its directory
        os.makedirs(uri, exist_ok=True)
    try:
        DeltaTable.create(uri, schema, mode="ignore", partition_by=list(partition_by) or None,
                          storage_options=options or None)
    except CommitFailedError:
        # another writer made it meanwhile (two queries of one driver on their first batch): theirs is checked
        if not table_exists(path):
            raise
        return ensure_table(path, columns, partition_by, new_columns_at_end)
    log.info("created Delta table %s", path)
    return False


class TableHandles:
    """delta-rs handles on tables, each opened once and brought up to date on each later use.

    Opening a table replays its log from the last checkpoint (on object storage: a listing and a read per commit
    since, up to a hundred for a table delta-rs writes); an update reads only the commits since the handle's
    version. A table moved, restored from a copy or recreated under a handle is opened again: its version's commit
    file must still be there (one small request per use). So is a table checkpointed since the handle was opened
    (`_last_checkpoint` changed: one more small read per use): the handle's snapshot still names the commits before
    that checkpoint, which the log's retention then deletes (delta-rs re-reads them after a commit: a live driver's
    handle, opened when it started, failed its batch an hour later, the first soak with a 1-hour `_ops` history).
    """

    def __init__(self) -> None:
        self._tables: dict[str, tuple[DeltaTable, str | None]] = {}  # uri: (handle, _last_checkpoint when opened)

    def holds(self, path: Location) -> bool:
        return location(path)[0] in self._tables

    def latest(self, path: Location) -> DeltaTable:
        """The table at `path` at its latest version."""
        uri, options = location(path)
        log_dir = as_storage(path) / "_delta_log"
        table, opened_at = self._tables.pop(uri, (None, None))
        checkpoint = _last_checkpoint(log_dir)
        if table is not None and checkpoint != opened_at:
            table = None
        if table is not None:
            try:
                table.update_incremental()  # refuses a log older than the handle
            except DeltaError:
                table = None
        if table is not None and not (log_dir / f"{table.version():020d}.json").exists():
            table = None
        if table is None:  # TableNotFoundError when there is no table
            table = DeltaTable(uri, storage_options=options or None)
        self._tables[uri] = (table, checkpoint)
        return table


def _last_checkpoint(log_dir: StoragePath) -> str | None:
    """The table's `_last_checkpoint` hint (its latest checkpoint's version and size), or None before the first."""
    try:
        return (log_dir / "_last_checkpoint").read_text()
    except FileNotFoundError:
        return None


_appending = threading.local()  # this thread's TableHandles for append_rows


def committed_batch(path: Location, app_id: str) -> int | None:
    """The last batch id `app_id` committed to the table (its Delta app transaction), or None."""
    try:
        return open_table(path).transaction_version(app_id)
    except TableNotFoundError:
        return None


def batch_check(path: Location, app_id: str, handles: TableHandles | None = None) -> tuple[int | None, int]:
    """(the last batch `app_id` committed to the table, or None; the table version that answer was read at)."""
    table = handles.latest(path) if handles is not None else open_table(path)
    return table.transaction_version(app_id), table.version()


APPEND_ATTEMPTS = 5


def append_rows(path: Location, columns: Mapping[str, str], rows: Sequence[Mapping]) -> None:
    """Append plain rows to an operational table, creating it if needed (no idempotency key); columns the project
    added since the table was made are added to it (its older rows read null there). The table is opened (and its
    columns checked) once per thread: the listener and every query append on each micro-batch."""
    handles = getattr(_appending, "handles", None)
    if handles is None:
        handles = _appending.handles = TableHandles()
    table, evolve = None, False
    if handles.holds(path):
        try:
            table = handles.latest(path)
        except TableNotFoundError:  # gone since: made again below
            table = None
    if table is None or table.schema().to_arrow().names != list(columns):  # new, or the project added columns
        evolve = ensure_table(path, columns, new_columns_at_end=True)
        table = handles.latest(path)
    data = pa.Table.from_pylist([dict(r) for r in rows], schema=arrow_schema(columns))
    for attempt in range(APPEND_ATTEMPTS):
        try:
            write_deltalake(table, data, mode="append", schema_mode="merge" if evolve else None,
                            commit_properties=CommitProperties(max_commit_retries=50))
            return
        except CommitFailedError:
            # delta-rs fails an append when a concurrent commit removed files (the maintenance's retention or
            # compaction of an operational table): nothing was committed, so write it again on the new version
            if attempt == APPEND_ATTEMPTS - 1:
                raise
            log.info("append to %s met a concurrent removal; written again (attempt %d)", path, attempt + 2)
            table = handles.latest(path)


def sql_string(value: str) -> str:
    """`value` as a SQL string literal (for a `where` condition)."""
    return "'" + value.replace("'", "''") + "'"


def count_rows(path: Location, where: str | None = None) -> int:
    """Rows of the table's latest version (those matching the SQL condition `where`); 0 without a table."""
    if not table_exists(path):
        return 0
    return open_table(path).count() if where is None else reader.count_rows(path, where)  # the log's counts


def commit_actions(path: StoragePath, version: int) -> list[dict]:
    """The actions of one commit of the table, as its log file holds them (FileNotFoundError once it is cleaned up)."""
    return [json.loads(line) for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()]


def commit_files(path: StoragePath, version: int) -> list[dict]:
    """The `add` actions (path, size, partitionValues) of one commit that add rows (a compaction's
    rewritten files are not); rejects commits that remove rows."""
    try:
        actions = commit_actions(path, version)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"Delta commit {version} of {path} is gone (log cleaned up?); the reading job must be reset"
        ) from exc
    adds = []
    for action in actions:
        if "add" in action and action["add"].get("dataChange", True):  # not a compaction's rewritten rows
            adds.append(action["add"])
        elif "remove" in action and action["remove"].get("dataChange", True):
            raise ValueError(
                f"Delta table {path} version {version} removes data; streaming reads need an append-only table"
            )
    return adds


COMMIT_ORDER_MAX = 500  # commits read at most to decide whether a new reader may follow a table's commits from its start


def why_not_commit_order(path: StoragePath, max_commits: int = COMMIT_ORDER_MAX) -> str | None:
    """None when the table's commits, read from version 0, add exactly the rows of its latest version, once each,
    in its own schema: every commit still in its log, none removing a file or changing the schema after the first
    (at most `max_commits` read). Otherwise why not."""
    latest = latest_version(path)
    if latest == 0:  # its snapshot is its one commit (read in commit order, a first batch planned on an empty
        return "it has one version"  # table would be one without rows)
    if latest > max_commits:
        return f"it has {latest} commits (more than the {max_commits} read to decide)"
    for version in range(latest + 1):
        try:
            actions = {key for action in commit_actions(path, version) for key in action}
        except FileNotFoundError:
            return f"its commit {version} is no longer in its log"
        if "remove" in actions:
            return f"its commit {version} removed files (a compaction, an overwrite or a row change)"
        if version and "metaData" in actions:
            return f"its commit {version} changed its schema or properties"
    return None


def change_commits(path: StoragePath, since: int) -> dict[int, str | None]:
    """The commits from version `since` on that remove rows (an UPDATE, DELETE, RESTORE or overwrite; a compaction's
    rewrite is not one), each with its commitInfo's userMetadata (what tagged it, if anything)."""
    changes: dict[int, str | None] = {}
    for version in range(since, latest_version(path) + 1):
        actions = commit_actions(path, version)
        if any("remove" in a and a["remove"].get("dataChange", True) for a in actions):
            info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            changes[version] = info.get("userMetadata")
    return changes


def table_configuration(path: Location) -> dict[str, str]:
    """The table's properties (its latest metadata's configuration); {} when there is no table."""
    return dict(open_table(path).metadata().configuration) if table_exists(path) else {}


def column_mapped(path: Location) -> bool:
    """Whether the table has Delta's column mapping on (its columns renamed or dropped in place)."""
    return table_configuration(path).get(COLUMN_MAPPING, "none") != "none"


def evolved_in_place(path: Location) -> bool:
    """Whether the table has column mapping or type widening on: its columns may be renamed, dropped or widened."""
    configuration = table_configuration(path)
    return configuration.get(COLUMN_MAPPING, "none") != "none" or configuration.get(TYPE_WIDENING) == "true"


@dataclass(frozen=True)
class Commit:
    version: int
    timestamp: float  # epoch seconds, its commitInfo's


def last_commit(path: StoragePath) -> Commit | None:
    """The table's latest commit, from its log's file names and that commit's commitInfo (its in-commit timestamp
    when the table keeps them): no snapshot read, so a table the deltalake package cannot open (type-widened,
    column-mapped) answers too; None when there is no table."""
    try:
        versions = [int(f.name[:-5]) for f in (path / "_delta_log").iterdir()
                    if f.name.endswith(".json") and f.name[:-5].isdigit()]
    except FileNotFoundError:
        return None
    if not versions:
        return None
    latest = max(versions)
    info = next((a["commitInfo"] for a in commit_actions(path, latest) if "commitInfo" in a), {})
    millis = info.get("inCommitTimestamp") or info.get("timestamp")
    if millis is None:
        raise ValueError(f"Delta commit {latest} of {path} has no commitInfo timestamp")
    return Commit(latest, millis / 1000)


def latest_version(path: Location) -> int:
    return open_table(path).version()
