"""A quality run's results: one :class:`CheckResult` per table and expectation, the run's
:class:`QualityReport` (console text), and the `_ops/dq_results` Delta table they are recorded in (one
row per table, expectation and validation run)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from include.records import ops_tables
from include.registry.checks import BLOCKING
from include.settings import Settings
from include.storage import delta as delta_store
from include.storage.paths import StoragePath

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
    """The outcome of one expectation on one table in one run."""

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

    @property
    def outcome(self) -> str:
        """``ok``, ``FAIL`` (a blocking expectation failed) or ``warn`` (a warning one did)."""
        return "ok" if self.success else ("FAIL" if self.severity == BLOCKING else "warn")


@dataclass
class QualityReport:
    """What one quality run found: every result, notes per table, and its Data Docs pages."""

    run_id: str
    docs_index: StoragePath  # where the lakehouse keeps the Data Docs' index
    full: bool = False
    results: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    pages: dict[str, list[str]] = field(default_factory=dict)  # table -> its validation results' Data Docs pages
    run_page: str | None = None  # this run's page (all its tables), relative to the docs folder

    def report_page(self) -> str:
        """The page that shows this run's result, relative to the docs folder: the table's validation result
        when the run validated one table, else the run's page listing each table's results."""
        validated = [pages for pages in self.pages.values() if pages]
        if len(validated) == 1:
            return validated[0][0]
        return self.run_page or "index.html"

    @property
    def blocking_failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome == "FAIL"]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome == "warn"]

    def failed(self, table: str | None = None) -> set[str]:
        """Names of the failed expectations (of one table, or of all)."""
        return {r.expectation for r in self.results if not r.success and table in (None, r.table)}

    def labels(self) -> dict[int, str]:
        """Each result's check name, with its column where a table has the check on several columns
        (e.g. ``keys_not_null(order_id)``)."""
        repeated = Counter((r.table, r.expectation) for r in self.results)
        labels = {}
        for index, r in enumerate(self.results):
            observed = json.loads(r.observed_value)
            column = observed.get("column") if isinstance(observed, dict) else None
            labels[index] = f"{r.expectation}({column})" if repeated[r.table, r.expectation] > 1 and column \
                else r.expectation
        return labels

    def render(self) -> str:
        """The report as console text: one line per result, then the outcome and the Data Docs index."""
        lines = [f"data quality run {self.run_id} ({'full' if self.full else 'incremental'})"]
        lines += [f"  {note}" for note in self.notes]
        labels = self.labels()
        table_width = max([len("table"), *(len(r.table) for r in self.results)])
        check_width = max(len("check"), *(len(label) for label in labels.values())) if labels else len("check")
        for index, r in enumerate(self.results):
            lines.append(f"  {r.outcome:<4} {r.table:<{table_width}} {labels[index]:<{check_width}} {r.severity:<8} "
                         f"{_observed(r.observed_value)}")
        failures = self.blocking_failures
        verdict = (f"FAILED ({len(failures)} blocking: "
                   + ", ".join(f"{r.table} {labels[self.results.index(r)]}" for r in failures) + ")") \
            if failures else "passed"
        lines.append(f"outcome: {verdict}; {len(self.warnings)} warnings")
        lines.append(f"report: {self.docs_index}")
        return "\n".join(lines)


def _observed(observed_json: str) -> str:
    """An observed value for the console, whole, on one line (as JSON in `_ops/dq_results`)."""
    observed = json.loads(observed_json)
    if isinstance(observed, dict):
        hidden = {"column", "unexpected_percent"}
        return " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in observed.items()
                        if k not in hidden and v not in ([], None))
    return json.dumps(observed, default=str)


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
    ops_tables.append(settings, RESULTS_TABLE, RESULTS_SCHEMA, [
        {"run_id": run_id, "validated_at": validated_at, "table": r.table, "version_from": r.version_from,
         "version_to": r.version_to, "expectation": r.expectation, "severity": r.severity, "success": r.success,
         "observed_value": r.observed_value, "engine": r.engine, "rows_validated": r.rows_validated}
        for r in results
    ])
