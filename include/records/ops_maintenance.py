"""Maintenance of the operational tables (`_ops/*`), which the jobs' listeners and the tasks append to through
delta-rs: a commit per micro-batch of every live job in `_ops/query_progress` (16 live jobs at 30-60 s triggers:
~1,500 commits an hour), a row per batch in `_ops/batch_ledger`, a few in the others.

Per table, with delta-rs (the engine that writes them; appends beside it do not conflict):

- retention: `_ops/query_progress` rows older than ``LAKEHOUSE_PROGRESS_RETENTION_DAYS`` (default 7) are deleted;
  the other operational tables keep their rows (they are small, and audits and ledgers are history);
- optimize: the small files compacted into few;
- vacuum: files no longer referenced and older than ``LAKEHOUSE_OPS_HISTORY_HOURS`` (default 24) deleted (only
  delta-rs reads these tables, at their latest version: no time travel to keep);
- log cleanup: a log checkpoint, then the commit files older than the same hours that precede the newest
  checkpoint deleted (the table's ``delta.logRetentionDuration`` is set to it; delta-rs also writes a checkpoint
  every 100 commits).

So after a maintenance an operational table holds its rows in a few files, plus the commits of the last
``LAKEHOUSE_OPS_HISTORY_HOURS`` and the files replaced in those hours and up to one maintenance interval before (a
maintenance's replaced files stay until one finds them older than the hours), whatever time it has run for
(tested: tests/test_ops_retention.py; measured: bench/soak.py). `lakehouse maintain` (every table) and the
`lakehouse_maintenance` DAG run it after the registry's tables; each operation is a row in `_ops/maintenance`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from include.records import maintenance_log
from include.records.alerts import ALERTS_TABLE
from include.records.batch_ledger import LEDGER_TABLE
from include.records.checkpoint_audit import AUDIT_TABLE
from include.records.maintenance_log import MAINTENANCE_TABLE
from include.records.quality_results import RESULTS_TABLE
from include.records.query_progress import PROGRESS_TABLE
from include.settings import Settings
from include.storage import delta as delta_store

OPS_TABLES = (PROGRESS_TABLE, LEDGER_TABLE, ALERTS_TABLE, AUDIT_TABLE, MAINTENANCE_TABLE, RESULTS_TABLE)
RETAINED = {PROGRESS_TABLE: "progress_time"}  # tables whose old rows go, by this time column


def maintain_ops_tables(settings: Settings, run_id: str, now: datetime | None = None) -> list[dict]:
    """Retention, compaction, vacuum and log cleanup of every operational table that exists; the rows recorded."""
    now = now or datetime.now(UTC)
    rows = []
    for name in OPS_TABLES:
        path = settings.layout.ops_table(name)
        base = {"run_id": run_id, "table": f"_ops/{name}", "job": ""}
        if not delta_store.table_exists(path):
            continue
        if name in RETAINED:
            cutoff = now - timedelta(days=settings.progress_retention_days)
            rows.append(maintenance_log.timed(base, "retention", lambda p=path, c=RETAINED[name], t=cutoff:
                                              _delete_before(p, c, t, settings.progress_retention_days)))
        rows.append(maintenance_log.timed(base, "optimize", lambda p=path: _compact(p)))
        rows.append(maintenance_log.timed(base, "vacuum", lambda p=path: _vacuum(p, settings.ops_history_hours)))
        rows.append(maintenance_log.timed(base, "log cleanup", lambda p=path: _clean_log(p, settings.ops_history_hours)))
    maintenance_log.record(settings, rows)
    return rows


def _delete_before(path, column: str, cutoff: datetime, days: int) -> dict:
    table = delta_store.open_table(path)
    before = table.version()
    deleted = table.delete(f"{column} < '{cutoff.astimezone(UTC):%Y-%m-%dT%H:%M:%S}Z'")["num_deleted_rows"]
    return {"detail": f"deleted {deleted} rows older than {days} days ({column} before {cutoff:%Y-%m-%d %H:%M} UTC)",
            "version_before": before, "version_after": delta_store.latest_version(path)}


def _compact(path) -> dict:
    table = delta_store.open_table(path)
    before = table.version()
    metrics = table.optimize.compact()
    removed, added = int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])
    return {"detail": f"compacted {removed} files into {added}", "files_before": removed, "files_after": added,
            "version_before": before, "version_after": delta_store.latest_version(path)}


def _vacuum(path, hours: int) -> dict:
    table = delta_store.open_table(path)
    deleted = table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
    return {"detail": f"retention {hours} hours: deleted {len(deleted)} unreferenced files",
            "files_before": None, "files_after": None}


def _clean_log(path, hours: int) -> dict:
    retention = f"interval {hours} hours"
    table = delta_store.open_table(path)
    if table.metadata().configuration.get("delta.logRetentionDuration") != retention:
        table.alter.set_table_properties({"delta.logRetentionDuration": retention})
        table = delta_store.open_table(path)
    before = _log_files(path)
    table.create_checkpoint()
    table.cleanup_metadata()
    after = _log_files(path)
    return {"detail": f"checkpoint at version {table.version()}; {before - after} commit files older than "
                      f"{hours} hours deleted", "files_before": before, "files_after": after,
            "version_before": table.version(), "version_after": table.version()}


def _log_files(path) -> int:
    return sum(1 for p in (path / "_delta_log").iterdir() if p.name.endswith(".json"))
