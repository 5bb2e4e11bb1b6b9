"""The streaming DataFrame of each transform kind, built from a registry JobSpec."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from functools import reduce

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from include.checkpoints.plan import delta_start_options
from include.kafka.connection import bootstrap_servers
from include.kafka.offsets import starting_options
from include.registry import PROCESSORS, RESCUED_COLUMN, JobSpec, SourceSpec
from include.settings import Settings
from include.storage.paths import StoragePath
from spark_jobs import landing, strict_json
from spark_jobs.cdc_apply import changes
from spark_jobs.cdc_parse import parse_changes
from spark_jobs.json_values import (
    KAFKA_COORDINATES,
    RAW_LINE,
    bronze_tail,
    field_reasons,
    json_fields,
    kafka_coordinates,
    raw_line,
    rescued_fields,
    typed_value,
)
from spark_jobs.schemas import spark_schema, spark_type

log = logging.getLogger(__name__)

def source_stream(spark: SparkSession, settings: Settings, source: SourceSpec,
                  starting: dict[str, str] | None = None, available_now: bool = False,
                  skip_changes: frozenset[str] = frozenset(), new_checkpoint: bool = False,
                  checkpoint: StoragePath | None = None) -> DataFrame:
    """An input stream: landing files (raw lines), Kafka messages, or the new commits of a Delta table (Delta's
    streaming source; its change data feed for an upserted table). A micro-batch admits what the source's limits
    allow under the trigger (a backfill's own limits under available-now: SourceSpec.admission).
    `starting` positions the source of a new checkpoint (Delta: ``startingVersion`` / ``startingTimestamp``;
    Kafka: ``startingOffsets`` / ``startingTimestamp``), over the registry's `starting_offsets`. Without it, a
    `new_checkpoint` reads a Delta table from its first commit when that can be done (:func:`first_commit_start`).
    Delta tables named in `skip_changes` are read with ``skipChangeCommits``: their unread row changes are backfills
    (spark_jobs.rescued_backfill), passed over. A Delta table whose columns were renamed or dropped in place is read
    through a schema log in the query's `checkpoint` (:func:`schema_tracking_options`), and its columns come under
    today's names."""
    reader = spark.readStream
    limits = source.admission(available_now)
    if limits.max_files:
        reader = reader.option("maxFilesPerTrigger", limits.max_files)
    if limits.max_bytes:
        reader = reader.option("maxBytesPerTrigger", limits.max_bytes)
    if source.kind == "landing":
        reader = reader.options(**landing.reader_options(source))
        return reader.format("text").load(str(settings.layout.landing(source.path)))
    if source.kind == "kafka":
        return kafka_stream(reader, settings, source, limits.max_offsets, starting)
    if source.read_change_feed:
        reader = reader.option("readChangeFeed", "true")
    if source.name in skip_changes:
        reader = reader.option("skipChangeCommits", "true")
    table = settings.layout.table(source.name)
    if starting:
        from include.storage import delta as delta_store

        starting = delta_start_options(starting, source.name, delta_store.latest_version(table))
    elif new_checkpoint and not source.read_change_feed:
        starting = first_commit_start(settings, source)
    # a start after the table's last commit has no schema to start a log with: Delta starts it at the first rows
    tracking = schema_tracking_options(table, checkpoint) if (starting or {}).get("startingVersion") != "latest" else {}
    for option, value in {**(starting or {}), **tracking}.items():
        reader = reader.option(option, value)
    return under_new_names(reader.format("delta").load(str(table)), source)


SCHEMA_TRACKING = "_schema_tracking"  # in a job's checkpoint: Delta's schema log of each table it reads
# The reader options that let a query read on past a column renamed, dropped or widened in a table it reads: set only
# for tables with column mapping or type widening on, which the product turns on from the registry (an `evolve`
# plan); it maps the former names itself (under_new_names).
SCHEMA_CHANGES_ALLOWED = {"allowSourceColumnRename": "always", "allowSourceColumnDrop": "always",
                          "allowSourceColumnTypeChange": "always"}


def schema_tracking_options(table: StoragePath, checkpoint: StoragePath | None) -> dict[str, str]:
    """Delta's streaming source stops for good at a column renamed or dropped in the table it reads unless it keeps a
    schema log (``schemaTrackingLocation``, under the query's checkpoint): with one it reads the commits before the
    change under the schema they were written with, stops once at the change (DELTA_STREAMING_METADATA_EVOLUTION:
    the query starts again) and reads on under the new one. Every query over a Delta table keeps one: Delta starts
    the log when a query starts a new checkpoint, or at the first batch that reads rows (not at a batch that reads
    nothing), so it must be there before a rename comes."""
    from include.storage import delta as delta_store

    if checkpoint is None:
        return {}
    options = {"schemaTrackingLocation": str(checkpoint / SCHEMA_TRACKING)}
    if delta_store.evolved_in_place(table):
        options.update(SCHEMA_CHANGES_ALLOWED)
    return options


def under_new_names(stream: DataFrame, source: SourceSpec) -> DataFrame:
    """The stream with the columns its source renamed under their new names: commits written before a rename are
    read under the names they were written with."""
    for new, old in source.renamed_from.items():
        if old in stream.columns and new not in stream.columns:
            stream = stream.withColumnRenamed(old, new)
    return stream


def first_commit_start(settings: Settings, source: SourceSpec) -> dict[str, str]:
    """``startingVersion=0`` for a new checkpoint over a Delta table whose commits from its first hold exactly its
    rows (include.storage.delta.why_not_commit_order): its batches then follow the commits, in order, as a query
    that read the table from its creation did. Otherwise {}: Delta reads the table's snapshot first, its files
    ordered by modification time and then name; on S3, where those times are whole seconds, files committed within
    one second come in name (random) order, and which rows a watermark drops as late would depend on it."""
    from include.storage import delta as delta_store

    path = settings.layout.table(source.name)
    if not delta_store.table_exists(path):
        return {}
    why_not = delta_store.why_not_commit_order(path)
    if why_not:
        log.info("new checkpoint: reads %s from its latest snapshot (%s)", source.name, why_not)
        return {}
    log.info("new checkpoint: reads %s from its first commit, in commit order", source.name)
    return {"startingVersion": "0"}


def kafka_stream(reader, settings: Settings, source: SourceSpec, max_offsets: int | None,
                 starting: dict[str, str] | None) -> DataFrame:
    """Spark's Kafka source over the source's topics: offsets in the checkpoint, never in a consumer group."""
    topics = source.kafka
    reader = (reader.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap_servers(settings, topics.connection))
              .option("subscribe", ",".join(topics.topics))
              .option("failOnDataLoss", str(topics.fail_on_data_loss).lower()))
    timeout_ms = str(settings.kafka_timeout_seconds * 1000)  # a lost broker fails the query in ~3 tries of this
    reader = reader.option("kafka.default.api.timeout.ms", timeout_ms).option("kafka.request.timeout.ms", timeout_ms)
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets)
    for option, value in (starting or starting_options(topics.starting_offsets)).items():
        reader = reader.option(option, value)
    return reader.load()


def parse_json(raw: DataFrame, job: JobSpec) -> DataFrame:
    """Typed rows plus the raw line and a quarantine reason (null when the line is good): not UTF-8, what a strict
    JSON parse finds (spark_jobs.strict_json), a value Spark cannot read into its column, a missing required
    field, an unparseable time. A landing line's rows name its file; a Kafka message's its coordinates. A CDC
    source's messages are Debezium's change events (spark_jobs/cdc_parse.py)."""
    if job.source.cdc is not None:
        return parse_changes(raw, job)
    schema, renamed = job.source.schema, job.source.renamed_from
    read = {**schema, **{old: schema[new] for new, old in renamed.items()}}  # a line may still carry a former name
    kafka = job.source.kind == "kafka"
    text = F.col("value").cast("string") if kafka else F.col("value")  # a message's bytes, unchecked, as text
    # Lines that are not UTF-8 keep their exact bytes, escaped, so that every reader of the quarantine can read it.
    utf8 = F.coalesce(F.is_valid_utf8(text), F.lit(True))
    parsed = raw.select(
        raw_line(text, utf8).alias(RAW_LINE),
        *(kafka_coordinates() if kafka else [F.col("_metadata.file_path").alias("_source_file")]),
        F.current_timestamp().alias("_ingested_at"),
        json_fields(text, read).alias("j"),
        rescued_fields(text, read).alias(RESCUED_COLUMN),
        F.when(utf8, strict_json.strict_reason(text, read)).alias("_strict"),
        utf8.alias("_utf8"),
        F.octet_length(text).alias(landing.LINE_BYTES),
    )

    def field(column: str) -> Column:  # the line's value of `column`, under its former name while the producer sends that
        value = F.col("j")[column]
        return F.coalesce(value, F.col("j")[renamed[column]]) if column in renamed else value

    typed = {column: typed_value(field(column), ctype) for column, ctype in schema.items()}
    reason = F.when(F.col(RAW_LINE).isNull(), F.lit("empty_message")).when(~F.col("_utf8"), F.lit("invalid_utf8")).when(
        F.col("_strict").isNotNull(), F.col("_strict")).when(
        F.col("j").isNull() | F.col("j._corrupt_record").isNotNull(), F.lit("wrong_type"))
    reason = field_reasons(reason, field, schema, job.source.required, typed)
    provenance = [*KAFKA_COORDINATES, "_source_file"] if kafka else ["_source_file"]
    return parsed.select(
        *[expr.alias(column) for column, expr in typed.items()],
        *bronze_tail(reason, provenance),
    )


def deduplicate(stream: DataFrame, job: JobSpec) -> DataFrame:
    return with_watermark(stream, job.source).dropDuplicatesWithinWatermark(list(job.transform.keys))


def with_watermark(stream: DataFrame, source: SourceSpec) -> DataFrame:
    return stream.withWatermark(source.event_time, f"{source.watermark_seconds} seconds")


def sql_expression(stream: DataFrame, job: JobSpec, field: str, sql: str, ctype: str) -> Column:
    """A registry SQL expression over the stream's columns, cast to its declared type; a ValueError naming the job
    and field when Spark cannot resolve it."""
    column = F.expr(sql).cast(spark_type(ctype))
    try:
        stream.select(column)  # analysed now: the error names the field, not a failing query later
    except AnalysisException as exc:
        reason = str(exc).strip().splitlines()[0]
        raise ValueError(f"job {job.id!r}: {field}: {sql!r} is not an expression over the source's columns "
                         f"({', '.join(stream.columns)}): {reason}") from None
    return column


def _aggregate(stream: DataFrame, job: JobSpec, window, prefix: str) -> DataFrame:
    """Group the watermarked stream by `window` (a time or session window column) and the keys (columns or SQL
    expressions); aggregate columns, SQL expressions or rows (count without a column)."""
    spec = job.transform
    inputs = {agg.name: (F.lit(1) if agg.column is None and agg.expr is None else
                         F.col(agg.column) if agg.expr is None else
                         sql_expression(stream, job, f"transform.aggregations.{agg.name}.expr", *agg.expr))
              for agg in spec.aggregations}
    aggregations = [getattr(F, agg.fn)(inputs[agg.name]).alias(agg.name) for agg in spec.aggregations]
    keys = [sql_expression(stream, job, f"transform.keys.{k}", *spec.key_expressions[k]).alias(k)
            if k in spec.key_expressions else F.col(k) for k in spec.keys]
    if window is None:  # running totals: no window, no watermark (the state keeps every key)
        return stream.groupBy(*keys).agg(*aggregations).select(*spec.keys, *(agg.name for agg in spec.aggregations))
    grouped = with_watermark(stream, job.source).groupBy(window.alias("w"), *keys).agg(*aggregations)
    return grouped.select(
        F.col("w.start").alias(f"{prefix}_start"), F.col("w.end").alias(f"{prefix}_end"), *spec.keys,
        *(agg.name for agg in spec.aggregations),
    )


def window_aggregate(stream: DataFrame, job: JobSpec) -> DataFrame:
    spec = job.transform
    window = F.window(job.source.event_time, f"{spec.window_seconds} seconds", f"{spec.slide_seconds} seconds",
                      f"{spec.offset_seconds} seconds")
    return _aggregate(stream, job, window, "window")


def session_aggregate(stream: DataFrame, job: JobSpec) -> DataFrame:
    """Session windows: a session closes `gap` after its last event (session_end = last event + gap)."""
    gap = f"{job.transform.gap_seconds} seconds"
    return _aggregate(stream, job, F.session_window(job.source.event_time, gap), "session")


def stream_join(spark: SparkSession, settings: Settings, left: DataFrame, job: JobSpec,
                starting: dict[str, str] | None = None, available_now: bool = False,
                skip_changes: frozenset[str] = frozenset(), new_checkpoint: bool = False) -> DataFrame:
    """Stream-stream join of the source (left) with `right`, bounded in event time.

    Both sides are watermarked; a right row joins a left row when the keys are equal and its event
    time lies in [left time - before, left time + within]. An outer join emits an unmatched row of its
    outer side(s) (the other side's columns null) once the watermark shows no row can join it any more.
    """
    spec = job.transform
    if spec.where:
        left = left.where(spec.where)
    right = source_stream(spark, settings, spec.right, starting, available_now, skip_changes, new_checkpoint,
                          settings.layout.checkpoint(job.id))
    lt, rt = F.col(f"l.{job.source.event_time}"), F.col(f"r.{spec.right.event_time}")
    condition = [F.col(f"l.{a}") == F.col(f"r.{b}") for a, b in spec.join_keys]
    condition += [rt >= lt - F.expr(f"INTERVAL {spec.before_seconds} SECONDS"),
                  rt <= lt + F.expr(f"INTERVAL {spec.within_seconds} SECONDS")]
    joined = with_watermark(left, job.source).alias("l").join(
        with_watermark(right, spec.right).alias("r"),
        on=reduce(operator.and_, condition),
        how=spec.how.replace("_", ""),  # inner, leftouter, rightouter, fullouter
    )
    columns = [F.col(f"{c.side[0]}.{c.column}").alias(c.name) for c in spec.columns]
    if spec.matched_column:  # a row of each side joined (an outer join's unmatched rows have one side null)
        left_key, right_key = spec.join_keys[0]
        columns.append((F.col(f"l.{left_key}").isNotNull() & F.col(f"r.{right_key}").isNotNull())
                       .alias(spec.matched_column))
    return joined.select(*columns)


def stateful_process(spark: SparkSession, settings: Settings, stream: DataFrame, job: JobSpec) -> DataFrame:
    """The job's processor (spark_jobs/processors) over the watermarked stream, grouped by the keys; append mode:
    each output row is final when emitted. An initial state table seeds the state of a new checkpoint (Spark
    reads it in the query's first batch only)."""
    from spark_jobs.processors import processor_for

    spec = job.transform
    info = PROCESSORS[spec.processor]
    columns = dict.fromkeys([*spec.keys, job.source.event_time, *info.input_columns])
    initial = None
    if spec.initial_state_table:
        path = settings.layout.table(spec.initial_state_table)
        if not (path / "_delta_log").is_dir():
            raise ValueError(f"job {job.id!r}: transform.initial_state: no Delta table at {path}")
        wanted = [*spec.keys, *info.initial_state_schema]
        table = spark.read.format("delta").load(str(path))
        missing = [c for c in wanted if c not in table.columns]
        if missing:
            raise ValueError(f"job {job.id!r}: transform.initial_state: table {spec.initial_state_table} lacks "
                             f"{', '.join(missing)} (it needs {', '.join(wanted)})")
        table = table.select(*wanted)
        for problem, rows in (
            ("several rows for one key (one open state per key)",
             table.groupBy(*spec.keys).count().where("count > 1").drop("count")),
            ("null values", table.where(" OR ".join(f"`{c}` IS NULL" for c in wanted)).select(*spec.keys))):
            examples = [tuple(r) for r in rows.limit(3).collect()]  # a small seed table, checked before the start
            if examples:
                raise ValueError(f"job {job.id!r}: transform.initial_state: table {spec.initial_state_table} has "
                                 f"{problem}, e.g. for keys {examples}")
        initial = table.groupBy(*spec.keys)
    return (with_watermark(stream, job.source).select(*columns).groupBy(*spec.keys)
            .transformWithStateInPandas(processor_for(job), spark_schema(job.output_schema), "Append",
                                        info.time_mode, initialState=initial))


def running_aggregate(stream: DataFrame, job: JobSpec) -> DataFrame:
    """Totals per key over all time: no window, no watermark."""
    return _aggregate(stream, job, None, "")


SINGLE_STREAM_KINDS: dict[str, Callable[[DataFrame, JobSpec], DataFrame]] = {
    "parse_json": parse_json, "deduplicate": deduplicate, "window_aggregate": window_aggregate,
    "session_aggregate": session_aggregate, "running_aggregate": running_aggregate, "apply_changes": changes,
}  # the kinds built from the source stream alone (a join reads a second stream; a processor, a seed table)


def build_stream(spark: SparkSession, settings: Settings, job: JobSpec,
                 starting: dict[str, str] | None = None, available_now: bool = False,
                 skip_changes: frozenset[str] = frozenset(), new_checkpoint: bool = False) -> DataFrame:
    """The job's output stream, ready for its sink (`skip_changes`, `new_checkpoint`: see :func:`source_stream`)."""
    stream = source_stream(spark, settings, job.source, starting, available_now, skip_changes, new_checkpoint,
                           settings.layout.checkpoint(job.id))
    kind = job.transform.kind
    if kind == "stream_join":
        return stream_join(spark, settings, stream, job, starting, available_now, skip_changes, new_checkpoint)
    if kind == "stateful_process":
        return stateful_process(spark, settings, stream, job)
    return SINGLE_STREAM_KINDS[kind](stream, job)
