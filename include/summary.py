"""What the lakehouse holds: rows per table, state rows per job, quarantined lines by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pyarrow.compute as pc

from include.records.query_progress import PROGRESS_TABLE
from include.registry import Registry
from include.settings import Settings
from include.storage import delta as delta_store


@dataclass
class TableSummary:
    table: str
    path: str
    rows: int
    version: int | None
    writer: str


@dataclass
class LakehouseSummary:
    tables: list[TableSummary]
    state_rows: dict[str, int]
    quarantine_reasons: dict[str, int]
    quality: dict[str, tuple[int, list[str]]]  # table -> (checks in its latest validation, failed checks)
    docs_index: str

    def render(self) -> str:
        width = max(len("table"), *(len(t.table) for t in self.tables))
        writer_width = max(len("writer"), *(len(t.writer) for t in self.tables))
        lines = [f"{'table'.ljust(width)}  {'rows':>10}  {'version':>7}  {'writer'.ljust(writer_width)}  location"]
        for t in self.tables:
            version = "-" if t.version is None else str(t.version)
            lines.append(f"{t.table.ljust(width)}  {t.rows:>10}  {version:>7}  {t.writer.ljust(writer_width)}  {t.path}")
        lines.append("")
        lines.append("state rows (latest batch): " + (", ".join(f"{j}={n}" for j, n in self.state_rows.items()) or "none"))
        quarantined = sum(self.quarantine_reasons.values())
        reasons = ", ".join(f"{r}={n}" for r, n in sorted(self.quarantine_reasons.items()))
        lines.append(f"quarantined lines: {quarantined}" + (f" ({reasons})" if reasons else ""))
        if not self.quality:
            lines.append("data quality: not validated yet (lakehouse quality run)")
        for table, (checks, failures) in sorted(self.quality.items()):
            verdict = f"FAILED {', '.join(failures)}" if failures else "passed"
            lines.append(f"data quality {table}: {verdict} ({checks} checks)")
        if self.quality:
            lines.append(f"data quality report: {self.docs_index}")
        return "\n".join(lines)


def latest_state_rows(settings: Settings) -> dict[str, int]:
    """State rows of each job's latest recorded batch."""
    path = settings.layout.ops_table(PROGRESS_TABLE)
    if not delta_store.table_exists(path):
        return {}
    progress = delta_store.read_table(path).select(["job", "batch_id", "progress_time", "state_rows_total"])
    latest: dict[str, tuple] = {}
    for row in progress.to_pylist():
        key = (row["progress_time"], row["batch_id"])
        if row["job"] not in latest or key > latest[row["job"]][0]:
            latest[row["job"]] = (key, row["state_rows_total"] or 0)
    return {job: rows for job, (_, rows) in sorted(latest.items())}


def latest_quality(settings: Settings) -> dict[str, tuple[int, list[str]]]:
    """Per table, the checks of its latest validation run and those that failed."""
    path = settings.layout.ops_table("dq_results")
    if not delta_store.table_exists(path):
        return {}
    rows = delta_store.read_table(path).to_pylist()
    latest: dict[str, tuple] = {}
    for row in rows:
        key = (row["validated_at"], row["run_id"])
        if row["table"] not in latest or key > latest[row["table"]]:
            latest[row["table"]] = key
    result = {}
    for table, (_, run_id) in latest.items():
        mine = [r for r in rows if r["table"] == table and r["run_id"] == run_id]
        result[table] = (len(mine), sorted({r["expectation"] for r in mine if not r["success"]}))
    return result


def summarize(settings: Settings, registry: Registry) -> LakehouseSummary:
    tables = []
    reasons: Counter = Counter()
    for table in registry.table_schemas:
        path = settings.layout.table(table)
        exists = delta_store.table_exists(path)
        writer = registry.writer_of(table)
        tables.append(
            TableSummary(
                table=table,
                path=str(path),
                rows=delta_store.count_rows(path) if exists else 0,
                version=delta_store.latest_version(path) if exists else None,
                writer=",".join(w.id for w in registry.writers_of(table)) or "-",
            )
        )
        if exists and writer and writer.sink.quarantine_table == table:
            counts = pc.value_counts(delta_store.read_table(path)["reason"]).to_pylist()
            reasons.update({c["values"]: c["counts"] for c in counts})
    return LakehouseSummary(
        tables=tables, state_rows=latest_state_rows(settings), quarantine_reasons=dict(reasons),
        quality=latest_quality(settings), docs_index=str(settings.layout.data_docs / "index.html"),
    )
