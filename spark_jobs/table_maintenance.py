"""Table maintenance with delta-spark: OPTIMIZE (compaction of the many small files micro-batches make)
and VACUUM (data files no longer referenced and older than the retention), per table, recorded in
`_ops/maintenance`.

`lakehouse maintain [<table>...]` runs it in this process; the `lakehouse_maintenance` DAG through
`spark-submit spark_jobs/entrypoints/maintain_tables.py [<table>...]` (the one launch path). The retention comes from the
writer's `sink.maintenance.vacuum_retention` (default 7 days, Delta's; lower only when the registry says
so). Compaction is skipped while the table's writer holds its lease and upserts (MERGE): the two would
conflict and fail the writer's batch. Appends and VACUUM do not conflict with a running writer.
"""

from __future__ import annotations

import argparse
import logging
import sys
import uuid

from pyspark.sql import SparkSession

from include.catalog_client.tables import named_tables, register_or_warn
from include.failures import report_failure
from include.logging_setup import configure_logging
from include.records import lease, maintenance_log
from include.records.ops_maintenance import maintain_ops_tables
from include.registry import Registry, load_registry
from include.registry.vocabulary import AUTO_COMPACT
from include.settings import Settings, load_settings
from include.spark_session import get_spark, session_confs
from include.storage.paths import StoragePath
from spark_jobs.delta_tables import is_delta_table

log = logging.getLogger(__name__)

DELTA_DEFAULT_RETENTION_HOURS = 168
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# Delta 4 ignores VACUUM's retention argument unless it is 0 (it takes the table's delta.deletedFileRetentionDuration):
# the registry's retention was silently 7 days until the soak saw nothing deleted. Honoured for the call.
RETENTION_ARGUMENT_IGNORED = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def maintain(spark: SparkSession, settings: Settings, registry: Registry, tables: list[str] | None = None,
             run_id: str = "") -> list[dict]:
    """Compact and vacuum `tables` (default: all, then the operational tables: retention, compaction, vacuum, log
    cleanup; then every table named in the catalog, as `lakehouse catalog sync`); returns the `_ops/maintenance`
    rows it recorded."""
    known = registry.tables_written()
    unknown = [t for t in tables or [] if t not in known]
    if unknown:
        raise KeyError(f"unknown table(s) {', '.join(unknown)}; the registry's tables: {', '.join(known)}")
    run_id = run_id or f"maintain-{uuid.uuid4().hex[:8]}"
    rows: list[dict] = []
    for table in tables or known:
        rows += _maintain_table(spark, settings, registry, table, run_id)
    maintenance_log.record(settings, rows)
    if not tables:  # every table: the operational ones too (include/records/ops_maintenance.py), and their names
        rows += maintain_ops_tables(settings, run_id)

        register_or_warn(spark, settings, named_tables(settings, registry))
    return rows


def _maintain_table(spark, settings, registry, table: str, run_id: str) -> list[dict]:
    writer = registry.writer_of(table)  # several only for a shared alert table: append mode, the same sink
    path = settings.layout.table(table)
    base = {"run_id": run_id, "table": table, "job": ",".join(w.id for w in registry.writers_of(table))}
    if not is_delta_table(path):
        return [maintenance_log.row(base, op, "skipped", "the table does not exist yet") for op in ("optimize", "vacuum")]
    spec = writer.sink.maintenance
    upserting = lease.holder(settings, writer.id) if writer.sink.mode == "update" else None
    rows = []
    if not spec.optimize:
        rows.append(maintenance_log.row(base, "optimize", "skipped", "sink.maintenance.optimize is false"))
    elif upserting is not None:
        holder = upserting.describe()
        by_writer = writer.sink.properties.get(AUTO_COMPACT) == "true"
        rows.append(maintenance_log.row(base, "optimize", "skipped",
                         f"{holder}; it upserts (MERGE) into this table, which compaction would conflict with: "
                         + ("the writer compacts it as it commits (delta.autoOptimize.autoCompact)" if by_writer
                            else "compacted on a later run")))
    else:
        rows.append(maintenance_log.timed(base, "optimize", lambda: _optimize(spark, path)))
    rows.append(maintenance_log.timed(base, "vacuum", lambda: _vacuum(spark, path, spec.vacuum_retention_hours)))
    return rows


def _optimize(spark: SparkSession, path: StoragePath) -> dict:
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, str(path))
    before = _version(table)
    metrics = table.optimize().executeCompaction().first()["metrics"]
    removed, added = int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])
    return {"detail": f"compacted {removed} files into {added}", "files_before": removed, "files_after": added,
            "version_before": before, "version_after": _version(table)}


def _vacuum(spark: SparkSession, path: StoragePath, retention_hours: int) -> dict:
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, str(path))
    before_files, before = _data_files(path), _version(table)
    # Delta lists the table's directories in a Spark job of this many tasks, Spark's default 10,000 whatever the
    # table: ~30 s of empty tasks per table on 2 cores. A few per core of the application is plenty.
    confs = {LISTING_PARALLELISM: str(4 * spark.sparkContext.defaultParallelism), RETENTION_ARGUMENT_IGNORED: "false"}
    if retention_hours < DELTA_DEFAULT_RETENTION_HOURS:  # the registry asked for it explicitly: for this call only
        confs[RETENTION_CHECK] = "false"
    with session_confs(spark, confs):
        table.vacuum(float(retention_hours))
    after_files = _data_files(path)
    return {"detail": f"retention {retention_hours} hours: deleted {before_files - after_files} unreferenced files",
            "files_before": before_files, "files_after": after_files, "version_before": before,
            "version_after": _version(table)}


def _version(table) -> int:
    return int(table.history(1).first()["version"])


def _data_files(path: StoragePath) -> int:
    return sum(1 for p in path.rglob("*.parquet") if "_delta_log" not in p.parts)


def render(rows: list[dict]) -> str:
    """One line per table and operation."""
    width = max((len(r["table"]) for r in rows), default=5)
    return "\n".join(f"{r['table']:<{width}}  {r['operation']:<8}  {r['outcome']:<7}  {r['detail']}" for r in rows)


def run(settings: Settings, tables: list[str], run_id: str = "") -> int:
    """Maintain `tables` (default: all) in this process; exit code 1 when an operation failed."""
    registry = load_registry(settings.registry_path)
    spark = get_spark(settings, app_name="lakehouse-maintain")
    rows = maintain(spark, settings, registry, tables or None, run_id)
    sys.stdout.write(render(rows) + "\n")
    return 1 if any(r["outcome"] == "failed" for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    """`spark-submit spark_jobs/entrypoints/maintain_tables.py [<table>...] [--run-id ID]` (the lakehouse_maintenance DAG)."""
    parser = argparse.ArgumentParser(prog="spark_jobs/entrypoints/maintain_tables.py", description=main.__doc__)
    parser.add_argument("tables", nargs="*")
    parser.add_argument("--run-id", default="")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        settings.require_writable_root()
    except ValueError as exc:
        return report_failure("lakehouse maintain", exc)
    configure_logging(settings)
    try:
        return run(settings, args.tables, args.run_id)
    except Exception as exc:
        return report_failure("lakehouse maintain", exc)
