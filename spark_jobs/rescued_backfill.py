"""Fill columns the registry added (`evolve`) in the rows written before, from what bronze kept in `_rescued`.

Rows a bronze job wrote before its source's schema named a field hold the field in `_rescued` (JSON), and null in
the column the `evolve` added. `lakehouse schema backfill <bronze job>` moves such values into their columns, read
exactly as bronze reads a line (spark_jobs.transforms: Spark's reader, the strict parse's `wrong_type`, times
parsed), and takes the filled fields out of `_rescued`; a value that does not fit its column's type stays in
`_rescued` and is counted. It does so in the bronze table and in every table a pass-through job (deduplicate) makes
from it, downstream, each as one Delta UPDATE (one version, tagged :data:`BACKFILL_TAG`), audited in
`_ops/checkpoint_audit` (mode ``backfill``). The jobs writing those tables must be stopped: their leases are held
while it runs. Running it again finds nothing left to fill and writes nothing.

Jobs reading a backfilled table pass over its backfill commits (Delta's `skipChangeCommits`, set for a run whose
unread commits hold no other row change: :func:`spark_jobs.evolution.backfilled_sources`): the rows they already
read are not read again, and their own tables were backfilled by the same command when they are pass-through copies.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from include.records import checkpoint_audit, lease
from include.registry import RESCUED_COLUMN, JobSpec, Registry
from include.registry.specs import Deduplicate, ParseJson
from include.settings import Settings
from include.spark_session import RESCUED_FIELDS_FUNCTION, session_confs
from include.storage import delta as delta_store
from spark_jobs import strict_json
from spark_jobs.delta_tables import appends_opened
from spark_jobs.json_values import json_fields, typed_value

log = logging.getLogger(__name__)

BACKFILL_TAG = "lakehouse:rescued-backfill"  # the userMetadata of a backfill's Delta commit
COMMIT_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


class BackfillRefused(ValueError):
    """The request names no bronze job, or columns its source does not declare."""


@dataclass(frozen=True)
class ColumnFill:
    """One column of one table: rows filled from `_rescued`, rows whose rescued value does not fit its type."""

    table: str
    column: str
    filled: int
    not_fitting: int


def backfill_jobs(registry: Registry, job_id: str) -> list[JobSpec]:
    """The bronze job and every pass-through job downstream of it (its tables carry `_rescued` on), in order."""
    job = registry.job(job_id)
    if not isinstance(job.transform, ParseJson):
        raise BackfillRefused(f"job {job_id!r} is a {job.transform_kind} job: name the bronze (parse_json) job whose "
                              f"table kept the fields in {RESCUED_COLUMN}; its pass-through copies follow")
    jobs, tables = [job], {job.sink.table}
    for other_id in registry.order:
        other = registry.jobs[other_id]
        if isinstance(other.transform, Deduplicate) and other.source.name in tables:
            jobs.append(other)
            tables.add(other.sink.table)
    return jobs


def fill_columns(job: JobSpec, columns: list[str] | None) -> dict[str, str]:
    """The columns to fill (default: every column of the source's schema) with their types; unknown ones refused."""
    schema = job.source.schema
    unknown = [c for c in columns or [] if c not in schema]
    if unknown:
        raise BackfillRefused(f"source {job.source.name!r} declares no column {', '.join(map(repr, unknown))} "
                              f"(it declares {', '.join(schema)}): add it to the registry first; its start evolves "
                              "the tables")
    return {c: schema[c] for c in columns or schema}


def _rescued_value(column: str, ctype: str) -> tuple[Column, Column]:
    """(the rescued value of `column` fits its type and the column is null, that value typed)."""
    rescued = F.col(RESCUED_COLUMN)
    parsed = json_fields(rescued, {column: ctype})
    typed = typed_value(parsed[column], ctype)
    fits = (F.col(column).isNull() & F.array_contains(F.json_object_keys(rescued), column)
            & strict_json.strict_reason(rescued, {column: ctype}).isNull()
            & parsed["_corrupt_record"].isNull() & typed.isNotNull())
    return fits, typed


def count_fills(spark: SparkSession, path: str, table: str, columns: dict[str, str]) -> list[ColumnFill]:
    """Per column, the rows a backfill of `table` fills and those whose rescued value does not fit."""
    frame = spark.read.format("delta").load(path).where(F.col(RESCUED_COLUMN).isNotNull())
    present = set(frame.columns)
    columns = {c: t for c, t in columns.items() if c in present}
    if not columns:
        return []
    sums = []
    for column, ctype in columns.items():
        fits, _ = _rescued_value(column, ctype)
        carried = F.col(column).isNull() & F.array_contains(F.json_object_keys(RESCUED_COLUMN), column)
        sums += [F.sum(fits.cast("long")).alias(f"f_{column}"), F.sum((carried & ~fits).cast("long")).alias(f"n_{column}")]
    row = frame.agg(*sums).first()
    return [ColumnFill(table, c, int(row[f"f_{c}"] or 0), int(row[f"n_{c}"] or 0)) for c in columns]


def update_table(spark: SparkSession, path: str, columns: dict[str, str], properties: dict[str, str]) -> None:
    """One Delta UPDATE: each column that is null and whose rescued value fits takes it; the filled fields leave
    `_rescued` (null when none is left)."""
    from delta.tables import DeltaTable


    fills = {c: _rescued_value(c, t) for c, t in columns.items()}
    condition = None
    for fits, _ in fills.values():
        condition = fits if condition is None else condition | fits
    filled_names = F.concat_ws(",", *[F.when(fits, F.lit(c)) for c, (fits, _) in fills.items()])
    assignments = {c: F.when(fits, typed).otherwise(F.col(c)) for c, (fits, typed) in fills.items()}
    assignments[RESCUED_COLUMN] = F.call_udf(RESCUED_FIELDS_FUNCTION, F.col(RESCUED_COLUMN).cast("binary"),
                                             filled_names)
    with appends_opened(spark, path, properties), session_confs(spark, {COMMIT_METADATA: BACKFILL_TAG}):
        DeltaTable.forPath(spark, path).update(condition, assignments)


def backfill(spark: SparkSession, settings: Settings, registry: Registry, job_id: str,
             columns: list[str] | None = None, *, dry_run: bool = False, actor: str | None = None) -> list[ColumnFill]:
    """Fill `columns` (default: all the source declares) from `_rescued` in the bronze job's table and its
    pass-through copies downstream; with `dry_run`, only count. Returns what was (would be) filled per table."""
    jobs = backfill_jobs(registry, job_id)
    wanted = fill_columns(jobs[0], columns)
    actor = actor or checkpoint_audit.default_actor()
    report: list[ColumnFill] = []
    with lease.hold(settings, [j.id for j in jobs], action="backfill"):
        for job in jobs:
            table = job.sink.table
            path = settings.layout.table(table)
            if not delta_store.table_exists(path):
                continue
            counts = count_fills(spark, str(path), table, wanted)
            report += counts
            todo = {c.column: wanted[c.column] for c in counts if c.filled}
            detail = "; ".join(f"{c.column}: {c.filled} rows filled from {RESCUED_COLUMN}"
                               + (f", {c.not_fitting} kept there (the value does not fit {wanted[c.column]})"
                                  if c.not_fitting else "") for c in counts) or "no column of the request in the table"
            before = delta_store.latest_version(path)
            if todo and not dry_run:
                update_table(spark, str(path), todo, job.sink.properties)
            after = delta_store.latest_version(path)
            outcome = "dry-run" if dry_run else "done"
            log.info("job=%s: backfill of %s from %s (%s): %s", job.id, table, RESCUED_COLUMN, outcome, detail)
            checkpoint_audit.record(settings, [{
                "at": datetime.now(UTC), "actor": actor, "job": job.id, "mode": "backfill", "dry_run": dry_run,
                "outcome": outcome, "detail": f"{table}: {detail}" + (f" (version {after})" if after != before else ""),
                "plan": json.dumps({"columns": list(wanted)}), "batch_before": None, "batch_after": None,
                "versions_before": json.dumps({table: before}), "versions_after": json.dumps({table: after}),
                "archived_to": None}])
    return report


def render(report: list[ColumnFill], dry_run: bool) -> str:
    """One line per table and column."""
    verb = "would fill" if dry_run else "filled"
    return "\n".join(f"{c.table} {c.column}: {verb} {c.filled} rows" + (
        f"; {c.not_fitting} rows keep it in {RESCUED_COLUMN} (the value does not fit the column's type)"
        if c.not_fitting else "") for c in report) or "nothing to fill"
