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

import json
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from include.quality import frames, gx_context, results, run_page
from include.quality.results import CheckResult
from include.quality.suites import TableSpec, quality_tables
from include.quality.table_metrics import table_metrics
from include.registry import Registry
from include.registry.checks import BLOCKING
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)


@dataclass
class QualityReport:
    run_id: str
    docs_index: Path
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
        return [r for r in self.results if not r.success and r.severity == BLOCKING]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if not r.success and r.severity != BLOCKING]

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
        lines = [f"data quality run {self.run_id} ({'full' if self.full else 'incremental'})"]
        lines += [f"  {note}" for note in self.notes]
        labels = self.labels()
        table_width = max([len("table"), *(len(r.table) for r in self.results)])
        check_width = max(len("check"), *(len(label) for label in labels.values())) if labels else len("check")
        for index, r in enumerate(self.results):
            mark = "ok  " if r.success else ("FAIL" if r.severity == BLOCKING else "warn")
            lines.append(f"  {mark} {r.table:<{table_width}} {labels[index]:<{check_width}} {r.severity:<8} "
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


def run_quality(settings: Settings, registry: Registry, tables: list[str] | None = None, *,
                full: bool = False, now: datetime | None = None) -> QualityReport:
    """Validate the gold tables with suites (all, or `tables`), incrementally unless `full`.

    `now` is the reference time of ``no_future_windows`` (default: the validation time).
    """
    specs = quality_tables(registry)
    unknown = [t for t in tables or [] if t not in specs]
    if unknown:
        raise ValueError(f"not a gold table with a quality suite: {', '.join(unknown)} (known: {', '.join(specs)})")
    validated_at = datetime.now(UTC)
    report = QualityReport(uuid.uuid4().hex[:12], gx_context.docs_dir(settings) / "index.html", full=full)
    with gx_context.open_context(settings) as context:
        gx_context.prune_validations(settings)
        for table in tables or list(specs):
            checked, notes, pages = validate_table(settings, context, specs[table], full=full, run_id=report.run_id,
                                                   validated_at=validated_at, now=now or validated_at)
            results.record(settings, report.run_id, validated_at, checked)
            report.results += checked
            report.notes += notes
            report.pages[table] = pages
        report.docs_index = gx_context.ensure_index(context, settings)
        report.run_page = run_page.write(gx_context.docs_dir(settings), report)
    log.info("data quality run %s: %d checks, blocking failures: %s, warnings: %s", report.run_id,
             len(report.results), sorted({(r.table, r.expectation) for r in report.blocking_failures}),
             sorted({(r.table, r.expectation) for r in report.warnings}))
    return report


def validate_table(settings: Settings, context, spec: TableSpec, *, full: bool, run_id: str, validated_at: datetime,
                   now: datetime) -> tuple[list[CheckResult], list[str], list[str]]:
    """Run both suites of one table; returns the results and notes for the report, and the Data Docs pages of
    its validation results (relative to the docs folder)."""
    path = settings.layout.table(spec.table)
    if not delta_store.table_exists(path):
        return [], [f"{spec.table}: no Delta table at {path} yet (its job has not run)"], []
    latest = delta_store.latest_version(path)
    last = results.last_validated_version(settings, spec.table)
    selection = frames.select_rows(path, spec, latest, last, full)
    checked: list[CheckResult] = []
    notes: list[str] = []
    pages: list[str | None] = []
    metadata = {"table": spec.table, "lakehouse_run_id": run_id}

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
        outcome, page = gx_context.run_suite(
            context, name=f"{spec.suite_name}__rows", frame=frame, spark=engine == "spark", checks=row_checks,
            observed={}, batch_metadata={**metadata, "versions": scope}, run_name=run_id, run_time=validated_at,
            docs=gx_context.docs_dir(settings))
        pages.append(page)
        checked += [CheckResult(spec.table, c.name, c.severity, ok, gx_context.json_value(observed), "rows",
                                selection.version_from, selection.version_to, selection.num_rows, engine)
                    for c, ok, observed in outcome]

    measured = table_metrics(settings, spec, latest, last)
    details, rows = measured.details, measured.rows
    table_checks = [c for c in spec.checks if c.scope == "table"]
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
