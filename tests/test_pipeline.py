"""Bronze -> silver -> gold on real Spark and real Delta tables, checked against the batch oracle."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
import yaml

from include.records.heartbeats import read_heartbeat
from include.records.query_progress import PROGRESS_TABLE
from include.registry import Trigger, build_registry
from include.storage import delta as delta_store
from include.summary import summarize
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows, lineage
from tests.support.oracle import expected_gold, expected_silver_count

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)


def run_lineage(spark, settings, registry):
    """The clickstream's jobs (what the oracle models), in order, in this driver. (Every job of the registry in one
    driver, the other sources' too: the demo's backfill, tests/test_demo.py.)"""
    return [run_job(spark, settings, registry, job_id, AVAILABLE_NOW) for job_id in lineage(registry)]


def assert_gold_matches_oracle(settings, registry, drops):
    expected = expected_gold(registry, drops)
    assert set(expected) == {"gold/user_activity_5m", "gold/user_activity_1h", "gold/user_sessions"}
    for table, rows in expected.items():
        assert rows, f"oracle expects no rows for {table}: test data too small"
        assert gold_rows(settings, table) == rows, table
    assert_running_totals_match_silver(settings)


def assert_running_totals_match_silver(settings):
    """gold/user_running_totals == per user, the silver rows, their total value and latest event time."""
    expected: dict = {}
    for r in delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist():
        count, total, latest = expected.get(r["user_id"], (0, None, None))
        value = r["value"] if total is None else (total if r["value"] is None else total + r["value"])
        expected[r["user_id"]] = (count + 1, value, max(filter(None, (latest, r["event_time"]))))
    got = {r["user_id"]: (r["event_count"], r["total_value"], r["last_event_time"])
           for r in delta_store.read_table(settings.layout.table("gold/user_running_totals")).to_pylist()}
    assert got == expected and expected


def test_a_backfill_reads_each_drop_once_and_equals_the_oracle(spark, settings, registry):
    first = generate(settings, events=3000, seed=11, files=6)
    run_lineage(spark, settings, registry)

    # Bronze keeps everything: rows + quarantined lines == lines landed, with the right reasons.
    bronze = delta_store.count_rows(settings.layout.table("bronze/clickstream"))
    quarantine = delta_store.read_table(settings.layout.table("bronze/clickstream_quarantine"))
    assert bronze + quarantine.num_rows == first.lines
    # the generator names each malformed kind after the quarantine reason it must get
    expected_reasons = Counter({k.removeprefix("malformed:"): v for k, v in first.kinds.items()
                                if k.startswith("malformed:")})
    assert Counter(quarantine["reason"].to_pylist()) == expected_reasons
    assert set(quarantine["_source_file"].to_pylist()) <= {f"file:{f}" for f in first.files}
    assert all(quarantine["raw_line"].to_pylist())

    drops = [arrival_order(first.files)]
    assert delta_store.count_rows(settings.layout.table("silver/clickstream")) == expected_silver_count(registry, drops)
    assert_gold_matches_oracle(settings, registry, drops)

    gold = delta_store.read_table(settings.layout.table("gold/user_activity_5m"))
    assert gold.schema.field("window_start").type == pa.timestamp("us", tz="UTC")
    assert gold.schema.field("event_count").type == pa.int64()
    assert gold.schema.field("total_value").type == pa.float64()
    assert gold.column_names == ["window_start", "window_end", "user_id", "event_count", "total_value"]

    # Observability: one progress row per batch with state metrics, and a heartbeat per job.
    progress = delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()
    gold_progress = [p for p in progress if p["job"] == "gold_user_activity_5m"]
    assert sorted(p["batch_id"] for p in gold_progress) == list(range(len(gold_progress)))
    assert max(p["state_rows_total"] for p in gold_progress) > 0
    assert any(p["state_rows_removed"] > 0 for p in gold_progress)
    assert all(p["watermark"] is not None for p in gold_progress)
    for job_id in lineage(registry):
        assert read_heartbeat(settings, job_id)["status"] == "finished"
    from include.ops.health_report import build

    page = build(settings, registry).read_text()  # the pipeline-health report: charts for every job that ran
    for job_id in lineage(registry):
        assert f'src="{job_id}.svg"' in page and (settings.layout.health_report / f"{job_id}.svg").is_file(), job_id

    # (A rerun with no new data commits nothing anywhere: every job of the chain on S3, tests/test_s3.py; gold's
    # alerts here, tests/test_stateful.py.)

    # A second landing drop: only the new files are read, results equal the oracle over all data.
    second = generate(settings, events=1500, seed=12, files=3, start=_after(first))
    for job_id in lineage(registry):  # the jobs the second drop feeds
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    bronze_files = delta_store.read_table(settings.layout.table("bronze/clickstream"))["_source_file"].to_pylist()
    assert Counter(bronze_files).total() + delta_store.count_rows(
        settings.layout.table("bronze/clickstream_quarantine")) == first.lines + second.lines
    drops.append(arrival_order(second.files))
    assert_gold_matches_oracle(settings, registry, drops)

    from include.quality import run_quality

    report = run_quality(settings, registry, ["gold/user_running_totals"])  # after the second drop: totals grew
    assert not report.failed(), report.render()
    growth = json.loads(next(r.observed_value for r in report.results if r.expectation == "totals_never_decrease"))
    assert growth["decreased_totals"] == 0 and growth["keys_compared"] > 0

    summary = summarize(settings, registry)
    rows = {t.table: t.rows for t in summary.tables}
    assert rows["bronze/clickstream"] == bronze + len(bronze_files) - bronze
    assert sum(summary.quarantine_reasons.values()) == rows["bronze/clickstream_quarantine"]
    assert summary.state_rows["gold_user_activity_1h"] > 0
    assert "gold/user_activity_5m" in summary.render()


def _after(result):
    from datetime import timedelta

    from include.generator import DEFAULT_START

    return DEFAULT_START + timedelta(minutes=result.lines / 20 + 30)


def test_new_stream_is_added_by_yaml_alone(spark, settings):
    from include.settings import load_settings

    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"]["gold_event_type_15m"] = {
        "source": {"table": "silver/clickstream", "max_files_per_trigger": 1, "watermark": "10 minutes"},
        "transform": {"kind": "window_aggregate", "window": "15 minutes", "keys": ["event_type"],
                      "aggregations": {"event_count": {"fn": "count"}, "total_value": {"fn": "sum", "column": "value"}}},
        "sink": {"table": "gold/event_type_15m", "mode": "append"},
    }
    registry = build_registry(raw)
    assert registry.order.index("gold_event_type_15m") > registry.order.index("silver_clickstream")
    landed = generate(settings, events=1500, seed=21, files=3)
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_event_type_15m"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    expected = expected_gold(registry, [arrival_order(landed.files)])["gold/event_type_15m"]
    assert expected and gold_rows(settings, "gold/event_type_15m", key="event_type") == expected


def test_registry_shuffle_partitions_cannot_silently_change_a_checkpoint(spark, settings, registry):
    from include.checkpoints.preflight import CheckpointConflict

    generate(settings, events=300, seed=5, files=2)
    run_job(spark, settings, registry, "bronze_clickstream", AVAILABLE_NOW)
    run_job(spark, settings, registry, "silver_clickstream", AVAILABLE_NOW, shuffle_partitions=3)
    with pytest.raises(CheckpointConflict, match="has its state in 3 shuffle partitions; 5 cannot take effect"):
        run_job(spark, settings, registry, "silver_clickstream", AVAILABLE_NOW, shuffle_partitions=5)


def test_yaml_window_offset_expression_keys_and_non_null_counts(spark, settings):
    """A window offset (hourly windows from :15), a SQL expression key, a SQL expression input and a count of a
    column's non-null values, by YAML alone, on a handful of events whose result is worked out below."""
    import json
    from datetime import UTC, datetime, timedelta

    from include.settings import load_settings

    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"]["gold_kind_hourly"] = {
        "source": {"table": "silver/clickstream", "watermark": "10 minutes"},
        "transform": {"kind": "window_aggregate", "window": "1 hour", "offset": "15 minutes",
                      "keys": [{"name": "kind", "expr": "upper(event_type)", "type": "string"}],
                      "aggregations": {"events": {"fn": "count"}, "valued": {"fn": "count", "column": "value"},
                                       "cents": {"fn": "sum", "expr": "value * 100", "type": "double"}}},
        "sink": {"table": "gold/kind_hourly", "mode": "append"},
    }
    registry = build_registry(raw)
    assert registry.job("gold_kind_hourly").output_schema == {
        "window_start": "timestamp", "window_end": "timestamp", "kind": "string", "events": "long",
        "valued": "long", "cents": "double"}
    start = datetime(2026, 2, 1, tzinfo=UTC)
    events = [(10, "click", 1.5), (20, "click", None), (50, "view", 2.0), (74, "click", None), (76, "click", 0.25),
              (180, "view", 1.0)]  # minutes after start; the last one moves the watermark past every other window
    landing = settings.layout.landing("landing/clickstream")
    landing.mkdir(parents=True)
    (landing / "events.jsonl").write_text("".join(json.dumps(
        {"event_id": f"e{i}", "user_id": "u", "event_type": kind, "event_time": (start + timedelta(minutes=m)).isoformat(),
         **({"value": value} if value is not None else {})}) + "\n" for i, (m, kind, value) in enumerate(events)))
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_kind_hourly"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)

    rows = delta_store.read_table(settings.layout.table("gold/kind_hourly")).to_pylist()
    got = {(r["window_start"].astimezone(UTC) - start, r["kind"]): (r["events"], r["valued"], r["cents"]) for r in rows}
    minutes = timedelta(minutes=1)
    assert got == {  # windows [h:15, h+1:15); the watermark (03:00 - 10 minutes) has closed the first three
        (-45 * minutes, "CLICK"): (1, 1, 150.0),  # 00:10
        (15 * minutes, "CLICK"): (2, 0, None),  # 00:20 and 01:14, neither with a value: 0 non-null, sum null
        (15 * minutes, "VIEW"): (1, 1, 200.0),  # 00:50
        (75 * minutes, "CLICK"): (1, 1, 25.0),  # 01:16
    }
    from include.quality import run_quality

    report = run_quality(settings, registry, ["gold/kind_hourly"])  # windows aligned on the offset grid, reconciled
    assert not report.failed() and "window_aligned" in {r.expectation for r in report.results}, report.render()


def test_a_key_expression_spark_cannot_resolve_names_the_job_and_field(spark, settings):
    from include.settings import load_settings

    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"]["gold_user_activity_5m"]["transform"]["keys"] = [{"name": "who", "expr": "lower(usr)", "type": "string"}]
    registry = build_registry(raw)
    generate(settings, events=100, seed=3, files=1)
    for job_id in ("bronze_clickstream", "silver_clickstream"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    with pytest.raises(ValueError, match=r"job 'gold_user_activity_5m': transform.keys.who: 'lower\(usr\)' is not an "
                                         r"expression over the source's columns \(event_id, user_id"):
        run_job(spark, settings, registry, "gold_user_activity_5m", AVAILABLE_NOW)


class _Duplicate(ValueError):
    pass


class _NonFinite(ValueError):
    pass


def strict_json_reason(line: str) -> str | None:
    """Python's strict JSON on a line: duplicate keys and NaN / Infinity refused, numbers beyond a double too, and
    nothing after the value; the reason the quarantine must give for what it refuses (None: one JSON object)."""
    def pairs(items):
        if len({k for k, _ in items}) != len(items):
            raise _Duplicate
        return dict(items)

    def finite(text):
        if abs(float(text)) == float("inf"):
            raise _NonFinite
        return float(text)

    def constant(text):
        raise _NonFinite

    try:
        value = json.loads(line, object_pairs_hook=pairs, parse_float=finite, parse_constant=constant)
    except _Duplicate:
        return "duplicate_key"
    except _NonFinite:
        return "non_finite_number"
    except json.JSONDecodeError as exc:
        return "trailing_content" if exc.msg == "Extra data" else "malformed_json"
    return None if isinstance(value, dict) else "malformed_json"


@pytest.mark.spark
def test_each_odd_line_gets_its_quarantine_reason(spark, registry, tmp_path):
    from spark_jobs.json_values import QUARANTINE_REASON
    from spark_jobs.transforms import parse_json

    good = '"event_id": "e1", "user_id": "u1", "event_type": "view", "value": 1.5'
    at = '"event_time": "2026-01-01T00:00:00Z"'
    one = '{' + good + ', ' + at + '}'
    lines = {
        one: None,
        '  ' + one + '\t': None,  # JSON whitespace around the object
        '{"event_id": "e1b", "user_id": "{not an object}", ' + at + '}': None,  # a string that looks like one
        '{"event_id": "e1c", "extra": {"nested": [1, 2]}, ' + at + '}': None,  # a key outside the schema
        '{' + good + ', ' + at: "malformed_json",  # truncated
        '[' + one + ']': "malformed_json",  # an array, not an object
        '42': "malformed_json",
        '"text"': "malformed_json",
        'null': "malformed_json",
        '': "malformed_json",
        'not json at all': "malformed_json",
        "{'event_id': 'e1d', 'event_time': '2026-01-01T00:00:00Z'}": "malformed_json",  # single quotes
        '{"event_id": "e1e\u0000x", ' + at + '}': "malformed_json",  # a raw NUL inside a string
        one + '{"event_id": "e3", ' + at + '}': "trailing_content",  # two objects: the second was lost before
        one + ' trailing': "trailing_content",
        one + ' // comment': "trailing_content",
        one + ']': "trailing_content",
        one + ',': "trailing_content",
        one + '}': "trailing_content",
        one + ', "k": 1': "trailing_content",
        one + ' {"x":': "trailing_content",
        one + '\u0000': "trailing_content",  # a NUL after the object
        one + '{"garbage': "trailing_content",
        '{"event_id": "e5", "event_id": "e5b", ' + at + '}': "duplicate_key",  # the last won before
        '{"event_id": "e5c", "x": 1, "x": 2, ' + at + '}': "duplicate_key",  # outside the schema too
        '{"event_id": "e5d", "x": {"a": 1, "a": 2}, ' + at + '}': "duplicate_key",  # at any depth
        '{"event_id": "e6", "value": NaN, ' + at + '}': "non_finite_number",
        '{"event_id": "e6b", "value": -Infinity, ' + at + '}': "non_finite_number",
        '{"event_id": "e7", "value": 1e400, ' + at + '}': "non_finite_number",  # Infinity in a double before
        '{"event_id": "e8", "user_id": {"id": 1}, ' + at + '}': "wrong_type",  # landed as JSON text before
        '{"event_id": "e8b", "event_type": ["view"], ' + at + '}': "wrong_type",
        '{"event_id": "e2", "value": "high", ' + at + '}': "wrong_type",
        '{"event_id": "e2b", "value": "1.5", ' + at + '}': "wrong_type",  # a string, not a number
        '{"event_id": "e3", "value": 2}': "missing_event_time",
        '{"value": 2, ' + at + '}': "missing_event_id",
        '{"event_id": "e4", "event_time": "yesterday"}': "unparseable_event_time",
        '{}': "missing_event_id",
    }
    syntax = ("malformed_json", "trailing_content", "duplicate_key", "non_finite_number")
    for line, reason in lines.items():  # the reasons a strict parser gives are Python's strict json's
        assert strict_json_reason(line) == (reason if reason in syntax else None), line
    landing = tmp_path / "odd.jsonl"
    landing.write_text("\n".join(lines) + "\n")
    rows = parse_json(spark.read.format("text").option("lineSep", "\n").load(str(landing)),
                      registry.job("bronze_clickstream")).select("raw_line", QUARANTINE_REASON).collect()
    assert {r["raw_line"]: r[QUARANTINE_REASON] for r in rows} == lines
