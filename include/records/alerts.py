"""Alerts: one row per event a person should see, in the Delta table `_ops/alerts`, and a log line."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from include.records import ops_tables
from include.settings import Settings

log = logging.getLogger(__name__)

ALERTS_TABLE = "alerts"
ALERT_SCHEMA: dict[str, str] = {"raised_at": "timestamp", "job": "string", "dag_id": "string", "task_id": "string",
                                "run_id": "string", "severity": "string", "reason": "string"}


def record_alert(
    settings: Settings,
    job: str,
    reason: str,
    *,
    dag_id: str = "",
    task_id: str = "",
    run_id: str = "",
    severity: str = "error",
) -> None:
    """Append one row to the `_ops/alerts` Delta table and log it."""
    level = {"info": logging.INFO, "warning": logging.WARNING}.get(severity, logging.ERROR)
    log.log(level, "alert job=%s severity=%s dag=%s task=%s run=%s: %s", job, severity, dag_id, task_id, run_id, reason)
    row = {
        "raised_at": datetime.now(UTC), "job": job, "dag_id": dag_id, "task_id": task_id,
        "run_id": run_id, "severity": severity, "reason": reason,
    }
    ops_tables.append(settings, ALERTS_TABLE, ALERT_SCHEMA, [row])
