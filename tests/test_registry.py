"""Registry loading and validation: the real registry loads, and every kind of mistake is named."""

from __future__ import annotations

import copy

import pytest

from include.registry import Admission, RegistryError, Trigger, build_registry, load_registry, parse_duration
from include.registry.vocabulary import FILE_RETENTION, LOG_RETENTION
from tests.support.helpers import problems_of


def test_real_registry_loads_in_dependency_order(registry):
    assert registry.order == ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m",
                              "gold_user_activity_1h", "gold_user_sessions", "gold_user_running_totals",
                              "gold_user_session_summaries", "bronze_payments", "silver_payments",
                              "gold_order_payments", "bronze_logins", "silver_logins", "gold_fraud_alerts",
                              "bronze_service_logs", "silver_service_logs", "gold_stale_services",
                              "bronze_customers", "silver_customers", "silver_customers_history", "bronze_orders",
                              "silver_orders", "gold_customer_order_totals", "ops_lineage")
    assert registry.upstream("gold_user_activity_1h") == ["silver_clickstream"]
    assert registry.upstream("gold_order_payments") == ["silver_clickstream", "silver_payments"]
    assert registry.job("gold_user_sessions").output_schema == {
        "session_start": "timestamp", "session_end": "timestamp", "user_id": "string",
        "event_count": "long", "total_value": "double",
    }
    assert registry.job("gold_order_payments").output_schema == {
        "order_id": "string", "user_id": "string", "order_time": "timestamp", "order_value": "double",
        "payment_id": "string", "payment_time": "timestamp", "amount": "double", "paid": "boolean",
    }
    assert registry.job("gold_order_payments").right_source.event_time == "payment_time"
    assert registry.job("gold_user_activity_5m").output_schema == {
        "window_start": "timestamp", "window_end": "timestamp", "user_id": "string",
        "event_count": "long", "total_value": "double",
    }
    bronze = registry.job("bronze_clickstream")
    assert bronze.output_schema["_source_file"] == "string" and bronze.output_schema["_ingested_at"] == "timestamp"
    assert bronze.state_store.provider == "rocksdb" and bronze.state_store.changelog_checkpointing == "live"
    assert registry.job("silver_clickstream").source.watermark_seconds == 600
    assert str(bronze.triggers["live"]) == "processing-time=30 seconds"


def test_changelog_checkpointing_defaults_to_true_and_is_true_false_or_live(raw):
    """A registry without the key keeps the meaning it always had (changelog checkpointing on); `live`: changelogs
    in live runs only."""
    live, backfill = Trigger.parse("processing-time=30 seconds"), Trigger.parse("available-now")
    del raw["defaults"]["state_store"]["changelog_checkpointing"]
    store = build_registry(copy.deepcopy(raw)).job("silver_clickstream").state_store
    assert store.changelog_in(live) and store.changelog_in(backfill) and store.changelog_in(None)
    raw["jobs"]["silver_clickstream"]["state_store"] = {"changelog_checkpointing": "live"}
    store = build_registry(copy.deepcopy(raw)).job("silver_clickstream").state_store
    assert store.changelog_in(live) and store.changelog_in(Trigger.parse("on-upstream-commit"))
    assert not store.changelog_in(backfill) and not store.changelog_in(None)  # None: a checkpoint action's
    raw["jobs"]["silver_clickstream"]["state_store"] = {"changelog_checkpointing": False}
    assert not build_registry(copy.deepcopy(raw)).job("silver_clickstream").state_store.changelog_in(live)
    raw["jobs"]["silver_clickstream"]["state_store"] = {"changelog_checkpointing": "no"}
    with pytest.raises(RegistryError, match="silver_clickstream.*changelog_checkpointing: must be true, false or "
                                            "'live' .* got 'no'"):
        build_registry(raw)


def test_unknown_job_lists_known_ones(registry):
    with pytest.raises(KeyError, match="unknown job 'nope'.*bronze_clickstream"):
        registry.job("nope")


def test_unknown_column_names_job_and_field(raw):
    raw["jobs"]["gold_user_activity_5m"]["transform"]["keys"] = ["customer_id"]
    raw["jobs"]["gold_user_activity_1h"]["sink"]["merge_keys"] = ["window_start", "nope"]
    found = problems_of(raw)
    assert "job 'gold_user_activity_5m': transform.keys: unknown column 'customer_id'" in found
    assert "job 'gold_user_activity_1h': sink.merge_keys: unknown column 'nope'" in found


def test_bad_duration_names_job_and_field(raw):
    raw["jobs"]["silver_clickstream"]["source"]["watermark"] = "10 minuts"
    raw["jobs"]["gold_user_activity_1h"]["transform"]["slide"] = "7 minutes"
    found = problems_of(raw)
    assert any(p.startswith("job 'silver_clickstream': source.watermark: bad duration '10 minuts'") for p in found)
    assert any(p.startswith("job 'gold_user_activity_1h': transform.slide: must divide") for p in found)


def test_stateful_process_jobs_name_a_processor_of_the_catalogue(registry, raw):
    fraud = registry.job("gold_fraud_alerts")
    assert fraud.transform.params == {"failures": 5, "within": 600} and fraud.transform.keys == ("user_id",)
    assert fraud.output_schema["alert_time"] == "timestamp" and fraud.stateful
    del raw["jobs"]["gold_fraud_alerts"]["transform"]["params"]  # the processor's defaults
    from include.registry import build_registry

    assert build_registry(raw).job("gold_fraud_alerts").transform.params == {"failures": 5, "within": 600}


def test_stateful_process_mistakes_name_job_and_field(raw):
    transform = raw["jobs"]["gold_fraud_alerts"]["transform"]
    transform["params"] = {"failures": 0, "within": "ten minutes", "burst": 3}
    transform["keys"] = ["user"]
    found = problems_of(raw)
    where = "job 'gold_fraud_alerts': transform"
    assert f"{where}.params.failures: must be a positive integer, got 0" in found
    assert any(p.startswith(f"{where}.params.within: bad duration 'ten minutes'") for p in found)
    assert f"{where}.params.burst: unknown parameter of fraud_alerts (known: failures, within)" in found
    assert f"{where}.keys: unknown column 'user'" in found
    transform.update(processor="fraud_alert", params={}, keys=["user_id"])
    assert problems_of(raw) == [f"{where}.processor: unknown processor 'fraud_alert' (known: fraud_alerts, "
                                "stale_services, sessionizer)"]
    transform["processor"] = "fraud_alerts"
    transform["initial_state"] = "seed/failures"
    assert problems_of(raw) == [f"{where}.initial_state: fraud_alerts does not start from an initial state"]
    del transform["initial_state"]
    raw["jobs"]["gold_user_session_summaries"]["transform"]["initial_state"] = "/tmp/elsewhere"
    assert problems_of(raw) == ["job 'gold_user_session_summaries': transform.initial_state: '/tmp/elsewhere' must "
                                "be a table like 'layer/name' under LAKEHOUSE_ROOT"]
    del raw["jobs"]["gold_user_session_summaries"]["transform"]["initial_state"]
    raw["sources"]["logins"]["schema"]["outcome"] = "boolean"
    assert f"{where}.processor: fraud_alerts reads a string column 'outcome', which the source has as boolean" in \
        problems_of(raw)


def test_a_table_source_inherits_the_event_time_of_its_writer(registry, raw):
    from include.registry import build_registry

    del raw["jobs"]["silver_payments"]["source"]["event_time"]  # bronze/payments carries payment_time on
    del raw["jobs"]["gold_order_payments"]["transform"]["right"]["event_time"]
    raw["jobs"]["paid_orders"] = {  # a join's table carries its left event time under its output name
        "source": {"table": "gold/order_payments", "watermark": "10 minutes"},
        "transform": {"kind": "deduplicate", "keys": ["order_id"]}, "sink": {"table": "gold/paid_orders"}}
    inherited = build_registry(raw)
    assert inherited.job("silver_payments") == registry.job("silver_payments")
    assert inherited.job("gold_order_payments") == registry.job("gold_order_payments")
    assert inherited.job("paid_orders").source.event_time == "order_time"


def test_a_source_without_an_event_time_names_the_field_not_the_watermark(raw):
    raw["jobs"]["window_dedup"] = {
        "source": {"table": "gold/user_activity_5m", "watermark": "10 minutes"},
        "transform": {"kind": "deduplicate", "keys": ["user_id"]}, "sink": {"table": "gold/window_dedup"}}
    assert problems_of(raw) == [
        "job 'window_dedup': source.event_time: the deduplicate transform needs an event-time column, and "
        "'gold/user_activity_5m' inherits none from its writer: name one of its timestamp columns "
        "(window_start, window_end)"]
    raw["jobs"]["window_dedup"]["source"]["event_time"] = "window_end"
    from include.registry import build_registry

    assert build_registry(raw).job("window_dedup").source.event_time == "window_end"


def test_count_with_a_column_must_name_a_column_of_the_source(raw):
    aggregations = raw["jobs"]["gold_user_activity_5m"]["transform"]["aggregations"]
    aggregations["valued_events"] = {"fn": "count", "column": "valeu"}
    assert problems_of(raw) == [
        "job 'gold_user_activity_5m': transform.aggregations.valued_events.column: unknown column 'valeu'"]


def test_expression_keys_and_inputs(raw):
    from include.registry import build_registry

    transform = raw["jobs"]["gold_user_activity_5m"]["transform"]
    transform["keys"] = ["user_id", {"name": "day", "expr": "to_date(event_time)", "type": "date"}]
    transform["aggregations"]["cents"] = {"fn": "sum", "expr": "value * 100"}
    job = build_registry(raw).job("gold_user_activity_5m")
    assert job.transform.keys == ("user_id", "day")
    assert job.transform.key_expressions == {"day": ("to_date(event_time)", "date")}
    assert job.output_schema["day"] == "date" and job.output_schema["cents"] == "double"
    transform["keys"] = [{"name": "Day", "expr": "1"}, {"name": "hour", "expr": "hour(event_time)", "type": "integer"}]
    transform["aggregations"]["cents"] = {"fn": "sum", "expr": "value * 100", "column": "value"}
    raw["jobs"]["silver_clickstream"]["transform"]["keys"] = [{"name": "id", "expr": "lower(event_id)"}]
    found = problems_of(raw)
    assert "job 'silver_clickstream': transform.keys: deduplicate keys are columns, not expressions " \
           "({'name': 'id', 'expr': 'lower(event_id)'})" in found
    assert "job 'gold_user_activity_5m': transform.keys.Day.name: 'Day' must be a column name (lowercase, digits, " \
           "underscores)" in found
    assert any(p.startswith("job 'gold_user_activity_5m': transform.keys.hour.type: unknown type 'integer'") for p in found)
    assert any(p.startswith("job 'gold_user_activity_5m': transform.aggregations.cents: give a column or an expr")
               for p in found)


def test_decimal_columns_carry_their_precision_and_scale_through_the_jobs(raw):
    from include.registry import build_registry

    raw["sources"]["clickstream"]["schema"]["price"] = "decimal( 12, 2 )"
    transform = raw["jobs"]["gold_user_activity_5m"]["transform"]
    transform["aggregations"].update(revenue={"fn": "sum", "column": "price"}, mean_price={"fn": "avg", "column": "price"},
                                     top_price={"fn": "max", "column": "price"},
                                     fee={"fn": "sum", "expr": "price * 0.01", "type": "decimal(36,4)"})
    registry = build_registry(raw)
    assert registry.job("silver_clickstream").output_schema["price"] == "decimal(12,2)"  # written one way
    gold = registry.job("gold_user_activity_5m").output_schema
    # Spark's result types: a sum gains 10 integer digits, an average 4 digits of scale, both at most 38
    assert (gold["revenue"], gold["mean_price"], gold["top_price"], gold["fee"]) == (
        "decimal(22,2)", "decimal(16,6)", "decimal(12,2)", "decimal(38,4)")
    raw["sources"]["clickstream"]["schema"].update(price="decimal(39,2)", tax="decimal(4,5)", vat="decimal(4)")
    found = problems_of(raw)
    for column, named in (("price", "decimal(39,2)"), ("tax", "decimal(4,5)")):
        assert f"source 'clickstream': schema: column {column!r}: {named!r}: a decimal's precision is 1 to 38 and " \
               "its scale 0 to the precision" in found
    assert "source 'clickstream': schema: column 'vat': unknown type 'decimal(4)' (known: string, double, float, " \
           "long, int, boolean, timestamp, date, json, decimal(p,s))" in found


def test_running_aggregates_upsert_one_row_per_key(registry, raw):
    totals = registry.job("gold_user_running_totals")
    assert totals.sink.mode == "update" and totals.sink.merge_keys == ("user_id",) and totals.stateful
    assert totals.source.watermark_seconds is None  # totals over all time need no watermark
    sink = raw["jobs"]["gold_user_running_totals"]["sink"]
    sink["mode"], sink["merge_keys"] = "append", ["user_id", "event_count"]
    found = problems_of(raw)
    where = "job 'gold_user_running_totals': sink"
    assert f"{where}.mode: a running_aggregate upserts its totals: mode update" in found
    assert f"{where}.merge_keys: a running_aggregate has one row per key: its keys ['user_id']" in found


def test_two_jobs_writing_one_table(raw):
    raw["jobs"]["gold_user_activity_1h"]["sink"]["table"] = "gold/user_activity_5m"
    found = problems_of(raw)
    assert any("job 'gold_user_activity_1h': sink table 'gold/user_activity_5m' is already written by job "
               "'gold_user_activity_5m'" in p for p in found)


def test_cycle_is_reported(raw):
    raw["jobs"]["a_job"] = {"source": {"table": "gold/b_table", "watermark": "1 minute"},
                            "transform": {"kind": "deduplicate", "keys": ["event_id"]},
                            "sink": {"table": "gold/a_table"}}
    raw["jobs"]["b_job"] = {"source": {"table": "gold/a_table", "watermark": "1 minute"},
                            "transform": {"kind": "deduplicate", "keys": ["event_id"]},
                            "sink": {"table": "gold/b_table"}}
    found = problems_of(raw)
    assert any("forms a cycle" in p and "a_job" in p and "b_job" in p for p in found)


def test_source_table_nobody_writes(raw):
    raw["jobs"]["silver_clickstream"]["source"]["table"] = "bronze/nowhere"
    assert "job 'silver_clickstream': source.table: 'bronze/nowhere' is not written by any job in the registry" \
        in problems_of(raw)


def test_other_mistakes_are_named(raw):
    broken = copy.deepcopy(raw)
    broken["jobs"]["gold_user_activity_5m"]["transform"]["kind"] = "pivot"
    broken["jobs"]["gold_user_activity_1h"]["sink"]["mode"] = "complete"
    broken["jobs"]["bronze_clickstream"]["source"]["max_files_per_trigger"] = 0
    broken["sources"]["clickstream"]["schema"]["value"] = "float64"
    found = "\n".join(problems_of(broken))
    assert "job 'gold_user_activity_5m': transform.kind: unknown kind 'pivot'" in found
    assert "job 'gold_user_activity_1h': sink.mode: unknown mode 'complete'" in found
    assert "job 'bronze_clickstream': source.max_files_per_trigger: must be a positive integer" in found
    assert "source 'clickstream': schema: column 'value': unknown type 'float64'" in found


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(RegistryError, match="registry file not found"):
        load_registry(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [unclosed")
    with pytest.raises(RegistryError, match="not valid YAML"):
        load_registry(bad)


def test_durations_and_triggers():
    assert parse_duration("10 minutes") == 600 and parse_duration("1 hour") == 3600
    assert parse_duration("30 seconds") == 30
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration("ten minutes")
    assert Trigger.parse("available-now").available_now
    assert Trigger.parse("processing-time=10 seconds").interval_seconds == 10
    with pytest.raises(ValueError, match="bad trigger"):
        Trigger.parse("once")
    following = Trigger.parse("on-upstream-commit")
    assert not following.available_now and following.on_upstream_commit and str(following) == "on-upstream-commit"
    assert following.spark_interval == "1 seconds"  # Spark looks for a new upstream commit every second
    assert Trigger.parse("processing-time=10 seconds").spark_interval == "10 seconds"
    assert [Trigger.names_live(t) for t in ("on-upstream-commit", "processing-time=1 minute", "available-now", None)] \
        == [True, True, False, False]


def test_a_job_on_its_upstreams_commits_reads_tables_only_and_batches_as_often_as_they_commit(registry, raw):
    """`on-upstream-commit`: silver follows bronze's commits (30 s apart), so its batches come 30 s apart at most, and
    a gold job following silver's as well; a job reading landing files or Kafka has no upstream commit to wait for,
    and a processor's processing-time timers need batches on a clock."""
    assert str(registry.job("silver_clickstream").triggers["live"]) == "on-upstream-commit"
    assert registry.live_interval_seconds("silver_clickstream") == 30
    assert registry.live_interval_seconds("gold_user_activity_5m") == 60  # its own clock
    raw["jobs"]["gold_user_activity_5m"]["triggers"] = {"live": "on-upstream-commit"}
    assert build_registry(raw).live_interval_seconds("gold_user_activity_5m") == 30  # silver's, that is bronze's
    raw["jobs"]["bronze_payments"]["triggers"] = {"live": "on-upstream-commit"}
    raw["jobs"]["gold_stale_services"]["triggers"] = {"backfill": "on-upstream-commit"}
    found = problems_of(raw)
    assert ("job 'bronze_payments': triggers.live: on-upstream-commit waits for commits to the tables the job reads, "
            "and it reads kafka source 'payments': give it a processing-time trigger") in found
    assert ("job 'gold_stale_services': triggers.backfill: its processor's processing-time timers fire only when "
            "batches run, and on-upstream-commit runs batches only when the input has new rows: give it a "
            "processing-time trigger") in found
    assert len(found) == 2, found


def test_join_mistakes_name_job_and_field(raw):
    join = raw["jobs"]["gold_order_payments"]["transform"]
    join["join_keys"] = {"event_id": "order_ref"}
    join["how"] = "outer"
    join["within"] = "half an hour"
    join["columns"]["amount"] = "middle.amount"
    del join["columns"]["payment_time"]
    del join["right"]["watermark"]
    found = problems_of(raw)
    where = "job 'gold_order_payments'"
    assert f"{where}: transform.join_keys: unknown right column 'order_ref'" in found
    assert f"{where}: transform.how: unknown join type 'outer' (known: inner, left_outer, right_outer, full_outer)" \
        in found
    assert any(p.startswith(f"{where}: transform.within: bad duration 'half an hour'") for p in found)
    assert any(p.startswith(f"{where}: transform.columns.amount: 'middle.amount' is not") for p in found)
    assert any(p.startswith(f"{where}: transform.columns: must keep the right event time ('right.payment_time')")
               for p in found)
    assert f"{where}: transform.right.watermark: the stream_join transform needs an event-time watermark" in found


def test_join_bounds_and_window_offsets(raw):
    from include.registry import build_registry

    join = raw["jobs"]["gold_order_payments"]["transform"]
    join["within"] = {"before": "5 minutes", "after": "30 minutes"}
    raw["jobs"]["gold_user_activity_5m"]["transform"]["offset"] = "2 minutes"
    registry = build_registry(raw)
    assert (registry.job("gold_order_payments").transform.before_seconds,
            registry.job("gold_order_payments").transform.within_seconds) == (300, 1800)
    assert registry.job("gold_user_activity_5m").transform.offset_seconds == 120
    join["within"] = {"before": "5 minutes", "until": "30 minutes"}
    raw["jobs"]["gold_user_activity_5m"]["transform"]["offset"] = "5 minutes"
    raw["jobs"]["gold_user_activity_1h"]["transform"]["offset"] = "1 minute"  # less than its 5-minute slide: fine
    found = problems_of(raw)
    assert found == [
        "job 'gold_user_activity_5m': transform.offset: must be at least 0 and less than the slide (300 s), got "
        "'5 minutes'",
        "job 'gold_order_payments': transform.within: unknown fields ['until'] (a duration, or {before, after})"]


def test_join_right_table_must_be_written_and_session_gap_valid(raw):
    raw["jobs"]["gold_order_payments"]["transform"]["right"]["table"] = "silver/refunds"
    raw["jobs"]["gold_user_sessions"]["transform"]["gap"] = "0 minutes"
    found = problems_of(raw)
    assert "job 'gold_order_payments': transform.right.table: 'silver/refunds' is not written by any job in the " \
           "registry" in found
    assert "job 'gold_user_sessions': transform.gap: must be positive, got '0 minutes'" in found


def test_delta_table_options_of_the_registry(registry, raw):
    bronze, silver = registry.job("bronze_clickstream"), registry.job("silver_clickstream")
    kept_week = {FILE_RETENTION: "interval 168 hours", LOG_RETENTION: "interval 168 hours"}  # VACUUM's retention
    assert bronze.sink.properties == {"delta.appendOnly": "true", **kept_week} and bronze.sink.files_per_batch == 1
    assert silver.sink.properties == {"delta.enableChangeDataFeed": "true", **kept_week}
    assert bronze.sink.maintenance.optimize and bronze.sink.maintenance.vacuum_retention_hours == 168
    raw["jobs"]["silver_clickstream"]["source"]["max_bytes_per_trigger"] = "64 MB"
    raw["jobs"]["silver_clickstream"]["sink"]["maintenance"] = {"vacuum_retention": "2 days", "optimize": False}
    changed = build_registry(raw).job("silver_clickstream")
    assert changed.source.max_bytes_per_trigger == 64 * 1024**2
    assert changed.sink.maintenance.vacuum_retention_hours == 48 and not changed.sink.maintenance.optimize
    assert changed.sink.properties[LOG_RETENTION] == changed.sink.properties[FILE_RETENTION] == "interval 48 hours"
    raw["jobs"]["silver_clickstream"]["sink"]["properties"][LOG_RETENTION] = "interval 30 days"  # said: kept
    assert build_registry(raw).job("silver_clickstream").sink.properties[LOG_RETENTION] == "interval 30 days"
    assert "bronze/clickstream_quarantine" in registry.tables_written()


def test_delta_table_option_mistakes_are_named(raw):
    broken = copy.deepcopy(raw)
    broken["jobs"]["bronze_clickstream"]["sink"]["properties"] = {"delta.enableDeletionVectors": True,
                                                                  "delta.appendOnly": "yes"}
    broken["jobs"]["gold_user_activity_1h"]["sink"]["properties"] = {"delta.appendOnly": True}
    broken["jobs"]["silver_clickstream"]["sink"]["files_per_batch"] = 0
    broken["jobs"]["silver_clickstream"]["source"]["max_bytes_per_trigger"] = "lots"
    broken["jobs"]["gold_user_activity_5m"]["sink"]["maintenance"] = {"vacuum_retention": "90 minutes"}
    found = "\n".join(problems_of(broken))
    assert "job 'bronze_clickstream': sink.properties.delta.enableDeletionVectors: not a supported table property" \
        in found
    assert "job 'bronze_clickstream': sink.properties.delta.appendOnly: must be true or false, got 'yes'" in found
    assert "job 'gold_user_activity_1h': sink.properties.delta.appendOnly: an update-mode (MERGE) sink cannot" in found
    assert "job 'silver_clickstream': sink.files_per_batch: must be a positive integer, got 0" in found
    assert "job 'silver_clickstream': source.max_bytes_per_trigger: bad size 'lots'" in found
    assert "job 'gold_user_activity_5m': sink.maintenance.vacuum_retention: must be whole hours" in found


def test_a_processor_job_keeps_its_state_in_rocksdb(raw):
    broken = copy.deepcopy(raw)
    broken["jobs"]["gold_user_session_summaries"]["state_store"] = {"provider": "hdfs"}
    broken["jobs"]["gold_user_sessions"]["state_store"] = {"provider": "hdfs"}  # a window job may choose it
    assert problems_of(broken) == [
        "job 'gold_user_session_summaries': state_store.provider: a stateful_process job keeps its state in "
        "RocksDB (Spark's transformWithState needs its column families), got 'hdfs'"]


def test_an_upserted_table_is_read_through_its_change_feed(raw):
    reader = {
        "source": {"table": "gold/user_activity_1h", "watermark": "1 hour", "event_time": "window_end"},
        "transform": {"kind": "deduplicate", "keys": ["window_start", "user_id", "_commit_version", "_change_type"]},
        "sink": {"table": "gold/user_activity_1h_changes", "mode": "append"},
    }
    raw["jobs"]["activity_changes"] = copy.deepcopy(reader)
    assert ("job 'activity_changes': source.read_change_feed: table 'gold/user_activity_1h' is upserted (update mode) "
            "by job 'gold_user_activity_1h': stream its changes with read_change_feed: true") in problems_of(raw)
    raw["jobs"]["activity_changes"]["source"]["read_change_feed"] = True
    job = build_registry(raw).job("activity_changes")
    assert job.source.read_change_feed and job.source.schema["_change_type"] == "string"
    assert job.output_schema["_commit_version"] == "long"
    del raw["jobs"]["gold_user_activity_1h"]["sink"]["properties"]
    assert ("job 'activity_changes': source.read_change_feed: table 'gold/user_activity_1h' has no change data "
            "feed: set 'delta.enableChangeDataFeed: true' in job 'gold_user_activity_1h''s sink.properties"
            ) in problems_of(raw)


def test_backfills_admit_by_their_own_limits(registry, raw):
    bronze, silver = registry.job("bronze_clickstream").source, registry.job("silver_clickstream").source
    assert bronze.admission(available_now=False) == Admission(max_files=6)
    assert bronze.admission(available_now=True) == Admission(max_bytes=512 * 1024**2)
    assert silver.admission(available_now=False) == Admission(max_files=3)
    assert silver.admission(available_now=True) == Admission(max_bytes=512 * 1024**2)
    # A source's own backfill limits replace the defaults'; a landing source given bytes drops its file limit.
    raw["jobs"]["silver_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 50}
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 10}
    changed = build_registry(raw)
    assert changed.job("silver_clickstream").source.admission(True) == Admission(max_files=50)
    assert changed.job("bronze_clickstream").source.admission(True) == Admission(max_files=10)
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 10, "max_bytes_per_trigger": 99}
    assert build_registry(raw).job("bronze_clickstream").source.admission(True) == Admission(max_bytes=99)
    # A registry without backfill limits admits backfills as before: by the source's own limits.
    del raw["defaults"]["backfill"]
    old = build_registry(raw).job("gold_user_activity_5m").source
    assert old.admission(True) == old.admission(False) == Admission(max_files=12)


def test_admission_mistakes_are_named(raw):
    raw["defaults"]["backfill"] = {"max_bytes_per_trigger": "huge", "max_rows": 3}
    raw["defaults"]["admission"] = {}
    raw["jobs"]["bronze_clickstream"]["source"]["max_bytes_per_trigger"] = "1 MB"
    raw["jobs"]["silver_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 0}
    found = "\n".join(problems_of(raw))
    assert "defaults: unknown fields ['admission']" in found
    assert "job 'gold_user_activity_5m': source.backfill.max_bytes_per_trigger: bad size 'huge'" in found
    assert "job 'gold_user_activity_5m': source.backfill: unknown fields ['max_rows']" in found
    assert "job 'silver_clickstream': source.backfill.max_files_per_trigger: must be a positive integer, got 0" in found
    assert ("job 'bronze_clickstream': source: a landing source is admitted by max_files_per_trigger or "
            "max_bytes_per_trigger, not both") in found


def test_shuffle_partitions_are_bounded(raw):
    raw["defaults"]["state_store"]["shuffle_partitions"] = 100000
    assert "job 'bronze_clickstream': state_store.shuffle_partitions: at most 2000, got 100000" in problems_of(raw)


def test_alert_processors_may_share_their_alert_table(raw):
    from include.registry import build_registry

    stale = {"source": {"table": "silver/service_logs", "watermark": "10 minutes"},
             "transform": {"kind": "stateful_process", "processor": "stale_services", "keys": ["service"]},
             "sink": {"table": "gold/alerts", "mode": "append"}}
    raw["jobs"]["gold_stale_services"] = stale
    raw["jobs"]["alert_reader"] = {"source": {"table": "gold/alerts", "watermark": "1 hour", "event_time": "alert_time"},
                                   "transform": {"kind": "deduplicate", "keys": ["alert_type", "entity"]},
                                   "sink": {"table": "gold/alert_digest"}}
    registry = build_registry(raw)
    assert [w.id for w in registry.writers_of("gold/alerts")] == ["gold_fraud_alerts", "gold_stale_services"]
    assert registry.order.index("alert_reader") > registry.order.index("gold_stale_services")
    assert registry.tables_written().count("gold/alerts") == 1
    del raw["jobs"]["alert_reader"]

    where = "job 'gold_stale_services': sink table 'gold/alerts' is already written by job 'gold_fraud_alerts'"
    raw["jobs"]["gold_stale_services"] = {**stale, "sink": {**stale["sink"], "partition_by": ["alert_type"]}}
    assert problems_of(raw) == [f"{where}: the sinks of the jobs sharing an alert table must agree (mode, "
                                "partition_by, properties)"]
    raw["jobs"]["gold_stale_services"] = {**raw["jobs"]["gold_fraud_alerts"]}  # the same alert types again
    assert problems_of(raw) == [f"{where}: alert processors share a table only when their alert types differ "
                                "(FRAUD_ALERT already written)"]
    raw["jobs"]["gold_stale_services"] = {**stale, "transform": {"kind": "deduplicate", "keys": ["service"]}}
    assert problems_of(raw) == [where]  # only alert processors share a table


def test_a_list_where_a_name_belongs_is_named(raw):
    raw["sources"]["clickstream"]["event_time"] = ["event_time"]
    raw["jobs"]["silver_clickstream"]["source"]["event_time"] = ["event_time"]
    raw["jobs"]["gold_fraud_alerts"]["transform"]["processor"] = ["fraud_alerts"]
    problems = "\n".join(problems_of(raw))
    assert "source 'clickstream': event_time: must be a column name, got ['event_time']" in problems
    assert "event_time: must be a column name, got ['event_time']" in problems.split("clickstream'", 1)[1]
    assert "transform.processor: unknown processor ['fraud_alerts']" in problems


def test_kafka_sources_and_their_mistakes(registry, raw):
    bronze = registry.job("bronze_payments")
    assert bronze.source.kind == "kafka" and bronze.source.kafka.topics == ("payments",)
    assert bronze.source.kafka.connection == "kafka_default" and bronze.source.kafka.fail_on_data_loss
    assert bronze.source.admission(False) == Admission(max_offsets=10000)
    assert bronze.source.admission(True) == Admission(max_offsets=200000)
    assert {"_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"} <= set(bronze.output_schema)
    assert "_source_file" not in bronze.output_schema

    raw["sources"]["payments"]["kafka"] = {"topics": ["a", "b c"], "starting_offsets": "yesterday",
                                           "fail_on_data_loss": "no", "group": "x"}
    raw["sources"]["payments"]["path"] = "landing/payments"
    raw["jobs"]["bronze_payments"]["source"]["max_files_per_trigger"] = 3
    raw["jobs"]["bronze_clickstream"]["source"]["max_offsets_per_trigger"] = 3
    raw["jobs"]["bronze_logins"]["source"] = {"kafka": "logins"}
    found = "\n".join(problems_of(raw))
    assert "source 'payments': kafka: unknown fields ['group']" in found
    assert "source 'payments': kafka.topics: topic names are 1-249 characters" in found
    assert "source 'payments': a Kafka source has topics, not a path" in found
    assert "job 'bronze_payments': source.max_files_per_trigger: a kafka source is admitted by max_offsets_per_trigger" \
        in found
    assert ("job 'bronze_clickstream': source.max_offsets_per_trigger: a landing source is admitted by "
            "max_files_per_trigger or max_bytes_per_trigger") in found
    assert "job 'bronze_logins': source.kafka: source 'logins' is a landing source: name it with `landing: logins`" \
        in found
    raw["sources"]["payments"]["kafka"] = {"topic": "payments", "starting_offsets": "yesterday"}
    assert any("kafka.starting_offsets: must be earliest, latest or an ISO-8601 timestamp, got 'yesterday'" in p
               for p in problems_of(raw))


def test_live_jobs_of_the_shipped_registry_admit_more_than_their_upstream_commits(registry):
    """A live job reading a table admits whole commits (`files_per_batch`); if a trigger of it admitted no more
    commits than its writer can make meanwhile, it would fall behind for good under steady input (or never work off
    a backlog). Each admits at least twice as many."""
    for job in (registry.job(j) for j in registry.order):
        sources = [job.source] + ([job.transform.right] if getattr(job.transform, "right", None) else [])
        for source in (s for s in sources if s.kind == "delta"):
            writer = registry.writer_of(source.name)
            commits_per_trigger = -(-registry.live_interval_seconds(job.id) // registry.live_interval_seconds(writer.id))
            admitted = source.admission(available_now=False).max_files
            assert admitted is None or admitted >= 2 * commits_per_trigger * writer.sink.files_per_batch, (
                job.id, source.name, admitted, commits_per_trigger)
