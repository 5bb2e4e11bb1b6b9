"""The values of a JSON text as bronze reads them: its fields typed by the registry's schema, what it carries beyond
that schema, and a Kafka message's coordinates. Shared by the bronze parses of landing lines and Kafka messages
(spark_jobs/transforms.py) and of Debezium's change events (spark_jobs/cdc_parse.py)."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from include.registry import RESCUED_COLUMN
from include.spark_session import RESCUED_FIELDS_FUNCTION
from spark_jobs import strict_json
from spark_jobs.landing import LINE_BYTES
from spark_jobs.schemas import spark_type

QUARANTINE_REASON = "_quarantine_reason"
RAW_LINE = "raw_line"
TEXT_TIME_TYPES = ("timestamp", "date")  # read from JSON as text, then parsed (an unparseable one: quarantined)
BASE64_PREFIX = "base64:"  # raw_line of an `invalid_utf8` quarantine row: the line's bytes, base64-encoded


def json_fields(text: Column, schema: dict[str, str]) -> Column:
    """`text` (one JSON object) parsed by Spark's reader as bronze reads a line: a struct of `schema`'s columns (times
    as their text: :func:`typed_value` parses them) and ``_corrupt_record`` (set when a value does not fit its type)."""
    json_schema = T.StructType(
        [T.StructField(c, T.StringType() if t in TEXT_TIME_TYPES else spark_type(t)) for c, t in schema.items()]
        + [T.StructField("_corrupt_record", T.StringType())]
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record", **strict_json.SPARK_OPTIONS}
    return F.from_json(text, json_schema, options)


def raw_line(text: Column, utf8: Column) -> Column:
    """What the quarantine keeps of a line or message: its text, or its exact bytes base64-encoded when not UTF-8."""
    return F.when(utf8, text).otherwise(F.concat(F.lit(BASE64_PREFIX), F.base64(text.cast("binary"))))


def field_reasons(reason: Column, value_of, schema: dict[str, str], required: tuple[str, ...],
                  typed: dict[str, Column]) -> Column:
    """`reason` (a CASE of the reasons found so far) with the fields' own: a required field missing, a time that does
    not parse. `value_of(column)`: the field as read; `typed`: the columns in their types."""
    for column in required:
        reason = reason.when(value_of(column).isNull(), F.lit(f"missing_{column}"))
    for column, ctype in schema.items():
        if ctype in TEXT_TIME_TYPES:
            reason = reason.when(value_of(column).isNotNull() & typed[column].isNull(), F.lit(f"unparseable_{column}"))
    return reason


def typed_value(value: Column, ctype: str) -> Column:
    """A value :func:`json_fields` read, in its column's type (an unparseable time or date: null)."""
    if ctype == "timestamp":
        return F.try_to_timestamp(value)
    if ctype == "date":
        return value.try_cast("date")
    return value


def rescued_fields(text: Column, schema: dict[str, str]) -> Column:
    """The line's top-level fields that `schema` does not name, as one JSON object with their values as sent (null
    when there are none, and for a line that is not a JSON object). Names are matched exactly, as the typed columns
    are read: `Device` is not `device`. One pass of Jackson in the JVM (spark_jobs/jvm/lakehouse/RescuedFields.java):
    Spark's own `from_json` into a map of variants made the bronze parse three times as costly
    (bench/rescued_cost.py)."""
    return F.call_udf(RESCUED_FIELDS_FUNCTION, text.cast("binary"), F.lit(",".join(schema)))


KAFKA_COORDINATES = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")


def kafka_coordinates() -> list[Column]:
    """A message's topic, partition, offset and timestamp, and the same as a quarantine row's `_source_file`."""
    return [F.col("topic").alias("_kafka_topic"), F.col("partition").alias("_kafka_partition"),
            F.col("offset").alias("_kafka_offset"), F.col("timestamp").alias("_kafka_timestamp"),
            F.concat_ws("/", F.concat(F.lit("kafka:"), F.col("topic")), F.col("partition").cast("string"),
                        F.col("offset").cast("string")).alias("_source_file")]


def bronze_tail(reason: Column, provenance: list[str]) -> list[Column | str]:
    """The columns every bronze parse ends its rows with, after the typed ones: what the schema does not name, where
    the line came from, when it was read, the line itself, its quarantine reason and its size."""
    return [RESCUED_COLUMN, *provenance, "_ingested_at", RAW_LINE, reason.alias(QUARANTINE_REASON), LINE_BYTES]
