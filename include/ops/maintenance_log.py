"""The record of table maintenance: one `_ops/maintenance` row per table and operation (optimize, vacuum)."""

from __future__ import annotations

from include.settings import Settings
from include.storage import delta as delta_store

MAINTENANCE_TABLE = "maintenance"
MAINTENANCE_SCHEMA: dict[str, str] = {
    "ran_at": "timestamp",
    "run_id": "string",
    "table": "string",
    "job": "string",
    "operation": "string",  # optimize | vacuum
    "outcome": "string",  # done | skipped | failed
    "detail": "string",
    "files_before": "long",  # data files on disk (vacuum) or in the snapshot (optimize) before
    "files_after": "long",
    "version_before": "long",
    "version_after": "long",
    "duration_ms": "long",
}


def record(settings: Settings, rows: list[dict]) -> None:
    if rows:
        delta_store.append_rows(settings.layout.ops_table(MAINTENANCE_TABLE), MAINTENANCE_SCHEMA, rows)
