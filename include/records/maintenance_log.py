"""The record of table maintenance: one `_ops/maintenance` row per table and operation (optimize, vacuum; for the
operational tables also retention and log cleanup), and the helpers that time an operation into its row."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from include.records import ops_tables
from include.settings import Settings

log = logging.getLogger(__name__)

MAINTENANCE_TABLE = "maintenance"
MAINTENANCE_SCHEMA: dict[str, str] = {
    "ran_at": "timestamp", "run_id": "string", "table": "string", "job": "string",
    "operation": "string",  # optimize | vacuum | retention | log cleanup
    "outcome": "string",  # done | skipped | failed
    "detail": "string",
    "files_before": "long",  # data files on disk (vacuum) or in the snapshot (optimize) before
    "files_after": "long",
    "version_before": "long",
    "version_after": "long",
    "duration_ms": "long",
}


def record(settings: Settings, rows: list[dict]) -> None:
    ops_tables.append(settings, MAINTENANCE_TABLE, MAINTENANCE_SCHEMA, rows)


def row(base: dict, operation: str, outcome: str, detail: str, **fields) -> dict:
    """One `_ops/maintenance` row of `base` (run_id, table, job)."""
    return {"ran_at": datetime.now(UTC), **base, "operation": operation, "outcome": outcome, "detail": detail,
            "files_before": None, "files_after": None, "version_before": None, "version_after": None,
            "duration_ms": 0, **fields}


def timed(base: dict, operation: str, action: Callable[[], dict]) -> dict:
    """Run `action` (it returns the row's detail and fields) and time it into a row; a failure is recorded as
    `failed`, not raised: one table's failure must not stop the others."""
    started = time.monotonic()
    try:
        outcome, fields = "done", action()
    except Exception as exc:
        log.exception("table=%s: %s failed", base["table"], operation)
        outcome, fields = "failed", {"detail": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
    made = row(base, operation, outcome, fields.pop("detail"), **fields)
    made["duration_ms"] = int((time.monotonic() - started) * 1000)
    log.info("table=%s %s %s: %s", base["table"], operation, outcome, made["detail"])
    return made
