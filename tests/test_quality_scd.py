"""Great Expectations on the SCD tables: the tables the real apply_changes jobs make of Debezium events (on the
session's broker, as tests/test_cdc_apply.py makes them) pass their suites; each damage (a row written by Spark into
the table, as a faulty writer would) fails the check that guards against it, and only that one."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import timedelta

import pytest
import yaml
from pyspark.sql import functions as F

from include.kafka.produce import ensure_topic
from include.quality import run_quality
from include.quality.suites import CurrentTable, HistoryTable, quality_tables
from include.registry import Trigger, build_registry
from include.registry.cdc import END_AT, START_AT
from include.settings import load_settings
from spark_jobs.streaming_query import run_job
from tests.support.cdc_events import EPOCH, Change, Oracle, messages, produce
from tests.support.quality_data import assert_fails_only
from tests.support.snapshots import SnapshotLakehouse

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

CUSTOMERS, HISTORY = "silver/customers", "silver/customers_history"
APPLY_JOBS = ("silver_customers", "silver_customers_history")
TRACKED = ("name", "email", "country")
CURRENT_CHECKS = {"keys_not_null", "unique_rows", "freshness"}
HISTORY_CHECKS = {"version_span", "keys_not_null", "unique_rows", "freshness", "one_current_version", "versions_apart"}
LATEST_COMMIT = 80  # seconds after EPOCH: the latest change of CHANGES


def customer(key: int, name: str, country: str = "FR", at: int = 0) -> dict:
    return {"id": key, "name": name, "email": f"{key}@shop", "country": country,
            "updated_at": f"2026-12-07T00:{at // 60:02d}:{at % 60:02d}Z"}


# Versions (seconds after EPOCH): 1 [0, 10) [10, 20) [20, -); 2 [0, 30) [40, -); 3 [0, -) (its change at 50 touches
# updated_at alone); 4 [0, 60); 5 [70, 80) [80, -)
CHANGES = [*(Change("r", customer(k, f"n{k}"), commit=0, snapshot_lsn=900) for k in (1, 2, 3, 4)),
           Change("u", customer(1, "n1b"), commit=10), Change("u", customer(1, "n1c"), commit=20),
           Change("d", {"id": 2}, commit=30), Change("c", customer(2, "n2b"), commit=40),
           Change("u", customer(3, "n3", at=50), commit=50), Change("d", {"id": 4}, commit=60),
           Change("c", customer(5, "n5"), commit=70), Change("u", customer(5, "n5", "DE"), commit=LATEST_COMMIT)]


@pytest.fixture(scope="module")
def house(spark, kafka_broker, tmp_path_factory):
    """The shipped registry's customers jobs on a topic of their own, run once on CHANGES; snapshot `built`."""
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    database = f"q{uuid.uuid4().hex[:8]}"
    raw["sources"]["customers"]["cdc"]["database"] = database
    house = SnapshotLakehouse(spark, tmp_path_factory.mktemp("quality_scd"), raw)
    house.topic = f"{database}.public.customers"
    ensure_topic(kafka_broker, house.topic, 1)
    produce(kafka_broker, house.topic, messages(CHANGES))
    for job_id in ("bronze_customers", *APPLY_JOBS):
        run_job(spark, house.settings, house.registry, job_id, Trigger(available_now=True))
    house.take("built")
    return house


def observed(report, expectation: str) -> dict:
    return json.loads(next(r.observed_value for r in report.results if r.expectation == expectation))


def copied(where: str, **columns: str):
    """A damage: the rows `where` selects appended again, with `columns` set to SQL expressions."""
    def append(spark, path) -> None:
        rows = spark.read.format("delta").load(str(path)).where(where)
        for column, expression in columns.items():
            rows = rows.withColumn(column, F.expr(expression))
        rows.write.format("delta").mode("append").save(str(path))
    return append


def updated(assignments: str, where: str):
    """A damage: the rows `where` selects updated in place."""
    return lambda spark, path: spark.sql(f"UPDATE delta.`{path}` SET {assignments} WHERE {where}")


def test_the_shipped_registry_gives_each_scd_table_its_suite(registry):
    specs = quality_tables(registry)
    assert [type(specs[t]) for t in (CUSTOMERS, HISTORY, "silver/orders")] == [CurrentTable, HistoryTable,
                                                                                CurrentTable]
    assert {c.name for c in specs[CUSTOMERS].checks} == {c.name for c in specs["silver/orders"].checks} == CURRENT_CHECKS
    assert {c.name for c in specs[HISTORY].checks} == HISTORY_CHECKS
    assert specs[CUSTOMERS].deletes_table == "silver/customers_deletes" and specs[HISTORY].deletes_table is None
    assert specs[HISTORY].unique_key == ("id", "_cdc_sequence")
    assert {(s.event_time, s.source_table, s.freshness_lag_seconds) for s in specs.values()
            if isinstance(s, CurrentTable | HistoryTable)} == {("_cdc_commit_time", "bronze/customers", 300),
                                                               ("_cdc_commit_time", "bronze/orders", 300)}


def test_an_scd_jobs_quality_section_sets_its_lag_and_severities():
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    history = copy.deepcopy(raw)
    history["jobs"]["silver_customers_history"]["quality"] = {"freshness_lag": "1 hour",
                                                              "severity": {"versions_apart": "warning"}}
    spec = quality_tables(build_registry(history))[HISTORY]
    assert spec.freshness_lag_seconds == 3600
    assert {c.name: c.severity for c in spec.checks}["versions_apart"] == "warning"
    raw["jobs"]["silver_orders"]["quality"] = {"severity": {"version_gap": "warning"}}
    with pytest.raises(ValueError, match=r"job 'silver_orders': quality\.severity\.version_gap: unknown expectation"):
        build_registry(raw)


def test_the_jobs_tables_pass_their_suites(house):
    house.restore("built")
    oracle = Oracle(TRACKED)
    oracle.add(CHANGES)
    report = run_quality(house.settings, house.registry, [CUSTOMERS, HISTORY])
    assert not report.failed() and not report.warnings, report.render()
    assert {r.expectation for r in report.results if r.table == CUSTOMERS} == CURRENT_CHECKS
    assert {r.expectation for r in report.results if r.table == HISTORY} == HISTORY_CHECKS
    assert len(oracle.type2()) == 9
    assert observed(report, "versions_apart") == {"overlapping_versions": 0, "versions": 9, "examples": []}
    current = observed(report, "one_current_version")
    assert (current["keys_with_several_current_versions"], current["current_versions"], current["keys"]) == (0, 4, 5)
    freshness = [json.loads(r.observed_value) for r in report.results if r.expectation == "freshness"]
    assert [(f["freshness_lag_seconds"], f["source"]) for f in freshness] == [(0, "bronze/customers")] * 2
    assert {f["latest__cdc_commit_time"] for f in freshness} == {f["latest_change_held"] for f in freshness} == {
        (EPOCH + timedelta(seconds=LATEST_COMMIT)).isoformat()}


def at(seconds: int) -> str:
    """The SQL timestamp `seconds` after EPOCH."""
    return f"timestamp_seconds({int(EPOCH.timestamp()) + seconds})"


# (table, damage, the check it fails, the key its details name). Seconds after EPOCH: key 1's versions [0, 10)
# [10, 20) [20, -), key 3's only one current, key 4's only one closed [0, 60).
DAMAGES = [
    pytest.param(CUSTOMERS, copied("id = 1"), "unique_rows", None, id="current_key_twice"),
    pytest.param(CUSTOMERS, copied("id = 1", id="CAST(NULL AS BIGINT)"), "keys_not_null", None,
                 id="current_null_key"),
    pytest.param(HISTORY, updated(f"{START_AT} = {at(60)}, {END_AT} = {at(0)}", "id = 4"), "version_span", None,
                 id="start_after_end"),
    pytest.param(HISTORY, updated(f"{START_AT} = {at(60)}", "id = 4"), "version_span", None, id="empty_span"),
    pytest.param(HISTORY, copied("id = 2"), "unique_rows", None, id="version_twice"),
    pytest.param(HISTORY, copied("id = 3", _cdc_sequence="'2'", **{START_AT: at(55)}), "one_current_version", 3,
                 id="second_current_version"),
    pytest.param(HISTORY, updated(f"{END_AT} = {at(15)}", f"id = 1 AND {END_AT} = {at(10)}"), "versions_apart", 1,
                 id="end_after_next_start"),
    pytest.param(HISTORY, copied("id = 3", _cdc_sequence="'2'", **{START_AT: at(55), END_AT: at(56)}),
                 "versions_apart", 3, id="closed_after_current"),
]


@pytest.mark.parametrize(("table", "damage", "expected", "key"), DAMAGES)
def test_each_damage_fails_exactly_its_check(house, table, damage, expected, key):
    house.restore("built")
    damage(house.spark, house.settings.layout.table(table))
    report = run_quality(house.settings, house.registry, [table])
    assert_fails_only(house.settings, report, table, expected)
    if key is not None:
        assert {e["id"] for e in observed(report, expected)["examples"]} == {key}


@pytest.mark.full  # make test: the tables fresh and each other check failing on its damage
def test_a_change_not_applied_yet_fails_freshness_until_the_jobs_apply_it(house, kafka_broker):
    """A change a day after the others reaches bronze: both tables lag by it; applied, they are fresh, the history
    table too although the change (to updated_at alone) adds no version: its job has read it."""
    house.restore("built")
    late = 86_400
    produce(kafka_broker, house.topic, messages([Change("u", customer(3, "n3", at=59), commit=late)]))
    run_job(house.spark, house.settings, house.registry, "bronze_customers", Trigger(available_now=True))
    report = run_quality(house.settings, house.registry, [CUSTOMERS, HISTORY])
    assert report.failed() == {"freshness"}, report.render()
    lags = {r.table: json.loads(r.observed_value)["freshness_lag_seconds"] for r in report.results
            if r.expectation == "freshness"}
    assert lags == {CUSTOMERS: late - LATEST_COMMIT, HISTORY: late - LATEST_COMMIT}
    for job_id in APPLY_JOBS:
        run_job(house.spark, house.settings, house.registry, job_id, Trigger(available_now=True))
    report = run_quality(house.settings, house.registry, [CUSTOMERS, HISTORY])
    assert not report.failed(), report.render()
    freshness = {r.table: json.loads(r.observed_value) for r in report.results if r.expectation == "freshness"}
    assert freshness[HISTORY]["latest_change_held"] < freshness[HISTORY]["read_until"]  # no version started
    assert freshness[CUSTOMERS]["latest_change_held"] == freshness[CUSTOMERS]["read_until"]
