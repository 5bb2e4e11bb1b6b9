"""The `_ops/dq_results` Delta table: one row per table, expectation and validation run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from include.settings import Settings
from include.storage import delta as delta_store

RESULTS_TABLE = "dq_results"
RESULTS_SCHEMA: dict[str, str] = {
    "run_id": "string",
    "validated_at": "timestamp",
    "table": "string",
    "version_from": "long",  # the Delta versions whose rows this expectation looked at
    "version_to": "long",
    "expectation": "string",
    "severity": "string",  # blocking | warning
    "success": "boolean",
    "observed_value": "string",  # JSON
    "engine": "string",  # pandas | spark
    "rows_validated": "long",
}


@dataclass(frozen=True)
class CheckResult:
    table: str
    expectation: str
    severity: str
    success: bool
    observed_value: str  # JSON
    scope: str  # rows | table
    version_from: int
    version_to: int
    rows_validated: int
    engine: str


def last_validated_version(settings: Settings, table: str) -> int | None:
    """The newest Delta version of `table` recorded as validated, or None."""
    path = settings.layout.ops_table(RESULTS_TABLE)
    if not delta_store.table_exists(path):
        return None
    recorded = delta_store.read_table(path, columns=["table", "version_to"]).to_pylist()
    versions = [r["version_to"] for r in recorded if r["table"] == table]
    return max(versions) if versions else None


def record(settings: Settings, run_id: str, validated_at: datetime, results: Sequence[CheckResult]) -> None:
    """Append the results of one table's validation (one Delta commit)."""
    if not results:
        return
    delta_store.append_rows(settings.layout.ops_table(RESULTS_TABLE), RESULTS_SCHEMA, [
        {"run_id": run_id, "validated_at": validated_at, "table": r.table, "version_from": r.version_from,
         "version_to": r.version_to, "expectation": r.expectation, "severity": r.severity, "success": r.success,
         "observed_value": r.observed_value, "engine": r.engine, "rows_validated": r.rows_validated}
        for r in results
    ])
