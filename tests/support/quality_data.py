"""Small synthetic Delta tables and checkpoints for the quality tests."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from deltalake import write_deltalake

from include.records.quality_results import RESULTS_TABLE
from include.storage import delta as delta_store

START = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
GOLD = "gold/user_activity_5m"
SILVER = "silver/clickstream"
JOB = "gold_user_activity_5m"


def write(settings, registry, table: str, rows: list[dict]) -> None:
    """One append commit of `rows` (a new Delta version)."""
    path = settings.layout.table(table)
    delta_store.ensure_table(path, registry.table_schemas[table])
    data = pa.Table.from_pylist(rows, schema=delta_store.arrow_schema(registry.table_schemas[table]))
    write_deltalake(str(path), data, mode="append")


def write_checkpoint(settings, job_id: str, watermark: datetime, source_offset: dict | None = None) -> None:
    """A committed batch 0 in the job's checkpoint, with this watermark and source offset (as Spark writes them)."""
    checkpoint = settings.layout.checkpoint(job_id)
    for log in ("offsets", "commits"):
        (checkpoint / log).mkdir(parents=True, exist_ok=True)
    offsets = {"batchWatermarkMs": int(watermark.timestamp() * 1000), "batchTimestampMs": 0, "conf": {}}
    source = json.dumps(source_offset or {"version": 1})
    (checkpoint / "offsets" / "0").write_text(f"v1\n{json.dumps(offsets)}\n{source}")
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')


def recorded(settings, run_id: str | None = None) -> list[dict]:
    rows = delta_store.read_table(settings.layout.ops_table(RESULTS_TABLE)).to_pylist()
    return [r for r in rows if run_id in (None, r["run_id"])]


def assert_fails_only(settings, report, table: str, expected: str) -> None:
    """The report's only failing (blocking) expectation is `expected`, shown on `table`'s line and recorded."""
    assert report.failed() == {expected}, report.render()
    assert {r.expectation for r in report.blocking_failures} == {expected}, report.render()
    assert re.search(rf"FAIL +{table} +{expected}(\(\w+\))? ", report.render()), report.render()
    assert {r["expectation"] for r in recorded(settings, report.run_id) if not r["success"]} == {expected}


def silver_events(minutes: int, offset: timedelta = timedelta(0), tag: str = "") -> list[dict]:
    """Two users, one event each every 30 s, for `minutes` from START + offset."""
    return [{"event_id": f"{user}-{tag}{i}", "user_id": user, "event_type": "click", "value": 1.0,
             "event_time": START + offset + timedelta(seconds=30 * i), "_source_file": "f", "_ingested_at": START}
            for i in range(minutes * 2) for user in ("user_a", "user_b")]


def windows_of(events: list[dict], watermark: datetime) -> list[dict]:
    """The finalized 5-minute windows of `events` (what the append-mode job emits)."""
    cells: dict[tuple, list] = {}
    for e in events:
        start = e["event_time"] - timedelta(seconds=int(e["event_time"].timestamp()) % 300)
        cell = cells.setdefault((start, e["user_id"]), [0, 0.0])
        cell[0] += 1
        cell[1] += e["value"]
    return [{"window_start": s, "window_end": s + timedelta(minutes=5), "user_id": u, "event_count": c,
             "total_value": v} for (s, u), (c, v) in sorted(cells.items()) if s + timedelta(minutes=5) <= watermark]


def make_tables(settings, registry, mutate=None) -> list[dict]:
    """Silver events for an hour, the gold table the job would emit, and the job's watermark."""
    events = silver_events(60)
    watermark = max(e["event_time"] for e in events) - timedelta(minutes=10)
    write(settings, registry, SILVER, events)
    rows = windows_of(events, watermark)
    if mutate:
        mutate(rows)
    write(settings, registry, GOLD, rows)
    write_checkpoint(settings, JOB, watermark)
    return rows
