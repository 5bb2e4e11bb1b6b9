"""The bronze parse of a CDC source: Debezium's change events (JSON, without schemas) to typed rows, kept raw and
complete; a message that is not one to the quarantine with its reason.

A change event's value is an envelope: `op` (c, u, d, r), `before` and `after` (the row's images), `source` (where
the change is in the database: `lsn`, `txId`, `sequence`, `ts_us`). The row bronze keeps is the image the change
left (a delete's: the row as it was, with the default replica identity its key alone). The tombstone Debezium sends
after a delete (a null value) is kept too, as `_cdc_op` `t` with its key, read from the message's key.

`_cdc_sequence` orders a key's changes as the database committed them: by `source.lsn`, the change's WAL position. A
later transaction that touches a key waits for the earlier one's commit (its row lock), so one key's changes have
rising LSNs in commit order, across transactions and inside one. (`source.sequence`'s first element, the LSN of the
commit delivered before, is null for the first transaction after the connector starts: no order to rely on.) A
snapshot's row (`r`, with the snapshot's LSN) comes before every change: a transaction in flight when the snapshot was
taken is not in it and is delivered after it, though it may have written before the snapshot's LSN. The text is
`<0 snapshot | 1 change><LSN, 20 digits>`: the same change delivered twice (Connect's at-least-once delivery after a
crash) has the same sequence.

Debezium's encodings, as the connector is configured (include/cdc): `timestamptz` an ISO-8601 text; `timestamp`
milliseconds since the epoch (`time.precision.mode=connect`); `date` days since the epoch; `numeric` a double
(`decimal.handling.mode=double`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from include.registry import RESCUED_COLUMN, JobSpec
from spark_jobs import json_values as values
from spark_jobs import landing, strict_json

CHANGE_OPS = ("c", "u", "d", "r")
TOMBSTONE = "t"
ENVELOPE = T.StructType([
    T.StructField("op", T.StringType()),
    T.StructField("source", T.StructType([
        T.StructField("lsn", T.LongType()), T.StructField("txId", T.LongType()), T.StructField("ts_us", T.LongType()),
        T.StructField("ts_ms", T.LongType()),
    ])),
])
DIGITS = "^-?[0-9]+$"


def parse_changes(raw: DataFrame, job: JobSpec) -> DataFrame:
    """Typed rows of the change events in `raw` (Kafka messages), with the bronze columns of a parse_json job, the
    `_cdc_*` columns and a quarantine reason (null for a good event)."""
    schema, required = job.source.schema, job.source.required
    value, key = F.col("value").cast("string"), F.col("key").cast("string")
    utf8 = F.coalesce(F.is_valid_utf8(value), F.lit(True))
    tombstone = value.isNull() & key.isNotNull()
    env = F.from_json(value, ENVELOPE)
    op = F.when(tombstone, F.lit(TOMBSTONE)).otherwise(env["op"])
    image = F.when(tombstone, key).when(op == "d", F.get_json_object(value, "$.before")).otherwise(
        F.get_json_object(value, "$.after"))
    parsed = raw.select(
        values.raw_line(value, utf8).alias(values.RAW_LINE),
        *values.kafka_coordinates(),
        F.current_timestamp().alias("_ingested_at"),
        op.alias("_op"), env["source"].alias("_source"),
        values.json_fields(image, schema).alias("j"),
        values.rescued_fields(image, schema).alias(RESCUED_COLUMN),
        F.when(utf8 & ~tombstone, strict_json.strict_reason(value, {})).alias("_strict"),
        image.isNull().alias("_no_image"), utf8.alias("_utf8"), tombstone.alias("_tombstone"),
        F.octet_length(value).alias(landing.LINE_BYTES),
    )
    typed = {column: change_value(F.col("j")[column], ctype) for column, ctype in schema.items()}
    change = ~F.col("_tombstone")
    reason = (F.when(F.col(values.RAW_LINE).isNull() & change, F.lit("empty_message"))
              .when(~F.col("_utf8"), F.lit("invalid_utf8"))
              .when(F.col("_strict").isNotNull(), F.col("_strict"))
              .when(change & (~F.col("_op").isin(*CHANGE_OPS) | F.col("_source.lsn").isNull()),
                    F.lit("not_a_change_event"))
              .when(F.col("_no_image"), F.lit("missing_image"))
              .when(F.col("j").isNull() | F.col("j._corrupt_record").isNotNull(), F.lit("wrong_type")))
    reason = values.field_reasons(reason, lambda c: F.col("j")[c], schema, required, typed)
    return parsed.select(
        *[expr.alias(column) for column, expr in typed.items()],
        *change_columns(),
        *values.bronze_tail(reason, [*values.KAFKA_COORDINATES, "_source_file"]),
    )


def change_value(value: Column, ctype: str) -> Column:
    """A field of an image in its column's type: a time as Debezium encodes it (ISO text, or a number since the
    epoch: milliseconds for a timestamp, days for a date)."""
    if ctype == "timestamp":
        return F.coalesce(values.typed_value(value, ctype), F.when(value.rlike(DIGITS), F.timestamp_millis(value.cast("long"))))
    if ctype == "date":
        return F.coalesce(values.typed_value(value, ctype), F.when(value.rlike(DIGITS), F.date_from_unix_date(value.cast("int"))))
    return values.typed_value(value, ctype)


def change_columns() -> list[Column]:
    """`_cdc_op`, `_cdc_sequence`, `_cdc_lsn`, `_cdc_tx_id`, `_cdc_commit_time` of a parsed event (a tombstone: its
    op alone)."""
    source = F.col("_source")
    phase = F.when(F.col("_op") == "r", F.lit("0")).otherwise(F.lit("1"))
    sequence = F.concat(phase, F.lpad(source["lsn"].cast("string"), 20, "0"))
    micros = F.coalesce(source["ts_us"], source["ts_ms"] * 1000)
    return [F.col("_op").alias("_cdc_op"), F.when(source["lsn"].isNotNull(), sequence).alias("_cdc_sequence"),
            source["lsn"].alias("_cdc_lsn"), source["txId"].alias("_cdc_tx_id"),
            F.timestamp_micros(micros).alias("_cdc_commit_time")]
