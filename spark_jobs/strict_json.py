"""A landing line is exactly one JSON object, as a strict parser reads it, or it goes to the quarantine with the
reason that parser gives.

Spark's JSON reader is lenient: it stops after the first value of a line (a second object, a trailing comma or
comment are dropped unread), lets the last of two equal keys win, and hands an object given for a string field
over as its JSON text. So each line also goes through one strict streaming pass of Jackson, in the JVM, beside
Spark's reader (the project's function `lakehouse.StrictJsonReason`, spark_jobs/jvm, registered in every session):
duplicate detection on, nothing lenient, the end of the line checked. Its reasons: `malformed_json` (not JSON, or
a JSON value that is not an object), `trailing_content` (anything after the object, another object included),
`duplicate_key` (at any depth), `non_finite_number` (NaN, Infinity, or a number beyond a double such as 1e400),
`wrong_type` (an object or array for a column read as text). Spark's reader still types the columns, with NaN and
single quotes refused (:data:`SPARK_OPTIONS`); a value it cannot read into its column's type is `wrong_type`.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from include.spark_session import STRICT_JSON_FUNCTION

SPARK_OPTIONS = {"allowNonNumericNumbers": "false", "allowSingleQuotes": "false"}  # Spark's reader, stricter
TEXT_TYPES = ("string", "timestamp", "date")  # columns Spark reads as text (a time is parsed afterwards)


def strict_reason(line: Column, schema: dict[str, str]) -> Column:
    """The strict parse's quarantine reason of each (valid UTF-8) line, or null for exactly one JSON object."""
    text_columns = ",".join(c for c, t in schema.items() if t in TEXT_TYPES)
    return F.call_udf(STRICT_JSON_FUNCTION, line.cast("binary"), F.lit(text_columns))  # its UTF-8 bytes
