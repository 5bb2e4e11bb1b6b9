"""Spark types of the registry's column types (include.registry.columns)."""

from __future__ import annotations

from pyspark.sql import types as T

from include.registry import column_type


def spark_type(name: str) -> T.DataType:
    """The Spark type of a registry column type."""
    declared = column_type(name)
    return getattr(T, declared.spark)(*declared.params)


def spark_schema(columns: dict[str, str]) -> T.StructType:
    return T.StructType([T.StructField(name, spark_type(ctype)) for name, ctype in columns.items()])
