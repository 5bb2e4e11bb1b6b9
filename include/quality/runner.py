"""Validate the windowed gold tables with Great Expectations; record results and build Data Docs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from include import delta_store
from include.quality.metrics import row_frame, table_metrics
from include.quality.suites import BLOCKING, WindowedTable, windowed_tables
from include.registry import Registry
from include.settings import PACKAGE_DIR, Settings

log = logging.getLogger(__name__)

GX_CONFIG = PACKAGE_DIR / "gx" / "great_expectations.yml"
RESULTS_TABLE = "dq_results"
RESULTS_SCHEMA = {
    "run_id": "string",
    "validated_at": "timestamp",
    "table": "string",
    "version_from": "long",
    "version_to": "long",
    "expectation": "string",
    "severity": "string",
    "success": "boolean",
    "observed_value": "string",
    "engine": "string",
    "rows_validated": "long",
}


@dataclass
class CheckResult:
    table: str
    expectation: str
    severity: str
    success: bool
    observed_value: str


@dataclass
class QualityReport:
    run_id: str
    docs_index: Path
    results: list[CheckResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def blocking_failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success and r.severity == BLOCKING]

    @property
    def failed(self) -> set[tuple[str, str]]:
        return {(r.table, r.expectation) for r in self.results if not r.success}

    def render(self) -> str:
        lines = [f"data quality run {self.run_id}"]
        lines += [f"  {note}" for note in self.notes]
        for r in self.results:
            mark = "ok  " if r.success else ("FAIL" if r.severity == BLOCKING else "warn")
            lines.append(f"  {mark} {r.table:<24} {r.expectation:<22} ({r.severity}) observed: {r.observed_value}")
        verdict = "FAILED" if self.blocking_failures else "passed"
        lines.append(f"outcome: {verdict} ({len(self.blocking_failures)} blocking failures); report: {self.docs_index}")
        return "\n".join(lines)


def last_validated_version(settings: Settings, table: str) -> int | None:
    path = settings.ops_table(RESULTS_TABLE)
    if not delta_store.table_exists(path):
        return None
    versions = [r["version_to"] for r in delta_store.read_table(path).select(["table", "version_to"]).to_pylist()
                if r["table"] == table]
    return max(versions) if versions else None


def _context(settings: Settings):
    """A GE file context opened on a copy of the project config under LAKEHOUSE_ROOT/_reports/gx."""
    project = settings.reports_dir / "gx"
    (project / "gx").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(GX_CONFIG, project / "gx" / "great_expectations.yml")
    os.environ["LAKEHOUSE_DATA_DOCS_DIR"] = str(settings.reports_dir / "data_docs")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx

    return gx.get_context(mode="file", project_root_dir=str(project))


def _validate(context, datasource, name: str, frame, expectations: list, spec_checks) -> list[tuple]:
    """Run one suite on one frame through a checkpoint that also updates Data Docs."""
    import great_expectations as gx

    asset = next((a for a in datasource.assets if a.name == name), None) or datasource.add_dataframe_asset(name)
    batch = next((b for b in asset.batch_definitions if b.name == "whole"), None) or \
        asset.add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add_or_update(gx.ExpectationSuite(name=name, expectations=expectations))
    definition = context.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[definition],
        actions=[gx.checkpoint.UpdateDataDocsAction(name="update_data_docs")], result_format="SUMMARY"))
    outcome = checkpoint.run(batch_parameters={"dataframe": frame})
    checks_by_id = {c.name + json.dumps(c.kwargs, sort_keys=True, default=str): c for c in spec_checks}
    results = []
    for validation in outcome.run_results.values():
        for r in validation.results:
            meta = r.expectation_config.meta or {}
            check = checks_by_id[meta["check_id"]]
            observed = r.result.get("observed_value")
            if observed is None:
                observed = {"unexpected_count": r.result.get("unexpected_count"),
                            "unexpected_sample": r.result.get("partial_unexpected_list", [])[:5]}
            results.append((check, bool(r.success), observed))
    return results


def _expectation(check):
    import great_expectations.expectations as gxe

    check_id = check.name + json.dumps(check.kwargs, sort_keys=True, default=str)
    return getattr(gxe, check.expectation)(
        **check.kwargs, meta={"check_id": check_id, "name": check.name, "severity": check.severity},
        description=check.description,
    )


def _spark_rows_frame(settings: Settings, rows_files: list[str], spec: WindowedTable, now_epoch: int):
    from pyspark.sql import functions as F

    from include.spark_session import get_spark

    frame = get_spark(settings, app_name="lakehouse-quality").read.parquet(*rows_files)
    start, end = F.unix_timestamp("window_start"), F.unix_timestamp("window_end")
    return (frame.withColumn("_window_seconds", end - start)
            .withColumn("_start_offset_seconds", start % F.lit(spec.slide_seconds))
            .withColumn("_seconds_in_future", start - F.lit(now_epoch)))


def validate_table(settings: Settings, context, spec: WindowedTable, *, full: bool, run_id: str,
                   now: datetime) -> tuple[list[CheckResult], str | None]:
    """Validate one table; returns its results, or a note when there was nothing to validate."""
    path = settings.table_path(spec.table)
    if not delta_store.table_exists(path):
        return [], f"{spec.table}: no Delta table at {path} yet (its job has not run)"
    latest = delta_store.latest_version(path)
    last = None if full else last_validated_version(settings, spec.table)
    if last is not None and last >= latest:
        return [], f"{spec.table}: version {latest} already validated (use --full to validate again)"
    whole = delta_store.read_table(path)
    rows = whole if last is None or spec.mode != "append" else delta_store.read_added_rows(path, last)
    rows = whole if rows is None else rows
    engine = "pandas" if rows.num_rows <= settings.dq_spark_threshold_rows else "spark"
    now_epoch = int(now.timestamp())
    if engine == "pandas":
        frame = row_frame(rows, spec, now_epoch)
        datasource = context.data_sources.add_or_update_pandas("lakehouse_pandas")
    else:
        from deltalake import DeltaTable

        files = DeltaTable(str(path)).file_uris() if rows is whole else [
            str(path / a["path"]) for v in range(last + 1, latest + 1) for a in delta_store.commit_files(path, v)]
        frame = _spark_rows_frame(settings, files, spec, now_epoch)
        datasource = context.data_sources.add_or_update_spark("lakehouse_spark")
    metrics, details = table_metrics(settings, whole, spec)
    name = spec.table.replace("/", "__")
    raw = []
    for scope, data in (("rows", frame), ("table", metrics)):
        checks = [c for c in spec.checks if c.scope == scope]
        raw += _validate(context, datasource if scope == "rows" else context.data_sources.add_or_update_pandas(
            "lakehouse_pandas"), f"{name}__{scope}", data, [_expectation(c) for c in checks], checks)
    results = []
    for check, success, observed in raw:
        if check.scope == "table":
            observed = {"value": observed, **{k: v for k, v in details.items() if k in _DETAIL_KEYS[check.name]}}
        results.append(CheckResult(spec.table, check.name, check.severity, success, json.dumps(observed, default=str)))
    delta_store.append_rows(settings.ops_table(RESULTS_TABLE), RESULTS_SCHEMA, [
        {"run_id": run_id, "validated_at": now, "table": spec.table, "version_from": -1 if last is None else last + 1,
         "version_to": latest, "expectation": r.expectation, "severity": r.severity, "success": r.success,
         "observed_value": r.observed_value, "engine": engine, "rows_validated": rows.num_rows} for r in results])
    log.info("quality table=%s versions %s..%s engine=%s rows=%d failed=%s", spec.table,
             "0" if last is None else last + 1, latest, engine, rows.num_rows,
             [r.expectation for r in results if not r.success])
    return results, None


_DETAIL_KEYS = {
    "unique_windows": ("duplicate_window_rows",),
    "freshness": ("latest_event", "latest_finalized_window_end", "freshness_lag_seconds"),
    "reconciliation": ("watermark", "finalized_windows", "gold_events", "source_events"),
}


def run_quality(settings: Settings, registry: Registry, tables: list[str] | None = None, *,
                full: bool = False, now: datetime | None = None) -> QualityReport:
    """Validate the windowed gold tables (all, or `tables`), incrementally unless `full`."""
    specs = windowed_tables(registry)
    unknown = [t for t in tables or [] if t not in specs]
    if unknown:
        raise ValueError(f"not a windowed gold table: {', '.join(unknown)} (known: {', '.join(sorted(specs))})")
    context = _context(settings)
    report = QualityReport(run_id=uuid.uuid4().hex[:12], docs_index=settings.reports_dir / "data_docs" / "index.html")
    now = now or datetime.now(UTC)
    for table in tables or sorted(specs):
        results, note = validate_table(settings, context, specs[table], full=full, run_id=report.run_id, now=now)
        report.results += results
        if note:
            report.notes.append(note)
    context.build_data_docs()
    return report
