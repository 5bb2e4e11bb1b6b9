"""Opening a Delta table's log with delta-rs: where a storage path becomes a `DeltaTable` (its URI and the storage
options S3 needs). Below both include/storage/delta.py (versions, commits, the operational tables) and
include/storage/reader.py (the rows), which each open tables through it."""

from __future__ import annotations

from pathlib import PurePath

from deltalake import DeltaTable

from include.storage.paths import StoragePath

Location = StoragePath | PurePath | str  # a storage path (S3 needs its options); a plain path or string is local


def location(path: Location) -> tuple[str, dict[str, str]]:
    """The URI and the storage options delta-rs opens `path` with."""
    return (path.uri, path.delta_options()) if hasattr(path, "delta_options") else (str(path), {})


def open_table(path: Location, version: int | None = None) -> DeltaTable:
    """The table's log at `version` (default: the latest)."""
    uri, options = location(path)
    return DeltaTable(uri, version=version, storage_options=options or None)


def table_exists(path: Location) -> bool:
    uri, options = location(path)
    return DeltaTable.is_deltatable(uri, storage_options=options or None)
