"""Validate the gold tables (windows, sessions, joins) with Great Expectations; record results and Data Docs.

Per table, two suites run through GE checkpoints:

- ``<layer>__<table>__rows``: the row checks, on the rows of the Delta versions newer than the last
  validated one (append mode; update-mode tables and ``full`` runs: every row). Pandas, or Spark
  when there are more rows than ``LAKEHOUSE_DQ_SPARK_THRESHOLD_ROWS``. Skipped when there is no
  new version.
- ``<layer>__<table>__table``: the table checks (uniqueness, freshness, reconciliation) on one row of
  metrics computed from the whole latest version, on every run -- a gold table goes stale without
  changing.

Every result goes to ``_ops/dq_results``; a failed blocking expectation makes the run fail.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from include.quality import frames, gx_context, run_page
from include.quality.suites import TableSpec, quality_tables
from include.quality.table_metrics import table_metrics
from include.records import quality_results
from include.records.quality_results import CheckResult, QualityReport
from include.registry import Registry
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)


def run_quality(settings: Settings, registry: Registry, tables: list[str] | None = None, *,
                full: bool = False, now: datetime | None = None, origin: str | None = None) -> QualityReport:
    """Validate the gold tables with suites (all, or `tables`), incrementally unless `full`.

    `now` is the reference time of ``no_future_windows`` (default: the validation time); `origin` the Airflow
    UI path of the task that validates (its pages link back to it).
    """
    specs = quality_tables(registry)
    unknown = [t for t in tables or [] if t not in specs]
    if unknown:
        raise ValueError(f"not a gold table with a quality suite: {', '.join(unknown)} (known: {', '.join(specs)})")
    validated_at = datetime.now(UTC)
    report = QualityReport(uuid.uuid4().hex[:12], settings.layout.data_docs / "index.html", full=full)
    with gx_context.open_context(settings) as context:
        gx_context.prune_validations(settings)
        for table in tables or list(specs):
            checked, notes, pages = validate_table(settings, context, specs[table], full=full, run_id=report.run_id,
                                                   validated_at=validated_at, now=now or validated_at, origin=origin)
            quality_results.record(settings, report.run_id, validated_at, checked)
            report.results += checked
            report.notes += notes
            report.pages[table] = pages
        report.docs_index = gx_context.ensure_index(context, settings)
        report.run_page = run_page.write(gx_context.docs_dir(settings), report)
    log.info("data quality run %s: %d checks, blocking failures: %s, warnings: %s", report.run_id,
             len(report.results), sorted({(r.table, r.expectation) for r in report.blocking_failures}),
             sorted({(r.table, r.expectation) for r in report.warnings}))
    return report


def validate_table(settings: Settings, context: Any, spec: TableSpec, *, full: bool, run_id: str, validated_at: datetime,
                   now: datetime, origin: str | None = None) -> tuple[list[CheckResult], list[str], list[str]]:
    """Run both suites of one table; returns the results and notes for the report, and the Data Docs pages of
    its validation results (relative to the docs folder)."""
    path = settings.layout.table(spec.table)
    if not delta_store.table_exists(path):
        return [], [f"{spec.table}: no Delta table at {path} yet (its job has not run)"], []
    latest = delta_store.latest_version(path)
    last = quality_results.last_validated_version(settings, spec.table)
    selection = frames.select_rows(path, spec, latest, last, full)
    checked: list[CheckResult] = []
    notes: list[str] = []
    pages: list[str | None] = []
    metadata = {"table": spec.table, "lakehouse_run_id": run_id, **({"airflow_task": origin} if origin else {})}

    if selection is None:
        notes.append(f"{spec.table}: no version after {last}; row checks skipped (--full validates every row)")
    else:
        engine = "spark" if selection.num_rows > settings.dq_spark_threshold_rows else "pandas"
        scope = f"versions {selection.version_from}..{selection.version_to}: {selection.num_rows} rows, {engine}"
        notes.append(f"{spec.table}: row checks on {'added rows of ' if selection.incremental else ''}{scope}")
        now_epoch = int(now.timestamp())
        frame = (frames.spark_rows(settings, path, spec, selection, now_epoch) if engine == "spark"
                 else frames.pandas_rows(path, spec, selection, now_epoch))
        row_checks = [c for c in spec.checks if c.scope == "rows"]
        details = (spec.row_details(frames.value_counts(frame, spec.details_column, engine == "spark"))
                   if spec.details_column else {})
        outcome, page = gx_context.run_suite(
            context, name=f"{spec.suite_name}__rows", frame=frame, spark=engine == "spark", checks=row_checks,
            observed=details, batch_metadata={**metadata, "versions": scope}, run_name=run_id,
            run_time=validated_at, docs=gx_context.docs_dir(settings))
        pages.append(page)
        checked += [CheckResult(spec.table, c.name, c.severity, ok,
                                gx_context.json_value({**observed, **details[c.name]} if c.name in details
                                                      else observed), "rows",
                                selection.version_from, selection.version_to, selection.num_rows, engine)
                    for c, ok, observed in outcome]

    table_checks = [c for c in spec.checks if c.scope == "table"]
    if not table_checks:  # bronze's suite: row checks only
        log.info("quality table=%s failed=%s", spec.table, sorted(r.expectation for r in checked if not r.success))
        return checked, notes, [p for p in pages if p]
    measured = table_metrics(settings, spec, latest, last)
    details, rows = measured.details, measured.rows
    outcome, page = gx_context.run_suite(
        context, name=f"{spec.suite_name}__table", frame=pd.DataFrame([measured.metrics]), spark=False,
        checks=table_checks, observed=details, batch_metadata={**metadata, "versions": f"0..{latest} (whole table, {rows} rows)"},
        run_name=run_id, run_time=validated_at, docs=gx_context.docs_dir(settings))
    pages.append(page)
    checked += [CheckResult(spec.table, c.name, c.severity, ok, gx_context.json_value(details[c.name]),
                            "table", 0, latest, rows, "pandas")
                for c, ok, _ in outcome]  # GE's observed value is the metric, which the details include
    log.info("quality table=%s failed=%s", spec.table, sorted(r.expectation for r in checked if not r.success))
    return checked, notes, [p for p in pages if p]
