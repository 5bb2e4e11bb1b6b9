"""The operational tables stay small however long the jobs run: old progress rows go, files are compacted and the
commit log is cleaned, beside a writer that keeps appending (as the live jobs' listeners do)."""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from include.records.alerts import ALERTS_TABLE
from include.records.maintenance_log import MAINTENANCE_TABLE
from include.records.ops_maintenance import maintain_ops_tables
from include.records.query_progress import PROGRESS_SCHEMA, PROGRESS_TABLE
from include.storage import delta as delta_store


def progress(job: str, at: datetime, batch: int) -> dict:
    return {**dict.fromkeys(PROGRESS_SCHEMA), "job": job, "batch_id": batch, "progress_time": at, "num_input_rows": 1}


def test_maintenance_keeps_recent_progress_compacts_and_cleans_the_log_beside_a_writer(settings):
    table = settings.layout.ops_table(PROGRESS_TABLE)
    now = datetime.now(UTC)
    for batch in range(30):  # a commit per micro-batch, as the listener writes them: 10 from 10 days ago
        at = now - timedelta(days=10) if batch < 10 else now - timedelta(minutes=30 - batch)
        delta_store.append_rows(table, PROGRESS_SCHEMA, [progress("gold_user_activity_5m", at, batch)])
    log_dir = table / "_delta_log"
    assert not delta_store.table_exists(settings.layout.ops_table(ALERTS_TABLE))  # absent tables are skipped

    stop, appended = threading.Event(), []

    def live_listener() -> None:  # appends while the maintenance runs: nothing conflicts, nothing is lost
        while not stop.is_set():
            batch = 100 + len(appended)
            delta_store.append_rows(table, PROGRESS_SCHEMA, [progress("silver_clickstream", datetime.now(UTC), batch)])
            appended.append(batch)

    writer = threading.Thread(target=live_listener)
    writer.start()
    try:
        rows = maintain_ops_tables(settings, "m-ops")
    finally:
        stop.set()
        writer.join(60)
    assert appended
    done = {r["operation"]: r for r in rows if r["table"] == f"_ops/{PROGRESS_TABLE}"}
    assert {o: r["outcome"] for o, r in done.items()} == dict.fromkeys(
        ("retention", "optimize", "vacuum", "log cleanup"), "done"), done
    assert done["retention"]["detail"].startswith("deleted 10 rows older than 7 days")
    assert done["optimize"]["files_before"] >= 20 and done["optimize"]["files_after"] == 1
    assert done["log cleanup"]["files_before"] >= 30  # all younger than a day: every version can still be read
    first_checkpoint = done["log cleanup"]["version_after"]

    kept = delta_store.read_table(table).to_pylist()
    assert sorted(r["batch_id"] for r in kept) == list(range(10, 30)) + appended  # recent rows and every append
    recorded = delta_store.read_table(settings.layout.ops_table(MAINTENANCE_TABLE)).to_pylist()
    assert {(r["table"], r["operation"]) for r in recorded if r["run_id"] == "m-ops"} >= {
        (f"_ops/{PROGRESS_TABLE}", o) for o in done}
    delta_store.append_rows(table, PROGRESS_SCHEMA, [progress("bronze_clickstream", now, 1)])  # writers go on
    assert delta_store.count_rows(table) == len(kept) + 1

    two_days_ago = time.time() - 2 * 86400
    for commit in log_dir.iterdir():  # two days on: the commits and the first checkpoint are older than a day
        os.utime(commit, (two_days_ago, two_days_ago))
    again = {r["operation"]: r for r in maintain_ops_tables(settings, "m-ops-2")
             if r["table"] == f"_ops/{PROGRESS_TABLE}"}
    assert again["retention"]["detail"].startswith("deleted 0 rows") and again["optimize"]["files_after"] <= 1
    assert again["log cleanup"]["files_after"] < again["log cleanup"]["files_before"]
    versions = sorted(int(c.name.split(".")[0]) for c in log_dir.iterdir() if c.name.endswith(".json"))
    assert versions[0] > first_checkpoint  # commits older than a day before the newest checkpoint went
    assert all(c.stat().st_mtime > two_days_ago + 86400 for c in log_dir.iterdir() if c.name.endswith(".json"))
    assert delta_store.count_rows(table) == len(kept) + 1


def test_the_ops_history_kept_is_a_setting(settings, monkeypatch):
    table = settings.layout.ops_table(PROGRESS_TABLE)
    now = datetime.now(UTC)
    for batch in range(12):
        delta_store.append_rows(table, PROGRESS_SCHEMA, [progress("silver_clickstream", now, batch)])
    compacted = delta_store.open_table(table)
    compacted.optimize.compact()  # 12 files into 1: the 12 are no longer referenced
    files = lambda: {p.name for p in table.iterdir() if p.name.endswith(".parquet")}  # noqa: E731
    assert len(files()) == 13
    three_hours_ago = time.time() - 3 * 3600
    commit = table / "_delta_log" / f"{compacted.version():020d}.json"  # its removes dated three hours ago
    commit.write_text(re.sub(r'"deletionTimestamp":\d+', f'"deletionTimestamp":{int(three_hours_ago * 1000)}',
                             commit.read_text()))
    for path in (table / "_delta_log").iterdir():  # and every commit made then
        os.utime(path, (three_hours_ago, three_hours_ago))
    commits = len([c for c in (table / "_delta_log").iterdir() if c.name.endswith(".json")])

    def history(kept: dict) -> tuple[str, dict]:
        done = {r["operation"]: r for r in kept if r["table"] == f"_ops/{PROGRESS_TABLE}"}
        return done["vacuum"]["detail"], done["log cleanup"]

    vacuum, log = history(maintain_ops_tables(settings, "m-day"))  # the default: a day
    assert vacuum == "retention 24 hours: deleted 0 unreferenced files" and log["files_after"] >= commits
    assert len(files()) == 13
    monkeypatch.setenv("LAKEHOUSE_OPS_HISTORY_HOURS", "2")
    from include.settings import load_settings

    two = replace(settings, ops_history_hours=load_settings().ops_history_hours)
    vacuum, log = history(maintain_ops_tables(two, "m-2h"))
    assert vacuum == "retention 2 hours: deleted 12 unreferenced files" and len(files()) == 1
    assert log["files_after"] < commits and "older than 2 hours deleted" in log["detail"]
    assert delta_store.open_table(table).metadata().configuration["delta.logRetentionDuration"] == "interval 2 hours"
    assert sorted(r["batch_id"] for r in delta_store.read_table(table).to_pylist()) == list(range(12))


@pytest.mark.parametrize(("variable", "unit", "value"), [
    ("LAKEHOUSE_OPS_HISTORY_HOURS", "hours", "0"), ("LAKEHOUSE_OPS_HISTORY_HOURS", "hours", "1.5"),
    ("LAKEHOUSE_OPS_HISTORY_HOURS", "hours", "a day"), ("LAKEHOUSE_AIRFLOW_HISTORY_DAYS", "days", "0"),
    ("LAKEHOUSE_AIRFLOW_HISTORY_DAYS", "days", "a month")])
def test_a_bad_history_setting_is_named(monkeypatch, variable, unit, value):
    """The operational tables' (here) and Airflow's (include/airflow/history.py) history settings."""
    from include.settings import load_settings

    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=f"{variable} must be a positive whole number of {unit}, got '{value}'"):
        load_settings()


def test_a_handle_opened_before_the_maintenance_cleaned_the_log_is_opened_again(settings):
    """A live driver's handle on `_ops/query_progress` (TableHandles: opened once, brought up to date on each
    batch), then the maintenance: a checkpoint, the commits older than the history kept deleted. The handle named
    those commits (delta-rs read them again after its next commit: a live job failed its batch in the fourth soak);
    the next use opens the table again from the new checkpoint, and the appends through it land once each."""
    table = settings.layout.ops_table(PROGRESS_TABLE)
    now = datetime.now(UTC)
    handles = delta_store.TableHandles()
    delta_store.append_rows(table, PROGRESS_SCHEMA, [progress("silver_clickstream", now, 0)])
    first = handles.latest(table)
    for batch in range(1, 6):
        delta_store.append_rows(table, PROGRESS_SCHEMA, [progress("silver_clickstream", now, batch)])
        assert handles.latest(table) is first  # no checkpoint since: the same handle, brought up to date
    hourly = replace(settings, ops_history_hours=1)

    def log_cleanup(run_id: str) -> dict:
        return {r["operation"]: r for r in maintain_ops_tables(hourly, run_id)
                if r["table"] == f"_ops/{PROGRESS_TABLE}"}["log cleanup"]

    log_cleanup("m-1")  # a checkpoint; nothing older than the hour before it yet
    three_hours_ago = time.time() - 3 * 3600
    for path in (table / "_delta_log").iterdir():  # ... then made three hours ago
        os.utime(path, (three_hours_ago, three_hours_ago))
    cleaned = log_cleanup("m-2")
    assert cleaned["files_after"] < cleaned["files_before"]  # the commits the handle was opened on are gone
    assert not (table / "_delta_log" / f"{0:020d}.json").exists()
    again = handles.latest(table)
    assert again is not first and again.version() == delta_store.latest_version(table)
    for batch in range(6, 9):
        write_deltalake(again, pa.Table.from_pylist([progress("silver_clickstream", now, batch)],
                                                    schema=delta_store.arrow_schema(PROGRESS_SCHEMA)), mode="append")
        assert handles.latest(table) is again
    rows = delta_store.read_table(table, columns=["batch_id"]).column("batch_id").to_pylist()
    assert sorted(rows) == list(range(9))
