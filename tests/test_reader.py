"""The one reader of a table's rows (include/storage/reader.py) on a table with every feature Delta 4.4 may put on a
sink: widened types (a decimal too), column mapping after a rename and a drop, deletion vectors, v2 checkpoints, partitions; read
by each reader built on it (rows by version, by condition, by data file; quality's added rows; reconciliation's
source events; the freshness bounds) with the values Spark reads."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from include.quality import frames
from include.quality.reconciliation import read_source_events
from include.quality.table_metrics import event_time_bounds
from include.storage import delta as delta_store
from include.storage.paths import as_storage

WIDE = 2**32  # an id beyond int's range: only the widened column holds it


@pytest.fixture(scope="module")
def evolved(spark, tmp_path_factory):
    """The table, with the versions its history went through."""
    path = as_storage(tmp_path_factory.mktemp("reader") / "events")
    sql = spark.sql
    sql(f"""CREATE TABLE delta.`{path}` (event_id STRING, event_time TIMESTAMP, id INT, kind STRING, gone STRING,
            amount FLOAT, price DECIMAL(6,2), day STRING) USING delta PARTITIONED BY (day)
            TBLPROPERTIES ('delta.enableTypeWidening' = 'true', 'delta.enableDeletionVectors' = 'true',
            'delta.columnMapping.mode' = 'name', 'delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2')""")
    sql(f"""INSERT INTO delta.`{path}` VALUES
            ('e1', TIMESTAMP'2026-01-01 10:00:00', 1, 'a', 'x', 1.5, 1234.56, 'd1'),
            ('e2', TIMESTAMP'2026-01-01 11:00:00', 2, 'b', 'y', 2.5, 0.01, 'd1'),
            ('e3', TIMESTAMP'2026-01-02 09:00:00', 3, 'c', 'z', 3.5, NULL, 'd2')""")  # version 1
    sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN id TYPE BIGINT")
    sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN amount TYPE DOUBLE")
    sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN price TYPE DECIMAL(10,3)")
    sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN kind TO action")
    sql(f"ALTER TABLE delta.`{path}` DROP COLUMN gone")
    sql(f"INSERT INTO delta.`{path}` VALUES ('e4', TIMESTAMP'2026-01-02 12:00:00', {WIDE}, 'e', 4.25, 9876543.219, 'd2')")
    appended = delta_store.latest_version(path)
    sql(f"DELETE FROM delta.`{path}` WHERE id = 2")  # a deletion vector on the first file of d1
    features = sql(f"DESCRIBE DETAIL delta.`{path}`").first()["tableFeatures"]
    assert {"typeWidening", "columnMapping", "deletionVectors", "v2Checkpoint"} <= set(features), features
    return path, appended


def spark_rows(spark, path: str, version: int | None = None) -> list[dict]:
    reading = spark.read.format("delta")
    if version is not None:
        reading = reading.option("versionAsOf", version)
    rows = [r.asDict() for r in reading.load(str(path)).collect()]
    for row in rows:  # PySpark gives naive datetimes in the process's zone; the reader, UTC instants
        row["event_time"] = row["event_time"].astimezone(UTC)
    return sorted(rows, key=lambda r: r["event_id"])


def by_id(table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["event_id"])


def test_every_reader_reads_what_spark_reads(spark, evolved):
    path, appended = evolved
    latest = by_id(delta_store.read_table(path))
    assert latest == spark_rows(spark, path), latest
    assert [(r["id"], r["action"], r["day"]) for r in latest] == [(1, "a", "d1"), (3, "c", "d2"), (WIDE, "e", "d2")]
    assert [r["price"] for r in latest] == [Decimal("1234.560"), None, Decimal("9876543.219")]  # a widened decimal
    assert "gone" not in latest[0] and "kind" not in latest[0]
    before = delta_store.read_table(path, version=1)  # the table as written, before its schema changed
    assert before.schema.field("id").type == "int32" and before.column_names[3:5] == ["kind", "gone"]
    assert str(before.schema.field("price").type) == "decimal128(6, 2)"
    assert str(delta_store.read_table(path).schema.field("price").type) == "decimal128(10, 3)"
    assert by_id(before) == spark_rows(spark, path, version=1)
    assert delta_store.count_rows(path, "day = 'd2' AND action = 'e'") == 1
    assert delta_store.read_table(path, columns=["day"], where=f"id = {WIDE}").to_pylist() == [{"day": "d2"}]

    # quality's incremental rows: each commit's files at its version (across the widening and after a compaction)
    added = [(v, f) for v in (1, appended) for f in (a["path"] for a in delta_store.commit_files(path, v))]
    spark.sql(f"OPTIMIZE delta.`{path}`")
    rows = by_id(frames.read_added(path, tuple(added), ["event_id", "id", "action"]))
    assert [(r["event_id"], r["id"]) for r in rows] == [("e1", 1), ("e2", 2), ("e3", 3), ("e4", WIDE)]

    events = read_source_events(path, "event_time", keys=("action",))
    assert sorted(events.times.tolist()) == sorted(
        int(r["event_time"].replace(tzinfo=UTC).timestamp() * 1e6) for r in latest)
    assert sorted(events.keys["action"].tolist()) == ["a", "c", "e"]
    earliest, newest = event_time_bounds(path, "event_time", "action <> 'a'")
    assert (earliest, newest) == (int(datetime(2026, 1, 2, 9, tzinfo=UTC).timestamp() * 1e6),
                                  int(datetime(2026, 1, 2, 12, tzinfo=UTC).timestamp() * 1e6))


def test_the_reader_reads_a_store_through_that_stores_endpoint_only():
    """One S3 secret per connection, that of the store read last: with one per store, DuckDB picked among them, and
    a worker that had read a bucket on another server read the next through that server's (dead) endpoint."""
    from include.storage import reader
    from include.storage.s3 import S3Config

    first, second = (S3Config(f"http://127.0.0.1:{port}", "key", "secret") for port in (18015, 13038))
    for store in (first, second, first, second):
        secrets = reader.connection(store).execute("SELECT secret_string FROM duckdb_secrets()").fetchall()
        assert len(secrets) == 1 and f"endpoint=127.0.0.1:{store.endpoint.rsplit(':', 1)[1]}" in secrets[0][0], secrets
