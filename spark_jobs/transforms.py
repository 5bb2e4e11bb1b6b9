"""The streaming DataFrame of each transform kind, built from a registry JobSpec."""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from include.registry import JobSpec, SourceSpec, parse_duration
from include.settings import Settings

QUARANTINE_REASON = "_quarantine_reason"
RAW_LINE = "raw_line"

SPARK_TYPES = {
    "string": T.StringType(),
    "double": T.DoubleType(),
    "long": T.LongType(),
    "int": T.IntegerType(),
    "boolean": T.BooleanType(),
    "timestamp": T.TimestampType(),
    "date": T.DateType(),
}


def spark_schema(columns: dict[str, str]) -> T.StructType:
    return T.StructType([T.StructField(name, SPARK_TYPES[ctype]) for name, ctype in columns.items()])


def source_stream(spark: SparkSession, settings: Settings, source: SourceSpec) -> DataFrame:
    """An input stream: landing files (raw lines) or the new commits of a Delta table."""
    reader = spark.readStream
    if source.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", source.max_files_per_trigger)
    if source.kind == "landing":
        return reader.format("text").load(str(settings.root / source.path))
    from include.delta_source import FORMAT

    return reader.format(FORMAT).schema(spark_schema(source.schema)).option(
        "path", str(settings.table_path(source.name))
    ).load()


def parse_json(raw: DataFrame, job: JobSpec) -> DataFrame:
    """Typed rows plus the raw line and a quarantine reason (null when the line is good)."""
    schema = job.source.schema
    as_text = ("timestamp", "date")
    json_schema = T.StructType(
        [T.StructField(c, T.StringType() if t in as_text else SPARK_TYPES[t]) for c, t in schema.items()]
        + [T.StructField("_corrupt_record", T.StringType())]
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
    parsed = raw.select(
        F.col("value").alias(RAW_LINE),
        F.col("_metadata.file_path").alias("_source_file"),
        F.current_timestamp().alias("_ingested_at"),
        F.from_json("value", json_schema, options).alias("j"),
    )
    typed = {}
    for column, ctype in schema.items():
        text = F.col(f"j.{column}")
        if ctype == "timestamp":
            typed[column] = F.try_to_timestamp(text)
        elif ctype == "date":
            typed[column] = F.expr(f"try_cast(j.`{column}` AS DATE)")
        else:
            typed[column] = text
    reason = F.when(F.json_object_keys(F.col(RAW_LINE)).isNull(), F.lit("malformed_json")).when(
        F.col("j._corrupt_record").isNotNull(), F.lit("wrong_type")
    )
    for column in job.source.required:
        reason = reason.when(F.col(f"j.{column}").isNull(), F.lit(f"missing_{column}"))
    for column, ctype in schema.items():
        if ctype in as_text:
            reason = reason.when(F.col(f"j.{column}").isNotNull() & typed[column].isNull(), F.lit(f"unparseable_{column}"))
    return parsed.select(
        *[expr.alias(column) for column, expr in typed.items()],
        "_source_file",
        "_ingested_at",
        RAW_LINE,
        reason.alias(QUARANTINE_REASON),
    )


def deduplicate(stream: DataFrame, job: JobSpec) -> DataFrame:
    return with_watermark(stream, job.source).dropDuplicatesWithinWatermark(list(job.transform["keys"]))


def with_watermark(stream: DataFrame, source: SourceSpec) -> DataFrame:
    return stream.withWatermark(source.event_time, f"{source.watermark_seconds} seconds")


def _aggregate(stream: DataFrame, job: JobSpec, window, prefix: str) -> DataFrame:
    """Group the watermarked stream by `window` (a time or session window column) and the keys."""
    spec = job.transform
    aggregations = []
    for name, agg in spec["aggregations"].items():
        fn = agg["fn"]
        column = F.lit(1) if fn == "count" else F.col(agg["column"])
        aggregations.append(getattr(F, fn)(column).alias(name))
    keys = list(spec["keys"])
    grouped = with_watermark(stream, job.source).groupBy(window.alias("w"), *keys).agg(*aggregations)
    return grouped.select(
        F.col("w.start").alias(f"{prefix}_start"), F.col("w.end").alias(f"{prefix}_end"), *keys, *spec["aggregations"]
    )


def window_aggregate(stream: DataFrame, job: JobSpec) -> DataFrame:
    spec = job.transform
    window_seconds = parse_duration(spec["window"])
    slide_seconds = parse_duration(spec["slide"]) if spec.get("slide") else window_seconds
    window = F.window(job.source.event_time, f"{window_seconds} seconds", f"{slide_seconds} seconds")
    return _aggregate(stream, job, window, "window")


def session_aggregate(stream: DataFrame, job: JobSpec) -> DataFrame:
    """Session windows: a session closes `gap` after its last event (session_end = last event + gap)."""
    gap_seconds = parse_duration(job.transform["gap"])
    return _aggregate(stream, job, F.session_window(job.source.event_time, f"{gap_seconds} seconds"), "session")


def stream_join(spark: SparkSession, settings: Settings, left: DataFrame, job: JobSpec) -> DataFrame:
    """Stream-stream join of the source (left) with `right`, bounded in event time.

    Both sides are watermarked; a right row joins a left row when the keys are equal and its event
    time lies in [left time, left time + within]. A left outer join emits an unmatched left row
    (right columns null) once the watermark shows no right row can join it any more.
    """
    spec, right_source = job.transform, job.right_source
    if spec.get("where"):
        left = left.where(spec["where"])
    right = source_stream(spark, settings, right_source)
    lt, rt = F.col(f"l.{job.source.event_time}"), F.col(f"r.{right_source.event_time}")
    within = parse_duration(spec["within"])
    condition = [F.col(f"l.{a}") == F.col(f"r.{b}") for a, b in spec["join_keys"].items()]
    condition += [rt >= lt, rt <= lt + F.expr(f"INTERVAL {within} SECONDS")]
    joined = with_watermark(left, job.source).alias("l").join(
        with_watermark(right, right_source).alias("r"),
        on=reduce(operator.and_, condition),
        how="leftouter" if spec.get("how") == "left_outer" else "inner",
    )
    columns = [F.col(ref.replace("left.", "l.", 1).replace("right.", "r.", 1)).alias(name)
               for name, ref in spec["columns"].items()]
    if spec.get("matched_column"):
        first_right_key = next(iter(spec["join_keys"].values()))
        columns.append(F.col(f"r.{first_right_key}").isNotNull().alias(spec["matched_column"]))
    return joined.select(*columns)


def build_stream(spark: SparkSession, settings: Settings, job: JobSpec) -> DataFrame:
    """The job's output stream, ready for its sink."""
    stream = source_stream(spark, settings, job.source)
    kind = job.transform_kind
    if kind == "parse_json":
        return parse_json(stream, job)
    if kind == "deduplicate":
        return deduplicate(stream, job)
    if kind == "window_aggregate":
        return window_aggregate(stream, job)
    if kind == "session_aggregate":
        return session_aggregate(stream, job)
    if kind == "stream_join":
        return stream_join(spark, settings, stream, job)
    raise ValueError(f"job {job.id!r}: unknown transform kind {kind!r}")
