"""The audit of checkpoint operations: one `_ops/checkpoint_audit` row per job and action, dry runs included."""

from __future__ import annotations

import getpass
import os
from datetime import UTC, datetime

from include.records import ops_tables
from include.settings import Settings
from include.storage import delta as delta_store

AUDIT_TABLE = "checkpoint_audit"
# Rows an applied action writes while it runs (the detail of "step done" names the step); its end is done/failed.
PROGRESS_OUTCOMES = ("started", "resumed", "step done")
AUDIT_SCHEMA: dict[str, str] = {
    "at": "timestamp",
    "actor": "string",  # the person (cli:<user>) or the DAG run
    "job": "string",
    "mode": "string",
    "dry_run": "boolean",
    "outcome": "string",  # started | resumed | step done (progress) | done | dry-run | not applied | refused | failed
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


def unapplied_row(actor: str, job: str, mode: str, dry_run: bool, outcome: str, detail: str) -> dict:
    """The row of a job an action never touched: `not applied` (rejected, or a task failed before it), `refused`
    (the request was invalid or may not run: `detail` says why)."""
    return {"at": datetime.now(UTC), "actor": actor, "job": job, "mode": mode, "dry_run": dry_run, "outcome": outcome,
            "detail": detail, "plan": "", "batch_before": None, "batch_after": None, "versions_before": None,
            "versions_after": None, "archived_to": None}


def record(settings: Settings, rows: list[dict]) -> None:
    ops_tables.append(settings, AUDIT_TABLE, AUDIT_SCHEMA, rows)


def outcomes(settings: Settings, include_progress: bool = False) -> list[dict]:
    """The audit's rows in the order they were written (without the progress rows unless asked)."""
    path = settings.layout.ops_table(AUDIT_TABLE)
    if not delta_store.table_exists(path):
        return []
    rows = sorted(delta_store.read_table(path).to_pylist(), key=lambda r: r["at"])
    return [r for r in rows if include_progress or r["outcome"] not in PROGRESS_OUTCOMES]
