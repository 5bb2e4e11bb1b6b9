"""Native Delta Lake through delta-spark: executors write, idempotent per batch in every table, registry
properties on the tables, delta-rs still reads them, change data feed of an upserted table, maintenance,
and a checkpoint of the former Python source refused."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable

from include import checkpoints
from include.generator import DEFAULT_START
from include.records import lease
from include.records.maintenance_log import MAINTENANCE_TABLE
from include.registry import Trigger, build_registry
from include.registry.vocabulary import AUTO_COMPACT, LOG_RETENTION
from include.spark_session import CHECKPOINT_INTERVAL, session_confs
from include.storage import delta as delta_store
from spark_jobs.batch_writer import make_batch_writer
from spark_jobs.delta_tables import ensure_job_tables, ensure_table
from spark_jobs.delta_txn import append_batch
from spark_jobs.streaming_query import run_job
from spark_jobs.table_maintenance import (
    LISTING_PARALLELISM,
    RETENTION_ARGUMENT_IGNORED,
    RETENTION_CHECK,
    maintain,
)
from spark_jobs.transforms import parse_json
from tests.support.helpers import generate, run_cli
from tests.support.suite_registry import SUITE_STATE_PARTITIONS

pytestmark = [pytest.mark.spark, pytest.mark.slow]
AVAILABLE_NOW = Trigger(available_now=True)


@pytest.fixture
def registry(small_batch_registry):
    """Several bronze commits per backfill (the tests count them)."""
    return small_batch_registry


def versions(settings, table: str) -> int:
    return delta_store.latest_version(settings.layout.table(table))


def commit_info(settings, table: str, version: int) -> dict:
    log = settings.layout.table(table) / "_delta_log" / f"{version:020d}.json"
    return next(json.loads(line)["commitInfo"] for line in log.read_text().splitlines() if "commitInfo" in line)


def test_spark_writes_tables_that_carry_the_registry_properties_and_delta_rs_reads(spark, settings, registry):
    landed = generate(settings, events=600, seed=81, files=4)  # two bronze batches of 2 files
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_1h"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    for table in ("bronze/clickstream", "bronze/clickstream_quarantine", "silver/clickstream", "gold/user_activity_1h"):
        path = settings.layout.table(table)
        assert spark.read.format("delta").load(str(path)).count() == delta_store.count_rows(path) > 0, table
        assert "Apache-Spark" in commit_info(settings, table, versions(settings, table))["engineInfo"], table
    config = {t: DeltaTable(str(settings.layout.table(t))).metadata().configuration
              for t in ("bronze/clickstream", "bronze/clickstream_quarantine", "silver/clickstream")}
    assert config["bronze/clickstream"]["delta.appendOnly"] == "true"
    assert config["bronze/clickstream_quarantine"]["delta.appendOnly"] == "true"
    assert config["silver/clickstream"]["delta.enableChangeDataFeed"] == "true"
    assert {c[LOG_RETENTION] for c in config.values()} == {"interval 168 hours"}  # the VACUUM retention's
    # a commit's checksum file is a few kilobytes, not the list of the table's files (each commit's, kept with the log)
    checksums = sorted((settings.layout.table("silver/clickstream") / "_delta_log").glob("[0-9]*.crc"))  # not Hadoop's
    assert len(checksums) > 1 and not any(json.loads(c.read_text()).get("allFiles") for c in checksums)
    assert max(c.stat().st_size for c in checksums) < 8192, [c.stat().st_size for c in checksums]
    # the lakehouse's log checkpoint interval, unless a sink's properties say otherwise
    assert {c["delta.checkpointInterval"] for c in config.values()} == {str(CHECKPOINT_INTERVAL)}
    ensure_table(spark, settings.layout.table("gold/every_ten"), {"n": "long"}, (), {"delta.checkpointInterval": "10"})
    assert DeltaTable(str(settings.layout.table("gold/every_ten"))).metadata().configuration == {
        "delta.checkpointInterval": "10"}
    bronze = settings.layout.table("bronze/clickstream")
    assert delta_store.count_rows(bronze) + delta_store.count_rows(
        settings.layout.table("bronze/clickstream_quarantine")) == landed.lines
    with pytest.raises(Exception, match="DELTA_CANNOT_MODIFY_APPEND_ONLY"):  # bronze: raw and complete
        spark.sql(f"DELETE FROM delta.`{bronze}` WHERE true")
    # bronze batches commit with the job's app transaction (the last batch is 1); the quarantine too,
    # in the batches that had malformed lines (an empty side is not written)
    app_id = f"bronze_clickstream:{checkpoints.query_id(settings.layout.checkpoint('bronze_clickstream'))}"
    assert delta_store.committed_batch(bronze, app_id) == 1
    assert delta_store.committed_batch(settings.layout.table("bronze/clickstream_quarantine"), app_id) in (0, 1)


def test_a_replayed_batch_writes_nothing_in_either_table_nor_merges_twice(spark, settings, registry, tmp_path):
    bronze, hourly = registry.job("bronze_clickstream"), registry.job("gold_user_activity_1h")
    for job in (bronze, hourly):
        ensure_job_tables(spark, settings, registry, job)
        checkpoint = settings.layout.checkpoint(job.id)
        checkpoint.mkdir(parents=True)
        (checkpoint / "metadata").write_text(json.dumps({"id": f"query-of-{job.id}"}))
    landed = tmp_path / "lines.jsonl"
    landed.write_text('{"event_id": "e1", "user_id": "u1", "event_type": "click", "value": 2.0, '
                      '"event_time": "2026-01-01T00:00:10Z"}\n{not json\n')
    # batch 0 of bronze's checkpoint admitted that file, as Spark's offset and file-source logs say
    bronze_checkpoint = settings.layout.checkpoint(bronze.id)
    (bronze_checkpoint / "offsets").mkdir()
    (bronze_checkpoint / "offsets" / "0").write_text('v1\n{}\n{"logOffset":0}')
    (bronze_checkpoint / "sources" / "0").mkdir(parents=True)
    (bronze_checkpoint / "sources" / "0" / "0").write_text(
        f'v1\n{{"path":"file://{landed}","timestamp":0,"batchId":0}}')
    parsed = parse_json(spark.read.format("text").load(str(landed)), bronze)
    write = make_batch_writer(settings, bronze)
    for _ in range(2):  # the second call is the replay of batch 0
        write(parsed, 0)
        assert (versions(settings, "bronze/clickstream"), versions(settings, "bronze/clickstream_quarantine")) == (1, 1)
    assert delta_store.count_rows(settings.layout.table("bronze/clickstream")) == 1
    assert delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine")) == 1

    windows = spark.sql("SELECT timestamp'2026-01-01 00:00:00' AS window_start, timestamp'2026-01-01 01:00:00' "
                        "AS window_end, 'u1' AS user_id, 1L AS event_count, 2.0D AS total_value")
    upsert = make_batch_writer(settings, hourly)
    upsert(windows, 0)
    upsert(windows.selectExpr("window_start", "window_end", "user_id", "2L AS event_count", "total_value"), 0)
    assert versions(settings, "gold/user_activity_1h") == 1  # the replayed MERGE was skipped
    upsert(windows.selectExpr("window_start", "window_end", "user_id", "3L AS event_count", "total_value"), 1)
    rows = delta_store.read_table(settings.layout.table("gold/user_activity_1h")).to_pylist()
    assert [(r["user_id"], r["event_count"]) for r in rows] == [("u1", 3)]
    assert commit_info(settings, "gold/user_activity_1h", 2)["operation"] == "MERGE"


def test_an_upserted_table_is_compacted_by_its_writer_as_it_merges(spark, settings, registry):
    """The maintenance cannot compact an update-mode table while its writer runs (MERGE and OPTIMIZE conflict): the
    registry gives such sinks Delta's auto compaction, so the writer compacts its own small files after a commit."""
    hourly = registry.job("gold_user_activity_1h")
    assert hourly.sink.properties[AUTO_COMPACT] == "true"
    ensure_job_tables(spark, settings, registry, hourly)
    checkpoint = settings.layout.checkpoint(hourly.id)
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "query-of-hourly"}))
    path = settings.layout.table("gold/user_activity_1h")
    assert DeltaTable(str(path)).metadata().configuration[AUTO_COMPACT] == "true"
    upsert = make_batch_writer(settings, hourly)
    with session_confs(spark, {"spark.databricks.delta.autoCompact.minNumFiles": "4"}):  # Delta's default: 50
        for batch in range(9):  # a new window each batch: a new file each MERGE
            upsert(spark.sql(f"SELECT timestamp'2026-01-01 00:00:00' + INTERVAL {batch} HOURS AS window_start, "
                             f"timestamp'2026-01-01 01:00:00' + INTERVAL {batch} HOURS AS window_end, 'u1' AS user_id, "
                             f"{batch}L AS event_count, 1.0D AS total_value"), batch)
        upsert(spark.sql("SELECT timestamp'2026-01-01 00:00:00' AS window_start, timestamp'2026-01-01 01:00:00' AS "
                         "window_end, 'u1' AS user_id, 99L AS event_count, 1.0D AS total_value"), 8)  # a replay
    history = DeltaTable(str(path)).history()
    assert [h["operation"] for h in history].count("MERGE") == 9
    assert "OPTIMIZE" in [h["operation"] for h in history]  # the writer's own compactions
    assert len(DeltaTable(str(path)).file_uris()) < 4
    rows = delta_store.read_table(path).to_pylist()
    assert sorted(r["event_count"] for r in rows) == list(range(9))  # nothing lost, the replay merged nothing
    app_id = f"{hourly.id}:query-of-hourly"
    assert delta_store.committed_batch(path, app_id) == 8


def test_a_tables_commits_are_kept_as_long_as_its_vacuum_retention(spark, settings, raw):
    """A version older than the VACUUM retention cannot be read (its replaced files are gone): a sink's commits are
    kept that long, not Delta's 30 days. Delta deletes expired commits (by their files' age, whole days) when it
    writes a log checkpoint."""
    raw["jobs"]["silver_clickstream"]["sink"]["maintenance"] = {"vacuum_retention": "24 hours"}
    sink = build_registry(raw).job("silver_clickstream").sink
    path = settings.layout.table("silver/kept_a_day")
    ensure_table(spark, path, {"n": "long"}, (), {**sink.properties, "delta.checkpointInterval": "5"})
    assert DeltaTable(str(path)).metadata().configuration[LOG_RETENTION] == "interval 24 hours"
    log = path / "_delta_log"
    for n in range(1, 5):
        spark.range(n, n + 1).toDF("n").write.format("delta").mode("append").save(str(path))
    three_days_ago = time.time() - 3 * 86400
    for file in log.iterdir():  # versions 0-4 (and their checksums) written three days ago
        os.utime(file, (three_days_ago, three_days_ago))
    for n in range(5, 11):  # version 5 and 10: log checkpoints, each followed by the cleanup of expired commits
        spark.range(n, n + 1).toDF("n").write.format("delta").mode("append").save(str(path))
    kept = sorted(int(f.name.split(".")[0]) for f in log.glob("*.json"))
    assert kept[0] >= 4 and kept[-1] == 10, kept  # (Delta keeps the commit before its oldest checkpoint)
    assert sorted(r.n for r in spark.read.format("delta").load(str(path)).collect()) == list(range(1, 11))


def test_a_batch_append_records_its_transaction_and_keeps_deltas_write_checks(spark, tmp_path):
    """append_batch skips only Delta's lookup of the transaction: the commit is the write options' commit, and
    Delta's schema enforcement and constraints still refuse bad rows, committing nothing."""
    path = str(tmp_path / "table")
    spark.range(3).selectExpr("id", "cast(id AS string) AS name").write.format("delta").save(path)
    append_batch(spark.range(2).selectExpr("id", "'x' AS name"), path, "job:query", 7, 0)
    assert delta_store.committed_batch(path, "job:query") == 7 and delta_store.count_rows(path) == 5
    log = (tmp_path / "table" / "_delta_log" / f"{1:020d}.json").read_text().splitlines()
    info = next(json.loads(line)["commitInfo"] for line in log if "commitInfo" in line)
    assert (info["operation"], info["operationParameters"]["mode"], info["isBlindAppend"]) == ("WRITE", "Append", True)
    with pytest.raises(Exception, match="DELTA_METADATA_MISMATCH"):
        append_batch(spark.range(1).selectExpr("id", "'y' AS name", "1 AS extra"), path, "job:query", 8, 1)
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT non_negative CHECK (id >= 0)")
    with pytest.raises(Exception, match="DELTA_VIOLATE_CONSTRAINT"):
        append_batch(spark.range(1).selectExpr("-1L AS id", "'z' AS name"), path, "job:query", 8, 2)
    assert delta_store.committed_batch(path, "job:query") == 7 and delta_store.latest_version(path) == 2
    assert delta_store.count_rows(path) == 5


def test_a_batch_append_refuses_a_batch_another_writer_committed_after_its_check(spark, tmp_path):
    """The narrowest race of two holders of one job: this writer found batch 8 unwritten at version 1, then (paused)
    another committed batch 8 of the same app id, and a blind append besides. This writer's commit of batch 8 is
    refused by Delta's conflict check; nothing is appended twice."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    path = str(tmp_path / "table")
    spark.range(3).selectExpr("id", "cast(id AS string) AS name").write.format("delta").save(path)
    append_batch(spark.range(1).selectExpr("id", "'x' AS name"), path, "job:query", 7, 0)
    committed, read_version = delta_store.batch_check(path, "job:query")
    assert (committed, read_version) == (7, 1)
    rows = pa.table({"id": pa.array([10, 11], pa.int64()), "name": ["other", "other"]})
    write_deltalake(path, rows, mode="append", commit_properties=CommitProperties(
        app_transactions=[Transaction("job:query", 8)]))  # the other holder's batch 8
    write_deltalake(path, rows.slice(0, 1), mode="append")  # someone else's blind append
    with pytest.raises(Exception, match="ConcurrentTransaction|DELTA_CONCURRENT_TRANSACTION"):
        append_batch(spark.range(2).selectExpr("id", "'late' AS name"), path, "job:query", 8, read_version)
    assert delta_store.count_rows(path) == 7 and delta_store.count_rows(path, "name = 'late'") == 0
    append_batch(spark.range(1).selectExpr("id", "'y' AS name"), path, "job:other", 1, read_version)  # another app
    assert delta_store.count_rows(path, "name = 'y'") == 1


def test_a_job_streams_the_change_feed_of_an_upserted_table(spark, settings, tmp_path):
    raw = yaml.safe_load(settings.registry_path.read_text())
    raw["jobs"]["activity_changes"] = {
        "source": {"table": "gold/user_activity_1h", "watermark": "1 day", "event_time": "window_end",
                   "read_change_feed": True, "max_bytes_per_trigger": "16 MB"},
        "transform": {"kind": "deduplicate", "keys": ["window_start", "user_id", "_commit_version", "_change_type"]},
        "sink": {"table": "gold/user_activity_1h_changes", "mode": "append"},
    }
    registry = build_registry(raw)
    generate(settings, events=400, seed=82, files=2)
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_1h", "activity_changes"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    hourly = str(settings.layout.table("gold/user_activity_1h"))
    first = versions(settings, "gold/user_activity_1h")
    snapshot = spark.read.format("delta").option("versionAsOf", first).load(hourly).count()
    # a new reader starts with the table's snapshot, as inserts
    assert delta_store.count_rows(settings.layout.table("gold/user_activity_1h_changes")) == snapshot
    # more events, 15 minutes in: they update the 1-hour windows still open (upserts), which the reader follows
    generate(settings, events=200, seed=83, files=1, start=DEFAULT_START + timedelta(minutes=15))
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_1h", "activity_changes"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", first + 1)
    changes = changes.load(hourly)
    kinds = {r["_change_type"] for r in changes.select("_change_type").distinct().collect()}
    assert {"update_preimage", "update_postimage"} <= kinds
    written = delta_store.read_table(settings.layout.table("gold/user_activity_1h_changes")).to_pylist()
    assert len(written) == snapshot + changes.count()
    assert {r["_change_type"] for r in written} == kinds | {"insert"}


def test_maintenance_compacts_vacuums_skips_a_busy_upsert_table_and_records(spark, settings, registry, tmp_path):
    generate(settings, events=900, seed=84, files=6)  # bronze admits 2 files per batch: 3 commits
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_1h"):  # an upsert table
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    bronze = settings.layout.table("bronze/clickstream")
    rows_before = delta_store.count_rows(bronze)
    raw = yaml.safe_load(settings.registry_path.read_text())
    raw["jobs"]["bronze_clickstream"]["sink"]["maintenance"] = {"vacuum_retention": "1 hours"}
    eager = build_registry(raw)
    # files a killed batch wrote and never committed: one two hours ago (past the retention), one just now
    written = next(bronze.glob("*.parquet"))
    stale, fresh = bronze / "part-00000-orphan-stale.c000.snappy.parquet", bronze / "part-00000-orphan-fresh.c000.snappy.parquet"
    for orphan in (stale, fresh):
        orphan.write_bytes(written.read_bytes())
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))

    held = lease.acquire(settings, "gold_user_activity_1h", trigger="processing-time=10 seconds")
    try:
        done = maintain(spark, settings, eager, ["bronze/clickstream", "gold/user_activity_1h"], run_id="m1")
    finally:
        held.release()
    outcome = {(r["table"], r["operation"]): r for r in done}
    compacted = outcome[("bronze/clickstream", "optimize")]
    assert compacted["outcome"] == "done" and compacted["files_before"] == 3 and compacted["files_after"] == 1
    vacuumed = outcome[("bronze/clickstream", "vacuum")]
    # the registry's retention, not Delta's 7 days: the stale file goes; the fresh one and the files the compaction
    # replaced just now stay (a reader of the version before may still need them)
    assert vacuumed["outcome"] == "done" and "retention 1 hours: deleted 1 " in vacuumed["detail"], vacuumed
    assert not stale.exists() and fresh.exists() and vacuumed["files_after"] == vacuumed["files_before"] - 1 == 5
    busy = outcome[("gold/user_activity_1h", "optimize")]
    assert busy["outcome"] == "skipped" and "gold_user_activity_1h" in busy["detail"] and "MERGE" in busy["detail"]
    assert "the writer compacts it as it commits" in busy["detail"]
    assert outcome[("gold/user_activity_1h", "vacuum")]["outcome"] == "done"
    assert delta_store.count_rows(bronze) == rows_before  # delta-rs reads the compacted table
    recorded = delta_store.read_table(settings.layout.ops_table(MAINTENANCE_TABLE)).to_pylist()
    assert {(r["run_id"], r["table"], r["operation"]) for r in recorded} == {("m1", t, o) for t, o in outcome}
    # the safety check and the listing's parallelism were lifted for the VACUUM calls only
    assert spark.conf.get(RETENTION_CHECK) == "true" and spark.conf.get(LISTING_PARALLELISM) == "10000"
    assert spark.conf.get(RETENTION_ARGUMENT_IGNORED, "true") == "true"
    fresh.unlink()

    # silver keeps reading bronze after the compaction: the rewrite is no new data
    generate(settings, events=300, seed=85, files=2, start=DEFAULT_START + timedelta(hours=2))
    run_job(spark, settings, registry, "bronze_clickstream", AVAILABLE_NOW)
    run_job(spark, settings, registry, "silver_clickstream", AVAILABLE_NOW)
    silver = spark.read.format("delta").load(str(settings.layout.table("silver/clickstream")))
    assert silver.count() == silver.dropDuplicates(["event_id"]).count()
    with pytest.raises(KeyError, match="unknown table"):
        maintain(spark, settings, registry, ["gold/nope"])


def test_a_checkpoint_of_the_former_python_source_is_refused(settings, lakehouse_env):
    """What the removed Python Delta source left in its offset log: `{"version": n}` per source."""
    checkpoint = settings.layout.checkpoint("silver_clickstream")
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"4a1f4c3e-0d4b-4e5e-9a57-2b1f0c9f8e11"}')
    # in a partition count the registry no longer has: no plan can resume it, so the former source is named first
    partitions = SUITE_STATE_PARTITIONS * 2
    (checkpoint / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1767225600000,"conf":{"spark.sql.shuffle.partitions":'
        f'"{partitions}"}}}}\n{{"version": 3}}')
    assert checkpoints.written_by_python_delta_source(checkpoint)
    refused = run_cli(["run", "silver_clickstream"], lakehouse_env, timeout=240)
    assert refused.returncode == 2, refused.stderr[-2000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("lakehouse run: job 'silver_clickstream': checkpoint ") and "former Python Delta" in line
    assert "move" in line and "silver/clickstream" in line
    assert not delta_store.table_exists(settings.layout.table("silver/clickstream"))
