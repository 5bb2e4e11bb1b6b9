"""A new checkpoint over a Delta table reads it in commit order when its commits hold exactly its rows: Delta's
snapshot orders files by modification time, which on S3 is whole seconds (a gold job once dropped a late row there
that a run in commit order keeps)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from include.registry import Trigger, build_registry
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows
from tests.support.oracle import expected_gold

AVAILABLE_NOW = Trigger(available_now=True)


def file_times_out_of_commit_order(table) -> None:
    """Give the last commit's file a modification time before the one's committed before it: what S3's whole-second
    times (files committed within one second come by name) or another writer's clock make of a snapshot's order."""
    log = table / "_delta_log"
    latest = DeltaTable(str(table)).version()
    earlier = next(json.loads(line)["add"] for line in (log / f"{latest - 1:020d}.json").read_text().splitlines()
                   if "add" in json.loads(line))
    actions = [json.loads(line) for line in (log / f"{latest:020d}.json").read_text().splitlines()]
    for action in actions:
        if "add" in action:
            action["add"]["modificationTime"] = earlier["modificationTime"] - 1000
    (log / f"{latest:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    (log / f"{latest:020d}.crc").unlink(missing_ok=True)  # Delta's checksum of the version
    (log / f".{latest:020d}.json.crc").unlink(missing_ok=True)  # Hadoop's of the file


@pytest.mark.spark
def test_a_new_checkpoint_reads_an_appended_table_in_commit_order_whatever_its_files_times(spark, settings, raw,
                                                                                             caplog):
    raw["defaults"]["backfill"] = {"max_files_per_trigger": 1}  # a commit per batch, as live runs make them
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 1}
    registry = build_registry(raw)
    landed = generate(settings, events=900, seed=61, files=3)  # its second file has a row 28 minutes late
    for job_id in ("bronze_clickstream", "silver_clickstream"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    silver = settings.layout.table("silver/clickstream")
    assert DeltaTable(str(silver)).version() == 3  # created, then a commit per landing file
    file_times_out_of_commit_order(silver)
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the session read the log before it was changed

    caplog.set_level("INFO", logger="spark_jobs.transforms")
    run_job(spark, settings, registry, "gold_user_activity_5m", AVAILABLE_NOW)
    assert "reads silver/clickstream from its first commit, in commit order" in caplog.text
    expected = expected_gold(registry, [arrival_order(landed.files)])["gold/user_activity_5m"]
    assert gold_rows(settings, "gold/user_activity_5m") == expected


def test_a_table_is_read_in_commit_order_only_while_its_commits_hold_exactly_its_rows(settings):
    table = settings.layout.table("silver/clickstream")
    rows = pa.table({"n": pa.array([1, 2], pa.int64())})
    write_deltalake(str(table), rows, mode="append")
    assert delta_store.why_not_commit_order(table) == "it has one version"
    for _ in range(2):
        write_deltalake(str(table), rows, mode="append")
    assert delta_store.why_not_commit_order(table) is None
    assert delta_store.why_not_commit_order(table, max_commits=1) == \
        "it has 2 commits (more than the 1 read to decide)"

    DeltaTable(str(table)).delete("n = 1")  # a row change
    assert delta_store.why_not_commit_order(table) == \
        "its commit 3 removed files (a compaction, an overwrite or a row change)"

    widened = settings.layout.table("gold/widened")
    write_deltalake(str(widened), rows, mode="append")
    write_deltalake(str(widened), rows.append_column("m", pa.array(["a", "b"])), mode="append", schema_mode="merge")
    assert delta_store.why_not_commit_order(widened) == "its commit 1 changed its schema or properties"

    cleaned = settings.layout.table("gold/cleaned")
    for _ in range(2):
        write_deltalake(str(cleaned), rows, mode="append")
    DeltaTable(str(cleaned)).create_checkpoint()
    (cleaned / "_delta_log" / f"{0:020d}.json").unlink()  # what log retention does to a table's first commits
    assert delta_store.why_not_commit_order(cleaned) == "its commit 0 is no longer in its log"
