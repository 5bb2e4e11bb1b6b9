"""Spark types of the registry's column types (include.registry.columns)."""

from __future__ import annotations

from pyspark.sql import types as T

from include.registry import COLUMN_TYPES


def spark_type(name: str) -> T.DataType:
    """The Spark type of a registry column type."""
    return getattr(T, COLUMN_TYPES[name].spark)()


def spark_schema(columns: dict[str, str]) -> T.StructType:
    return T.StructType([T.StructField(name, spark_type(ctype)) for name, ctype in columns.items()])
