"""Great Expectations on the windowed gold tables: good data passes, each defect fails its own check."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from helpers import generate, run_cli
from include import delta_store
from include.observability import PROGRESS_SCHEMA
from include.quality import run_quality
from include.quality.runner import RESULTS_TABLE
from include.registry import Trigger
from spark_jobs.runner import run_job

GOLD = "gold/user_activity_5m"
START = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)


def failed(report) -> set[str]:
    return {r.expectation for r in report.results if not r.success}


def write(settings, table, registry, rows, batch):
    delta_store.ensure_table(settings.table_path(table), registry.table_schemas[table])
    data = pa.Table.from_pylist(rows, schema=delta_store.arrow_schema(registry.table_schemas[table]))
    delta_store.commit_batch(settings.table_path(table), data, app_id="test", batch_id=batch)


def silver_events(minutes: int, offset: timedelta = timedelta(0)) -> list[dict]:
    return [{"event_id": f"{user}-{offset.total_seconds()}-{i}", "user_id": user, "event_type": "click",
             "value": 1.0, "event_time": START + offset + timedelta(seconds=30 * i),
             "_source_file": "f", "_ingested_at": START}
            for i in range(minutes * 2) for user in ("user_a", "user_b")]


def gold_rows(events: list[dict], watermark: datetime) -> list[dict]:
    windows: dict[tuple, list] = {}
    for e in events:
        start = e["event_time"] - timedelta(seconds=int(e["event_time"].timestamp()) % 300)
        cell = windows.setdefault((start, e["user_id"]), [0, 0.0])
        cell[0] += 1
        cell[1] += e["value"]
    return [{"window_start": s, "window_end": s + timedelta(minutes=5), "user_id": u, "event_count": c,
             "total_value": v} for (s, u), (c, v) in sorted(windows.items()) if s + timedelta(minutes=5) <= watermark]


def make_tables(settings, registry, mutate=None) -> list[dict]:
    """Silver events for an hour, the gold 5-minute table the stream would emit, and its progress."""
    events = silver_events(60)
    watermark = max(e["event_time"] for e in events) - timedelta(minutes=10)
    write(settings, "silver/clickstream", registry, events, 0)
    rows = gold_rows(events, watermark)
    if mutate:
        mutate(rows)
    write(settings, GOLD, registry, rows, 0)
    progress = {name: None for name in PROGRESS_SCHEMA}
    progress.update(job="gold_user_activity_5m", query_id="q", run_id="r", batch_id=0, progress_time=START,
                    watermark=watermark, state_operators="[]")
    delta_store.append_rows(settings.ops_table("query_progress"), PROGRESS_SCHEMA, [progress])
    return rows


@pytest.fixture
def synthetic(settings, registry):
    return make_tables(settings, registry)


def validate(settings, registry, **kwargs):
    return run_quality(settings, registry, [GOLD], now=NOW, **kwargs)


def test_good_pipeline_output_passes_and_is_reported(spark, settings, registry):
    generate(settings, events=1500, seed=71, files=3)
    for job_id in registry.order:
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    report = run_quality(settings, registry)
    assert not failed(report), report.render()
    assert {r.table for r in report.results} == {"gold/user_activity_5m", "gold/user_activity_1h"}
    names = {r.expectation for r in report.results}
    assert {"window_size", "window_aligned", "unique_windows", "keys_not_null", "event_count_positive",
            "values_in_range", "no_future_windows", "freshness", "reconciliation"} <= names
    assert report.docs_index.exists() and report.docs_index.name == "index.html"
    recorded = delta_store.read_table(settings.ops_table(RESULTS_TABLE)).to_pylist()
    assert len(recorded) == len(report.results) and all(r["success"] for r in recorded)
    reconciliation = next(r for r in report.results if r.expectation == "reconciliation" and r.table == GOLD)
    assert '"gold_events"' in reconciliation.observed_value


def test_synthetic_good_data_passes(settings, registry, synthetic):
    assert not failed(validate(settings, registry))


def _duplicate(rows):
    rows.append(dict(rows[3]))


def _wrong_bounds(rows):
    rows[2]["window_end"] = rows[2]["window_start"] + timedelta(minutes=6)


def _null_key(rows):
    rows[4]["user_id"] = None


def _count_mismatch(rows):
    rows[5]["event_count"] += 1


@pytest.mark.parametrize(("mutate", "expected"), [
    (_duplicate, "unique_windows"),
    (_wrong_bounds, "window_size"),
    (_null_key, "keys_not_null"),
    (_count_mismatch, "reconciliation"),
], ids=["duplicated_row", "wrong_bounds", "null_key", "reconciliation_mismatch"])
def test_each_defect_fails_exactly_its_expectation(settings, registry, mutate, expected):
    make_tables(settings, registry, mutate)
    report = validate(settings, registry)
    assert failed(report) == {expected}, report.render()
    recorded = delta_store.read_table(settings.ops_table(RESULTS_TABLE)).to_pylist()
    assert {r["expectation"] for r in recorded if not r["success"]} == {expected}


def test_stale_table_fails_freshness_only(settings, registry, synthetic):
    write(settings, "silver/clickstream", registry, silver_events(30, offset=timedelta(hours=2)), 1)
    report = validate(settings, registry, full=True)
    assert failed(report) == {"freshness"}, report.render()


def test_incremental_validates_only_new_versions(settings, registry, synthetic):
    first = validate(settings, registry)
    assert not failed(first)
    again = validate(settings, registry)
    assert not again.results and "already validated" in again.notes[0]
    late = START + timedelta(hours=1)
    write(settings, GOLD, registry, [{"window_start": late, "window_end": late + timedelta(minutes=5),
                                      "user_id": None, "event_count": 1, "total_value": 1.0}], 1)
    incremental = validate(settings, registry)
    assert "keys_not_null" in failed(incremental)
    recorded = delta_store.read_table(settings.ops_table(RESULTS_TABLE)).to_pylist()
    rows_checked = {r["rows_validated"] for r in recorded if r["run_id"] == incremental.run_id}
    assert rows_checked == {1}
    full = validate(settings, registry, full=True)
    recorded = delta_store.read_table(settings.ops_table(RESULTS_TABLE)).to_pylist()
    assert {r["rows_validated"] for r in recorded if r["run_id"] == full.run_id} == {len(synthetic) + 1}


def test_spark_engine_above_the_threshold(spark, settings, registry, synthetic):
    rows = [dict(r) for r in synthetic]
    late = START + timedelta(hours=1)
    write(settings, GOLD, registry, [{"window_start": late, "window_end": late + timedelta(minutes=7),
                                      "user_id": "user_a", "event_count": 1, "total_value": 1.0}], 1)
    report = validate(replace(settings, dq_spark_threshold_rows=0), registry)
    assert failed(report) == {"window_size"} and rows
    recorded = delta_store.read_table(settings.ops_table(RESULTS_TABLE)).to_pylist()
    assert {r["engine"] for r in recorded} == {"spark"}


def test_cli_exit_codes(settings, registry, synthetic, lakehouse_env):
    good = run_cli(["quality", "run", GOLD], lakehouse_env, timeout=300)
    assert good.returncode == 0, good.stderr[-2000:]
    assert "outcome: passed" in good.stdout and "data_docs/index.html" in good.stdout
    late = START + timedelta(hours=1)
    write(settings, GOLD, registry, [{"window_start": late, "window_end": late + timedelta(minutes=5),
                                      "user_id": "user_a", "event_count": 0, "total_value": 1.0}], 1)
    bad = run_cli(["quality", "run", GOLD], lakehouse_env, timeout=300)
    assert bad.returncode == 1
    assert "FAIL gold/user_activity_5m    event_count_positive" in bad.stdout
    unknown = run_cli(["quality", "run", "gold/nope"], lakehouse_env, timeout=300)
    assert unknown.returncode == 2 and "not a windowed gold table: gold/nope" in unknown.stderr
