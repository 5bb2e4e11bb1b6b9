"""The job's Delta tables through delta-spark: created from the registry, their properties kept in line.

Every operation here names a table by its path through Delta's own API, never in SQL: Spark resolves a
``delta.`path` `` statement in the session catalog first, so in a driver whose metastore stopped answering it fails
(after seconds of Hive's retries), and a query restarted there could not start. The catalog is never on a job's path.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType

from include.catalog_client.tables import NamedTable, catalog_name, ops_tables, register_or_warn
from include.checkpoints.plan import OutputEdits
from include.kafka.connection import bootstrap_servers
from include.kafka.offsets import require_topics
from include.lineage.emitter import ensure_lineage_topic
from include.registry import QUARANTINE_SCHEMA, JobSpec, Registry
from include.registry.cdc import ApplyChanges
from include.registry.columns import delta_widens, type_name
from include.settings import Settings
from include.storage.delta import (  # reader-writer table features: the protocol rises
    COLUMN_MAPPING,
    TYPE_WIDENING,
)
from include.storage.paths import StoragePath
from spark_jobs.schemas import spark_schema

log = logging.getLogger(__name__)


def is_delta_table(path: StoragePath) -> bool:
    return (path / "_delta_log").is_dir() and any((path / "_delta_log").glob("*.json"))


CONCURRENT_CREATE_SECONDS = 30.0


def ensure_table(spark: SparkSession, path: StoragePath, columns: dict[str, str], partition_by: tuple[str, ...] = (),
                 properties: dict[str, str] | None = None, evolve: bool = False,
                 renamed: dict[str, str] | None = None, dropped: tuple[str, ...] = ()) -> None:
    """Create the Delta table at `path` (schema, partitioning, properties) unless it exists; an existing one must have
    the registry's columns (in any order: rows are written by name), and gets the registry's properties where they
    differ. With `evolve` (its writer starting), columns the registry adds are added to it, nullable, in one
    version, and numbers it widens are widened; `renamed` (new name -> former name) and `dropped` columns are
    renamed and dropped in place, by column mapping (an `evolve` plan: include/checkpoints/plan.py)."""
    from delta.tables import DeltaTable

    properties = properties or {}
    if not is_delta_table(path):
        try:
            create_table(spark, path, spark_schema(columns), partition_by, properties)
            log.info("created Delta table %s", path)
        except Exception:
            # Jobs started together create their shared tables together: the loser sees the winner's directory
            # before its first commit. Wait for that commit; without one it is a real failure.
            deadline = time.monotonic() + CONCURRENT_CREATE_SECONDS
            while not is_delta_table(path) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not is_delta_table(path):
                raise
        return
    table = DeltaTable.forPath(spark, str(path))
    existing = {f.name: f.dataType for f in table.toDF().schema.fields}
    renamed = {new: old for new, old in (renamed or {}).items() if old in existing and new not in existing}
    dropped = tuple(c for c in dropped if c in existing and c not in columns)
    if renamed or dropped:
        map_columns(spark, path, renamed, dropped)
        existing = {f.name: f.dataType for f in DeltaTable.forPath(spark, str(path)).toDF().schema.fields}
    wanted = spark_schema(columns)
    missing = [f for f in wanted.fields if f.name not in existing]
    retyped = [f for f in wanted.fields if f.name in existing and existing[f.name] != f.dataType]
    widened = [f for f in retyped if evolve and is_widening(existing[f.name], f.dataType)]
    if set(existing) - set(columns) or len(widened) < len(retyped) or (missing and not evolve):
        raise ValueError(f"Delta table {path} has columns {describe(existing)}, the registry declares "
                         f"{describe({f.name: f.dataType for f in wanted.fields})}; `lakehouse checkpoint plan` says "
                         "what the change needs (a column added to a job's output, or a number widened, is changed "
                         "in place when the job starts)")
    if missing:
        add_columns(spark, path, missing)
        log.info("Delta table %s: added columns %s (from the registry)", path,
                 ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing))
    if widened:
        widen_columns(spark, path, widened)
        log.info("Delta table %s: widened %s in place (from the registry; no file rewritten)", path,
                 ", ".join(f"`{f.name}` {existing[f.name].simpleString()} -> {f.dataType.simpleString()}"
                           for f in widened))
    current = table_properties(spark, path)
    changed = {k: v for k, v in properties.items() if current.get(k) != v}
    if changed:
        set_table_properties(spark, path, changed)
        log.info("Delta table %s: set %s (from the registry)", path,
                 ", ".join(f"'{k}' = '{v}'" for k, v in changed.items()))


def _path_table(spark: SparkSession, path: StoragePath):
    """Delta's table object (DeltaTableV2) for `path`, reached without the session catalog."""
    jvm = spark._jvm
    no_options = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap({})
    return jvm.org.apache.spark.sql.delta.catalog.DeltaTableV2.apply(
        spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(str(path)), no_options, "lakehouse")


def create_table(spark: SparkSession, path: StoragePath, schema: StructType, partition_by: tuple[str, ...],
                 properties: dict[str, str]) -> None:
    """CREATE TABLE delta.`path` as Delta's CREATE TABLE commits an empty table (one transaction on the path's log:
    schema, partitioning, validated properties, no data file), without the session catalog: its own CREATE reads
    the new table back through the catalog."""
    jvm, utils = spark._jvm, spark._jvm.org.apache.spark.api.python.PythonUtils
    delta = jvm.org.apache.spark.sql.delta
    configuration = delta.DeltaConfigs.validateConfigurations(utils.toScalaMap(properties))
    metadata = delta.actions.Metadata(
        str(uuid.uuid4()), None, None, delta.actions.Format("parquet", utils.toScalaMap({})), schema.json(),
        utils.toSeq(list(partition_by)), configuration, jvm.scala.Some(int(time.time() * 1000)))
    transaction = delta.DeltaLog.forTable(spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(str(path))) \
        .startTransaction()
    transaction.updateMetadataForNewTable(metadata)
    operation = getattr(delta, "DeltaOperations$CreateTable")(metadata, False, False, jvm.scala.Option.empty())
    transaction.commit(utils.toSeq([]), operation)


def add_columns(spark: SparkSession, path: StoragePath, fields: list[StructField]) -> None:
    """ALTER TABLE … ADD COLUMNS (nullable, at the end, one version) through Delta's own command on the path."""
    jvm = spark._jvm
    none = jvm.scala.Option.empty()
    parse = spark._jsparkSession.parseDataType
    columns = [jvm.org.apache.spark.sql.catalyst.plans.logical.QualifiedColType(
        none, field.name, parse(field.dataType.json()), True, none, none, none) for field in fields]
    command = jvm.org.apache.spark.sql.delta.commands.AlterTableAddColumnsDeltaCommand(
        _path_table(spark, path), jvm.org.apache.spark.api.python.PythonUtils.toSeq(columns))
    command.run(spark._jsparkSession)


def is_widening(before, after) -> bool:
    """Whether Delta's type widening changes a column of Spark type `before` to `after` in place."""
    return delta_widens(type_name(before.simpleString()), type_name(after.simpleString()))


def widen_columns(spark: SparkSession, path: StoragePath, fields: list[StructField]) -> None:
    """ALTER TABLE … ALTER COLUMN … TYPE (a wider type: type widening, enabled first where it is not) through Delta's
    own command on the path, one version per column; the files written before keep their type and read widened."""
    if table_properties(spark, path).get(TYPE_WIDENING) != "true":
        set_table_properties(spark, path, {TYPE_WIDENING: "true"})
    jvm = spark._jvm
    utils = jvm.org.apache.spark.api.python.PythonUtils
    parse = spark._jsparkSession.parseDataType
    for field in fields:
        column = jvm.org.apache.spark.sql.types.StructField(
            field.name, parse(field.dataType.json()), True, jvm.org.apache.spark.sql.types.Metadata.empty())
        spec = jvm.org.apache.spark.sql.delta.commands.DeltaChangeColumnSpec(
            utils.toSeq([]), field.name, column, jvm.scala.Option.empty(), False)
        jvm.org.apache.spark.sql.delta.commands.AlterTableChangeColumnDeltaCommand(
            _path_table(spark, path), utils.toSeq([spec])).run(spark._jsparkSession)


def map_columns(spark: SparkSession, path: StoragePath, renamed: dict[str, str], dropped: tuple[str, ...]) -> None:
    """Rename (new name -> former name) and drop columns in place: column mapping (name mode) enabled first where it
    is not (the protocol rises), then ALTER TABLE … RENAME COLUMN (one version) and … DROP COLUMNS (one version)
    through Delta's own commands on the path. No file is rewritten: the rows written before read under the new
    names, and a dropped column's values stay in its files, unread."""
    if table_properties(spark, path).get(COLUMN_MAPPING) != "name":
        set_table_properties(spark, path, {COLUMN_MAPPING: "name"})
        log.info("Delta table %s: column mapping (name mode) enabled", path)
    jvm = spark._jvm
    utils = jvm.org.apache.spark.api.python.PythonUtils
    commands = jvm.org.apache.spark.sql.delta.commands
    if renamed:
        schema = _path_table(spark, path).update().metadata().schema()
        specs = []
        for new, old in renamed.items():
            field = schema.apply(old)  # its column mapping metadata (physical name, id) goes with it
            column = jvm.org.apache.spark.sql.types.StructField(new, field.dataType(), field.nullable(), field.metadata())
            specs.append(commands.DeltaChangeColumnSpec(utils.toSeq([]), old, column, jvm.scala.Option.empty(), False))
        commands.AlterTableChangeColumnDeltaCommand(_path_table(spark, path), utils.toSeq(specs)).run(
            spark._jsparkSession)
        log.info("Delta table %s: renamed %s in place (from the registry)", path,
                 ", ".join(f"`{old}` to `{new}`" for new, old in renamed.items()))
    if dropped:
        commands.AlterTableDropColumnsDeltaCommand(
            _path_table(spark, path), utils.toSeq([utils.toSeq([c]) for c in dropped])).run(spark._jsparkSession)
        log.info("Delta table %s: dropped %s in place (from the registry; the files keep their values)", path,
                 ", ".join(f"`{c}`" for c in dropped))


def table_properties(spark: SparkSession, path: StoragePath) -> dict[str, str]:
    """The table's properties, read from its latest metadata (DESCRIBE DETAIL would also count its files, which
    replays the table's whole state: seconds at a driver's start)."""
    configuration = _path_table(spark, path).update().metadata().configuration()
    return dict(spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava(configuration))


def set_table_properties(spark: SparkSession, path: StoragePath, properties: dict[str, str]) -> None:
    """ALTER TABLE … SET TBLPROPERTIES through Delta's own command, on the table's path."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    configuration = delta.DeltaConfigs.validateConfigurations(jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(
        properties))
    command = delta.commands.AlterTableSetPropertiesDeltaCommand(_path_table(spark, path), configuration)
    command.run(spark._jsparkSession)


def describe(schema: dict) -> str:
    return ", ".join(f"{name} {dtype.simpleString()}" for name, dtype in schema.items())


def ensure_job_tables(spark: SparkSession, settings: Settings, registry: Registry, job: JobSpec,
                      edits: OutputEdits | None = None) -> None:
    """The job's landing directory and its source and sink tables, created empty where missing (a source table that
    exists is its writer's: this job reads whatever schema it has); a Kafka source's broker and topics checked.
    `edits`: the renames and drops of the job's `evolve` plan, made in its sink table."""
    for source in job.sources:
        if source.kind == "landing":  # nothing landed yet is an empty stream, not an error
            settings.layout.landing(source.path).mkdir(parents=True, exist_ok=True)
        elif source.kind == "kafka":  # a broker that is down, or a topic missing: one line, before Spark's trace
            bootstrap = bootstrap_servers(settings, source.kafka.connection)
            ensure_lineage_topic(settings, bootstrap, source.kafka.topics)
            require_topics(bootstrap, source.kafka.topics)
        elif not is_delta_table(settings.layout.table(source.name)):
            writer = registry.writer_of(source.name)
            sink = writer.sink if writer and writer.sink.table == source.name else None
            ensure_table(spark, settings.layout.table(source.name), registry.table_schemas[source.name],
                         sink.partition_by if sink else (), sink.properties if sink else None)
    sink = job.sink
    ensure_table(spark, settings.layout.table(sink.table), job.output_schema, sink.partition_by, sink.properties,
                 evolve=True, renamed=edits.renamed if edits else None, dropped=edits.dropped if edits else ())
    if sink.quarantine_table:
        ensure_table(spark, settings.layout.table(sink.quarantine_table), QUARANTINE_SCHEMA, (), sink.properties)
    deletes = job.transform.deletes_table(sink.table) if isinstance(job.transform, ApplyChanges) else None
    if deletes:  # a type 1 job's deleted keys (include/registry/cdc.py)
        ensure_table(spark, settings.layout.table(deletes), registry.table_schemas[deletes], evolve=True)
    register_or_warn(spark, settings, [NamedTable(catalog_name(t), settings.layout.table(t))
                                        for t in job.tables_written()] + ops_tables(settings))


@contextmanager
def appends_opened(spark: SparkSession, path: StoragePath, properties: dict[str, str]) -> Iterator[None]:
    """Let a DELETE or RESTORE rewrite an append-only table (`delta.appendOnly`), then close it again as the
    registry's `properties` say (also when an earlier try was cut short with the table left open)."""
    current = table_properties(spark, path)
    if current.get("delta.appendOnly") == "true":
        set_table_properties(spark, path, {"delta.appendOnly": "false"})
    try:
        yield
    finally:
        if properties.get("delta.appendOnly") == "true":
            set_table_properties(spark, path, {"delta.appendOnly": "true"})
