"""Change data capture applied: a table's Debezium change events, from a real broker, through bronze into SCD type 1
and type 2 tables, equal to the oracle (tests/support/cdc_events.py) whatever order the changes reach the topic in,
replayed or not, exactly once across a kill -9 between a batch's two commits, and a column the database table gains
taken in place (`evolve`), nothing read again."""

from __future__ import annotations

import json
import uuid
from datetime import UTC

import pytest

from include.kafka.produce import ensure_topic
from include.registry import Trigger
from include.storage import reader
from spark_jobs.streaming_query import run_job
from tests.support.cdc_events import Change, Oracle, messages, produce
from tests.support.helpers import run_cli, saved_registry
from tests.support.kill_hooks import kill_env

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

AVAILABLE_NOW = Trigger(available_now=True)
JOBS = ("bronze_customers", "silver_customers", "silver_customers_history")
COLUMNS = ("id", "name", "email", "country", "updated_at")
TRACKED = ("name", "email", "country")


@pytest.fixture
def cdc_registry(raw, tmp_path, lakehouse_env, kafka_broker):
    """The registry with a CDC source of its own (its topic: `<database>.public.customers`) and the three jobs."""
    database = f"t{uuid.uuid4().hex[:8]}"
    raw["sources"]["customers"] = {
        "cdc": {"database": database, "table": "public.customers", "keys": ["id"]},
        "schema": {"id": "long", "name": "string", "email": "string", "country": "string", "updated_at": "timestamp"}}
    raw["jobs"]["bronze_customers"] = {
        "source": {"cdc": "customers"}, "transform": {"kind": "parse_json"},
        "sink": {"table": "bronze/customers", "mode": "append", "quarantine_table": "bronze/customers_quarantine",
                 "properties": {"delta.appendOnly": True}}}
    raw["jobs"]["silver_customers"] = {
        "source": {"table": "bronze/customers"}, "transform": {"kind": "apply_changes", "keys": ["id"], "scd": 1},
        "sink": {"table": "silver/customers", "mode": "update", "properties": {"delta.enableChangeDataFeed": True}}}
    raw["jobs"]["silver_customers_history"] = {
        "source": {"table": "bronze/customers"},
        "transform": {"kind": "apply_changes", "keys": ["id"], "scd": 2, "track_history": {"except": ["updated_at"]}},
        "sink": {"table": "silver/customers_history", "mode": "update"}}
    registry = saved_registry(raw, tmp_path / "cdc_registry.yaml", lakehouse_env)
    topic = f"{database}.public.customers"
    ensure_topic(kafka_broker, topic, 1)  # as `lakehouse cdc up` makes it before the first change
    return registry, topic


def customer(key: int, name: str, email: str = "x@shop", country: str = "FR", at: int = 0) -> dict:
    return {"id": key, "name": name, "email": email, "country": country,
            "updated_at": f"2026-12-07T00:{at // 60:02d}:{at % 60:02d}Z"}


def scenario() -> list[list[Change]]:
    """Three deliveries of one database's changes. Commits are numbered in commit order (gaps leave room for changes
    that arrive late); a snapshot's LSN (2500) is after the first commit's changes (one in flight when the snapshot
    was taken)."""
    snap = [Change("r", customer(k, f"n{k}"), commit=0, snapshot_lsn=2500) for k in (1, 2, 3, 4)]
    first = snap + [
        Change("u", customer(1, "n1b"), commit=1),  # in flight at the snapshot: its LSN is before the snapshot's
        Change("u", customer(1, "n1c", "a@shop"), commit=10, step=1),  # one key, twice in one transaction
        Change("u", customer(1, "n1d", "a@shop"), commit=10, step=2),
        Change("d", {"id": 2}, commit=20), Change("c", customer(2, "n2b"), commit=30),  # delete, then insert
        Change("d", {"id": 3}, commit=40, step=1), Change("c", customer(3, "n3b"), commit=40, step=2),  # in one tx
        Change("u", customer(4, "n4"), commit=50),  # an update that changes nothing
        Change("u", customer(4, "n4", at=70), commit=60),  # an untracked column only
        Change("c", customer(5, "n5"), commit=70, step=1), Change("c", customer(6, "n6"), commit=70, step=2),
        Change("u", customer(5, "n5b"), commit=70, step=3),  # several rows in one transaction
    ]
    second = [*first[4:7],  # delivered again (Connect's at-least-once after a crash)
              Change("u", customer(5, "n5d"), commit=90),
              Change("u", customer(5, "n5c", country="DE"), commit=80),  # older, arriving after a newer one
              Change("d", {"id": 6}, commit=100)]
    third = [Change("u", customer(6, "n6b"), commit=95),  # older than the delete of its key, arriving after it
             Change("u", customer(5, "n5c", country="DE", at=5), commit=85),  # untracked, late, between versions
             Change("c", customer(7, "n7"), commit=110),
             # a new snapshot (the connector's offsets lost): it restates the changes captured before it, and
             # brings a key no change had touched
             Change("r", customer(1, "n1-stale"), commit=120, snapshot_lsn=999_000),
             Change("r", customer(8, "n8"), commit=120, snapshot_lsn=999_000)]
    return [first, second, third]


def type1_rows(settings) -> dict:
    rows = reader.query(settings.layout.table("silver/customers"), "SELECT * FROM t").to_pylist()
    return {r["id"]: {c: _value(r[c]) for c in COLUMNS} for r in rows}


def history_rows(settings) -> list[tuple]:
    rows = reader.query(settings.layout.table("silver/customers_history"), "SELECT * FROM t").to_pylist()
    return sorted((r["id"], tuple(r[c] for c in TRACKED), json.dumps({c: _value(r[c]) for c in COLUMNS}, sort_keys=True),
                   r["__start_at"], r["__end_at"]) for r in rows)


def _value(value):
    """A table's value as the events carry it (a timestamp: ISO text in UTC)."""
    if hasattr(value, "astimezone"):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


def assert_tables_equal_the_oracle(settings, oracle: Oracle) -> None:
    assert type1_rows(settings) == oracle.type1()
    assert history_rows(settings) == oracle.type2()
    deleted = {k for k in {c.key for c in oracle.changes.values()} if k not in oracle.type1()}
    gone = reader.query(settings.layout.table("silver/customers_deletes"), "SELECT id FROM t").column("id").to_pylist()
    assert set(gone) == deleted


def test_changes_in_any_order_replayed_or_late_give_the_oracles_type1_and_type2(spark, settings, cdc_registry,
                                                                                 kafka_broker):
    registry, topic = cdc_registry
    oracle = Oracle(TRACKED)
    for number, delivered in enumerate(scenario()):
        junk = [(b'{"id": 99}', b'{"not": "a change event"}')] if number == 2 else []
        produce(kafka_broker, topic, messages(delivered) + junk)
        oracle.add(delivered)
        for job_id in JOBS:
            run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
        assert_tables_equal_the_oracle(settings, oracle)
    quarantined = reader.query(settings.layout.table("bronze/customers_quarantine"), "SELECT reason FROM t")
    assert quarantined.column("reason").to_pylist() == ["not_a_change_event"]
    history = reader.query(settings.layout.table("silver/customers_history"),
                           "SELECT id, count(*) AS n FROM t WHERE __end_at IS NULL GROUP BY id HAVING n > 1")
    assert history.num_rows == 0  # at most one current version per key
    for job_id in JOBS:  # a run with nothing new commits nothing
        assert run_job(spark, settings, registry, job_id, AVAILABLE_NOW).last_batch == 2


@pytest.mark.slow
def test_a_kill_between_a_batchs_two_commits_loses_and_duplicates_nothing(settings, cdc_registry, kafka_broker,
                                                                          lakehouse_env):
    """SIGKILL after the type 1 table's commit, before the deletes table's: the run again records the deletes
    and applies nothing twice."""
    registry, topic = cdc_registry
    oracle = Oracle(TRACKED)
    first, second, third = scenario()
    delivered = first + second + third
    produce(kafka_broker, topic, messages(delivered))
    oracle.add(delivered)
    env = {**lakehouse_env, **kill_env("silver_customers", "between_tables", 0)}
    assert run_cli(["run", "bronze_customers"], lakehouse_env, timeout=300).returncode == 0
    killed = run_cli(["run", "silver_customers"], env, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert run_cli(["run", "silver_customers", "silver_customers_history"], lakehouse_env, timeout=300).returncode == 0
    assert_tables_equal_the_oracle(settings, oracle)


@pytest.mark.full  # make test: the plans of the change (tests/test_cdc_registry.py)
def test_a_column_the_database_table_gains_evolves_the_chain_in_place(spark, settings, cdc_registry, raw, tmp_path,
                                                                      lakehouse_env, kafka_broker):
    """`ALTER TABLE customers ADD COLUMN phone`: Debezium's rows carry it; bronze rescues it until the registry names
    it, then every job of the chain plans `evolve`, gains the column in place and reads only what is new: the keys
    changed since carry their phone, the others read null until their next change."""
    from include.checkpoints.plan import plan_job

    registry, topic = cdc_registry
    before = [Change("c", customer(k, f"n{k}"), commit=k) for k in (1, 2, 3)]
    produce(kafka_broker, topic, messages(before))
    for job_id in JOBS:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    rescued = [Change("u", {**customer(1, "n1b"), "phone": "+33 1"}, commit=10)]
    produce(kafka_broker, topic, messages(rescued))
    run_job(spark, settings, registry, "bronze_customers", AVAILABLE_NOW)
    kept = reader.query(settings.layout.table("bronze/customers"), "SELECT _rescued FROM t WHERE _rescued IS NOT NULL")
    assert kept.column("_rescued").to_pylist() == ['{"phone":"+33 1"}']

    raw["sources"]["customers"]["schema"]["phone"] = "string"
    evolved = saved_registry(raw, tmp_path / "evolved.yaml", lakehouse_env)
    assert {j: plan_job(evolved.job(j), evolved, settings.layout.checkpoint(j)).mode for j in JOBS} == dict.fromkeys(
        JOBS, "evolve")
    after = [Change("u", {**customer(2, "n2b"), "phone": "+49 2"}, commit=20)]
    produce(kafka_broker, topic, messages(after))
    rows_in = {j: run_job(spark, settings, evolved, j, AVAILABLE_NOW).summary for j in JOBS}
    assert "1 rows in" in rows_in["bronze_customers"], rows_in  # the new message only: nothing read again
    phones = reader.query(settings.layout.table("silver/customers"), "SELECT id, phone FROM t ORDER BY id")
    assert phones.to_pylist() == [{"id": 1, "phone": None}, {"id": 2, "phone": "+49 2"}, {"id": 3, "phone": None}]
    history = reader.query(settings.layout.table("silver/customers_history"),
                           "SELECT id, phone FROM t WHERE __end_at IS NULL ORDER BY id")
    assert history.to_pylist() == [{"id": 1, "phone": None}, {"id": 2, "phone": "+49 2"}, {"id": 3, "phone": None}]
