"""The product's Alertmanager receiver: each firing and each resolved alert of a notification becomes one row of
`_ops/alerts` (`ops.alerts` in the catalog), beside the rows the supervisor and the failure callback write, so the
health report, the Airflow UI's links and SQL show the alerts Prometheus raised.

Alertmanager sends a group's alerts again (its `repeat_interval`, a new alert joining the group): a firing is
identified by its fingerprint and start (`alert_id`), and a row is written once per identity and status.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from include.records.alerts import ALERTS_TABLE, alert_row, append_alerts
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)


class BadNotification(ValueError):
    """A body that is not an Alertmanager webhook notification (version 4); the message names what is wrong."""


def _when(text: str) -> datetime | None:
    """An RFC 3339 time of Alertmanager's (nanoseconds, `Z`); None for its zero time (an alert still firing)."""
    if not text or text.startswith("0001-"):
        return None
    head, _, rest = text.replace("Z", "+00:00").partition(".")
    if rest:  # Python reads at most microseconds
        digits = "".join(c for c in rest if c.isdigit())
        head = f"{head}.{digits[:6]}{rest[len(digits):]}"
    return datetime.fromisoformat(head)


def rows_of(notification: Any) -> list[dict]:
    """The `_ops/alerts` rows of one notification: one per alert, at its start (firing) or its end (resolved)."""
    if not isinstance(notification, dict) or not isinstance(notification.get("alerts"), list):
        raise BadNotification("expected Alertmanager's webhook JSON: an object with a list of `alerts`")
    rows = []
    for alert in notification["alerts"]:
        try:
            labels, notes, status = alert["labels"], alert.get("annotations") or {}, alert["status"]
            started = _when(alert["startsAt"])
            alert_id = f"{alert['fingerprint']}@{alert['startsAt']}"
            name = labels["alertname"]
        except (KeyError, TypeError, ValueError) as exc:
            raise BadNotification(f"an alert without a readable {exc}: {str(alert)[:200]}") from None
        if status not in ("firing", "resolved"):
            raise BadNotification(f"alert {name}: status {status!r} is neither firing nor resolved")
        ended = _when(alert.get("endsAt", "")) if status == "resolved" else None
        subject = labels.get("table") or labels.get("job") or "lakehouse"
        reason = f"{name} {status}: {notes.get('summary') or subject}"
        if status == "firing" and notes.get("runbook"):
            reason += f". Runbook: {notes['runbook']}"
        rows.append(alert_row(labels.get("job", ""), reason, labels.get("severity", "warning"),
                              raised_at=ended or started, alert=name, status=status, alert_id=alert_id,
                              table_name=labels.get("table", "")))
    return rows


def record(settings: Settings, notification: Any) -> int:
    """Record the notification's alerts not recorded yet (by identity and status); how many rows were written."""
    rows = rows_of(notification)
    path = settings.layout.ops_table(ALERTS_TABLE)
    recorded = delta_store.read_table(path).to_pylist() if rows and delta_store.table_exists(path) else []
    seen = {(r.get("alert_id"), r.get("status")) for r in recorded}  # a table older than these columns: none
    new = [r for r in rows if (r["alert_id"], r["status"]) not in seen]
    if new:
        append_alerts(settings, new)
    log.info("Alertmanager notification: %d alert(s), %d new", len(rows), len(new))
    return len(new)

