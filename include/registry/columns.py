"""Column types of the registry, declared once: the name used in jobs.yaml, Spark's type, Arrow's type.

Spark and Arrow types are named here as strings (a `pyspark.sql.types` class, a `pyarrow` type alias)
so the registry stays importable without either library; `spark_jobs` and the storage layer
instantiate them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ColumnType:
    name: str  # as written in jobs.yaml
    spark: str  # pyspark.sql.types class name
    arrow: str  # pyarrow.type_for_alias name
    sql: str  # Spark's name of it (DataType.simpleString)
    utc: bool = False  # a timestamp: Arrow's carries the UTC zone (Spark's session time zone is UTC)


COLUMN_TYPES: dict[str, ColumnType] = {
    t.name: t
    for t in (
        ColumnType("string", "StringType", "string", "string"),
        ColumnType("double", "DoubleType", "double", "double"),
        ColumnType("float", "FloatType", "float", "float"),
        ColumnType("long", "LongType", "int64", "bigint"),
        ColumnType("int", "IntegerType", "int32", "int"),
        ColumnType("boolean", "BooleanType", "bool", "boolean"),
        ColumnType("timestamp", "TimestampType", "timestamp[us]", "timestamp", utc=True),
        ColumnType("date", "DateType", "date32", "date"),
    )
}
# Type changes Delta's type widening makes in place (Delta 4.4, among the registry's types): the files written before
# keep their type and read widened. Delta widens an integer to double only when asked (never by schema evolution).
DELTA_WIDENINGS = frozenset({("int", "long"), ("int", "double"), ("float", "double")})


def type_name(spark_sql: str) -> str:
    """The registry's name of a Spark type named as Spark names it (`bigint` -> `long`)."""
    return next((t.name for t in COLUMN_TYPES.values() if t.sql == spark_sql), spark_sql)


QUARANTINE_SCHEMA: dict[str, str] = {
    "raw_line": "string",
    "_source_file": "string",
    "reason": "string",
    "_ingested_at": "timestamp",
}
# A bronze row's fields that its source's schema does not name, as one JSON object (null when there are none): a
# producer's new field is kept, and counted by the quality report, until the registry declares it.
RESCUED_COLUMN = "_rescued"
BRONZE_EXTRA_COLUMNS: dict[str, str] = {RESCUED_COLUMN: "string", "_source_file": "string", "_ingested_at": "timestamp"}
# A Kafka source's bronze rows carry their message's coordinates instead of a file (its quarantine rows name them in
# `_source_file`: kafka:<topic>/<partition>/<offset>).
KAFKA_BRONZE_COLUMNS: dict[str, str] = {
    RESCUED_COLUMN: "string",
    "_kafka_topic": "string",
    "_kafka_partition": "int",
    "_kafka_offset": "long",
    "_kafka_timestamp": "timestamp",
    "_ingested_at": "timestamp",
}
# Columns Delta's change data feed adds to a table's rows (`read_change_feed: true`).
CHANGE_FEED_COLUMNS: dict[str, str] = {
    "_change_type": "string",
    "_commit_version": "long",
    "_commit_timestamp": "timestamp",
}
