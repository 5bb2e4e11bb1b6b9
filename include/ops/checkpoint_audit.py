"""The audit of checkpoint operations: one `_ops/checkpoint_audit` row per job and action, dry runs included."""

from __future__ import annotations

import getpass
import os

from include.settings import Settings
from include.storage import delta as delta_store

AUDIT_TABLE = "checkpoint_audit"
AUDIT_SCHEMA: dict[str, str] = {
    "at": "timestamp",
    "actor": "string",  # the person (cli:<user>) or the DAG run
    "job": "string",
    "mode": "string",
    "dry_run": "boolean",
    "outcome": "string",  # done | dry-run | refused | failed
    "detail": "string",
    "plan": "string",  # JSON: the plan the action applied
    "batch_before": "long",
    "batch_after": "long",
    "versions_before": "string",  # JSON: {table: Delta version}
    "versions_after": "string",
    "archived_to": "string",  # where the previous checkpoint was moved (or copied) aside
}


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"cli:{user}"


def record(settings: Settings, rows: list[dict]) -> None:
    if rows:
        delta_store.append_rows(settings.layout.ops_table(AUDIT_TABLE), AUDIT_SCHEMA, rows)
