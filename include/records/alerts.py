"""Alerts: one row per event a person should see, in the Delta table `_ops/alerts`, and a log line.

Rows come from the product's own checks (the supervisor, the failure callback, the batch writer, the CDC connectors'
watch) and from Prometheus' alerts as Alertmanager delivers them (include/monitor/webhook.py): those carry the alert's
name, `firing` or `resolved`, the identity Alertmanager gives one firing (`<fingerprint>@<startsAt>`, so a
notification sent again records nothing new) and the table it is about (`table_name`, as the registry names it).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from include.records import ops_tables
from include.settings import Settings

log = logging.getLogger(__name__)

ALERTS_TABLE = "alerts"
ALERT_SCHEMA: dict[str, str] = {"raised_at": "timestamp", "job": "string", "dag_id": "string", "task_id": "string",
                                "run_id": "string", "severity": "string", "reason": "string",
                                # Prometheus' alerts (added later: the product's own rows read empty there)
                                "alert": "string", "status": "string", "alert_id": "string", "table_name": "string"}


def alert_row(job: str, reason: str, severity: str = "error", raised_at: datetime | None = None,
              **fields: str) -> dict:
    """A row of `_ops/alerts` (its other columns from `fields`, empty when not given), raised now unless said."""
    row = dict.fromkeys(ALERT_SCHEMA, "") | fields
    return row | {"raised_at": raised_at or datetime.now(UTC), "job": job, "severity": severity, "reason": reason}


def append_alerts(settings: Settings, rows: list[dict]) -> None:
    """Append alert rows (:func:`alert_row`) to `_ops/alerts` in one commit, each said in a log line."""
    for row in rows:
        level = {"info": logging.INFO, "warning": logging.WARNING}.get(row["severity"], logging.ERROR)
        log.log(level, "alert job=%s severity=%s dag=%s task=%s run=%s: %s", row["job"], row["severity"],
                row["dag_id"], row["task_id"], row["run_id"], row["reason"])
    ops_tables.append(settings, ALERTS_TABLE, ALERT_SCHEMA, rows)


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
    append_alerts(settings, [alert_row(job, reason, severity, dag_id=dag_id, task_id=task_id, run_id=run_id)])
