"""The stream-stream join (gold_order_payments) on real Spark and real Delta tables.

With every event on time (no late lines), Structured Streaming's guarantees make the join's output
exact: every (purchase, payment) pair within the bound is emitted once as a paid row, and every
purchase without one is emitted once as an unpaid row when the watermark has passed
purchase time + bound. Purchases closer to the final watermark are still waiting in the state store.
"""

from __future__ import annotations

import shutil
import signal
from dataclasses import replace
from datetime import timedelta

import pytest
from deltalake import DeltaTable

from include import checkpoints
from include.registry import Trigger, load_registry
from include.settings import load_settings
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import run_cli
from tests.support.joins import assert_join_is_exact, land_both
from tests.support.kill_hooks import kill_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)
JOBS = ("bronze_clickstream", "silver_clickstream", "bronze_payments", "silver_payments", "gold_order_payments")


@pytest.fixture(scope="module")
def upstream(spark, kafka_broker, tmp_path_factory):
    """The joins' inputs, built once for the module: the clickstream landed and its purchases' payments on the Kafka
    topic, both run to silver in this driver. Each test copies that lakehouse and runs its joins on the copy."""
    from include.kafka.produce import ensure_topic
    from tests.support.kafka import delete_topics

    own = replace(load_settings(), root=tmp_path_factory.mktemp("joins") / "lakehouse")
    registry = load_registry(own.registry_path)
    delete_topics(kafka_broker, ["payments"])
    ensure_topic(kafka_broker, "payments", 3)
    payments = land_both(own, "payments", events=2000, seed=41, files=4)
    for job_id in JOBS[:-1]:
        run_job(spark, own, registry, job_id, AVAILABLE_NOW)
    return own.root, payments


def with_upstream(upstream, settings):
    """This test's lakehouse: a copy of the module's silver tables (their upstream checkpoints never run again)."""
    root, payments = upstream
    shutil.copytree(str(root), str(settings.root))
    return payments


def test_join_emits_every_pair_once_and_unpaid_purchases_after_the_bound(spark, settings, registry, upstream):
    payments = with_upstream(upstream, settings)
    assert payments.kinds["paid"] and payments.kinds["paid_late"] and payments.kinds["unpaid"]
    run_job(spark, settings, registry, "gold_order_payments", AVAILABLE_NOW)
    assert_join_is_exact(settings, registry)

    # A rerun without new data commits nothing; a replayed batch would be a no-op too.
    version = DeltaTable(str(settings.layout.table("gold/order_payments"))).version()
    run_job(spark, settings, registry, "gold_order_payments", AVAILABLE_NOW)
    assert DeltaTable(str(settings.layout.table("gold/order_payments"))).version() == version


def test_join_killed_after_its_delta_commit_resumes_exactly(spark, settings, registry, lakehouse_env, upstream):
    with_upstream(upstream, settings)
    job_id = JOBS[-1]
    killed = run_cli(["run", job_id], {**lakehouse_env, **kill_env(job_id, "after_commit", 1)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoint = settings.layout.checkpoint(job_id)
    app_id = f"{job_id}:{checkpoints.query_id(checkpoint)}"
    assert delta_store.committed_batch(settings.layout.table("gold/order_payments"), app_id) == 1
    assert checkpoints.latest_committed_batch(checkpoint) == 0  # Spark never recorded batch 1: it replays

    run_job(spark, settings, registry, job_id, AVAILABLE_NOW)  # the restart: the same code as a process's
    assert_join_is_exact(settings, registry)


PAYMENT_JOB = {  # payments (left) with the purchases (right) paid up to 20 minutes before, or 1 minute after
    "source": {"table": "silver/payments", "max_files_per_trigger": 1, "watermark": "10 minutes"},
    "transform": {"kind": "stream_join", "right": {"table": "silver/clickstream", "max_files_per_trigger": 1,
                                                   "watermark": "10 minutes"},
                  "join_keys": {"order_id": "event_id"}, "within": {"before": "20 minutes", "after": "1 minute"},
                  "matched_column": "matched",
                  "columns": {"payment_id": "left.payment_id", "payment_time": "left.payment_time",
                              "amount": "left.amount", "event_id": "right.event_id",
                              "event_time": "right.event_time", "user_id": "right.user_id"}},
    "sink": {"mode": "append"},
}


def test_inner_right_and_full_outer_joins_with_a_two_sided_bound(spark, settings, raw, upstream):
    import copy

    from include.quality import run_quality
    from include.registry import build_registry

    for how in ("inner", "right_outer", "full_outer"):
        job = copy.deepcopy(PAYMENT_JOB)
        job["transform"]["how"] = how
        job["sink"]["table"] = f"gold/payments_{how}"
        raw["jobs"][f"gold_payments_{how}"] = job
    registry = build_registry(raw)
    with_upstream(upstream, settings)
    for job_id in ("gold_payments_inner", "gold_payments_right_outer", "gold_payments_full_outer"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)

    before, after = timedelta(minutes=20), timedelta(minutes=1)
    clicks = {c["event_id"]: c for c in delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist()}
    payments = {p["payment_id"]: p for p in delta_store.read_table(settings.layout.table("silver/payments")).to_pylist()}
    pairs = {(p["payment_id"], p["order_id"]) for p in payments.values() if p["order_id"] in clicks
             and p["payment_time"] - before <= clicks[p["order_id"]]["event_time"] <= p["payment_time"] + after}
    assert any(clicks[o]["event_time"] < payments[p]["payment_time"] for p, o in pairs)  # the bound reaches back
    for how in ("inner", "right_outer", "full_outer"):
        rows = delta_store.read_table(settings.layout.table(f"gold/payments_{how}")).to_pylist()
        matched = [(r["payment_id"], r["event_id"]) for r in rows if r["matched"]]
        assert len(matched) == len(set(matched)) and set(matched) == pairs, how
        watermark = checkpoints.committed_watermark_ms(settings.layout.checkpoint(f"gold_payments_{how}")) / 1000
        unmatched = [r for r in rows if not r["matched"]]
        sides = {"left": ("payment_id", payments, "payment_time", after),
                 "right": ("event_id", clicks, "event_time", before)}
        outer = {"inner": (), "right_outer": ("right",), "full_outer": ("left", "right")}[how]
        for side, (key, table, time, reach) in sides.items():
            paired = {p if side == "left" else o for p, o in pairs}
            emitted = [r[key] for r in unmatched if r[key] is not None]
            assert len(emitted) == len(set(emitted)) and set(emitted) <= set(table) - paired, (how, side)
            if side not in outer:
                assert not emitted, (how, side)
                continue
            decided = {k for k, v in table.items() if k not in paired and (v[time] + reach).timestamp() < watermark}
            pending = {k for k, v in table.items() if k not in paired and (v[time] + reach).timestamp() > watermark}
            assert decided and pending, (how, side)
            assert decided <= set(emitted) and not pending & set(emitted), (how, side)
        other = {"payment_id": "event_id", "event_id": "payment_id"}
        assert all((r["payment_id"] is None) != (r["event_id"] is None) for r in unmatched)  # one side only
        assert all(r[other[k]] is None for r in unmatched for k in other if r[k] is not None)
    # Every check holds but freshness: payments run on ~90 minutes past the last click, and the join's
    # watermark (the slower side's) cannot pass the clicks, so the joined rows honestly trail the payments.
    tables = [f"gold/payments_{h}" for h in ("inner", "right_outer", "full_outer")]
    report = run_quality(settings, registry, tables)
    assert all(report.failed(t) == {"freshness"} for t in tables), report.render()
