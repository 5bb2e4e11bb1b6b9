"""Column types of the registry, declared once: the name used in jobs.yaml, Spark's type, Arrow's type.

Spark and Arrow types are named here as strings (a `pyspark.sql.types` class, a `pyarrow` type alias)
so the registry stays importable without either library; `spark_jobs` and the storage layer
instantiate them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ColumnType:
    name: str  # as written in jobs.yaml
    spark: str  # pyspark.sql.types class name
    arrow: str  # pyarrow.type_for_alias name (with params: the name of pyarrow's constructor, `decimal128`)
    sql: str  # Spark's name of it (DataType.simpleString)
    utc: bool = False  # a timestamp: Arrow's carries the UTC zone (Spark's session time zone is UTC)
    params: tuple[int, ...] = ()  # a decimal's precision and scale (the arguments of both types)


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
        # a JSON value kept whole as its text (an object or an array too: a string column refuses those)
        ColumnType("json", "StringType", "string", "string"),
    )
}
MAX_DECIMAL_PRECISION = 38  # Spark's and Delta's
DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
TYPE_NAMES = (*COLUMN_TYPES, "decimal(p,s)")  # what jobs.yaml may write as a column's type
KNOWN_TYPES = ", ".join(TYPE_NAMES)


def column_type(name: object) -> ColumnType:
    """The column type a registry names (`long`, `decimal(12,2)`); ValueError naming what is wrong otherwise."""
    if isinstance(name, str) and name in COLUMN_TYPES:
        return COLUMN_TYPES[name]
    decimal = DECIMAL_TYPE.fullmatch(name.strip()) if isinstance(name, str) else None
    if decimal is None:
        raise ValueError(f"unknown type {name!r} (known: {KNOWN_TYPES})")
    precision, scale = int(decimal[1]), int(decimal[2])
    if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
        raise ValueError(f"{name!r}: a decimal's precision is 1 to {MAX_DECIMAL_PRECISION} and its scale 0 to the "
                         "precision")
    canonical = f"decimal({precision},{scale})"
    return ColumnType(canonical, "DecimalType", "decimal128", canonical, params=(precision, scale))


def type_name(spark_sql: str) -> str:
    """The registry's name of a Spark type named as Spark names it (`bigint` -> `long`)."""
    try:
        return column_type(spark_sql).name
    except ValueError:
        return next((t.name for t in COLUMN_TYPES.values() if t.sql == spark_sql), spark_sql)


# Integer digits a decimal needs to hold every value of an integer type (Delta widens an int to decimal(10,0) or wider).
_INTEGER_DIGITS = {"int": 10, "long": 20}


def delta_widens(before: str, after: str) -> bool:
    """Whether Delta's type widening (4.4) changes a column of registry type `before` to `after` in place: the files
    written before keep their type and read widened. int -> long or double, float -> double, a decimal to one with
    as many integer digits and as large a scale, an integer to a decimal with room for its every value. Delta widens
    an integer to double or decimal only when asked (an ALTER COLUMN, as the job's start does), never by schema
    evolution."""
    if (before, after) in {("int", "long"), ("int", "double"), ("float", "double")}:
        return True
    try:
        wide = column_type(after)
    except ValueError:
        return False
    if wide.spark != "DecimalType":
        return False
    precision, scale = wide.params
    if before in _INTEGER_DIGITS:
        return precision - scale >= _INTEGER_DIGITS[before]
    try:
        narrow = column_type(before)
    except ValueError:
        return False
    if narrow.spark != "DecimalType" or narrow == wide:
        return False
    was_precision, was_scale = narrow.params
    return precision - scale >= was_precision - was_scale and scale >= was_scale


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
# A CDC source's bronze rows: the row as the change left it (a delete: as it was), what Debezium says of the change,
# and the message's coordinates (include/registry/cdc.py says what each means).
CDC_COLUMNS: dict[str, str] = {
    "_cdc_op": "string",
    "_cdc_sequence": "string",
    "_cdc_lsn": "long",
    "_cdc_tx_id": "long",
    "_cdc_commit_time": "timestamp",
}
CDC_BRONZE_COLUMNS: dict[str, str] = {**CDC_COLUMNS, **KAFKA_BRONZE_COLUMNS}
# Columns Delta's change data feed adds to a table's rows (`read_change_feed: true`).
CHANGE_FEED_COLUMNS: dict[str, str] = {
    "_change_type": "string",
    "_commit_version": "long",
    "_commit_timestamp": "timestamp",
}
