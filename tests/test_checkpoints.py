"""Checkpoint management: fingerprints and plans, refusing to start on a changed definition, and the
repartition / full-refresh / reset-checkpoint actions on real checkpoints and Delta tables."""

from __future__ import annotations

import copy
import json
import uuid

import pytest
import yaml

from include import checkpoints
from include.checkpoints.modes import RollbackRefused
from include.checkpoints.plan import fingerprint, plan_job, write_fingerprint
from include.checkpoints.request import CheckpointRequest
from include.records import batch_ledger, checkpoint_audit, lease
from include.registry import Trigger, build_registry
from include.storage import delta as delta_store
from spark_jobs.checkpoint_actions import ActionRefused, apply, verify
from spark_jobs.state_inspect import state_operators
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows, run_cli
from tests.support.oracle import expected_gold
from tests.support.suite_registry import SUITE_STATE_PARTITIONS

AVAILABLE_NOW = Trigger(available_now=True)
LINEAGE = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")


def variant(raw: dict, change) -> tuple[dict, object]:
    changed = copy.deepcopy(raw)
    change(changed)
    return changed, build_registry(changed)


def fake_checkpoint(settings, registry, job_id: str, partitions: int = SUITE_STATE_PARTITIONS, recorded: bool = True):
    """A checkpoint as Spark leaves it (offsets with pinned confs), with or without a fingerprint."""
    checkpoint = settings.layout.checkpoint(job_id)
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))  # the query id
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {"spark.sql.shuffle.partitions": str(partitions)}}
    (checkpoint / "offsets" / "0").write_text(f"v1\n{json.dumps(meta)}\n{{}}")
    if recorded:
        write_fingerprint(checkpoint, fingerprint(registry.job(job_id), registry))
    return checkpoint


# --- plans (no Spark) -------------------------------------------------------------------------------

def test_plans_classify_each_change_with_its_reason(settings, registry, raw):
    for job_id in registry.order:
        fake_checkpoint(settings, registry, job_id)

    def plan(changed_registry, job_id):
        return plan_job(changed_registry.job(job_id), changed_registry, settings.layout.checkpoint(job_id))

    assert {plan(registry, j).mode for j in registry.order} == {"resume"}
    _, admission = variant(raw, lambda r: r["jobs"]["silver_clickstream"]["source"].update(max_files_per_trigger=5))
    assert plan(admission, "silver_clickstream").mode == "resume"  # admission limits are not state

    _, partitions = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"].update(
        state_store={"shuffle_partitions": 1}))
    repartition = plan(partitions, "gold_user_activity_5m")
    assert repartition.mode == "repartition" and repartition.downstream == ()
    assert repartition.command == "lakehouse checkpoint repartition gold_user_activity_5m"
    assert [(c.field, c.before, c.after) for c in repartition.changes] == [("shuffle_partitions", SUITE_STATE_PARTITIONS, 1)]

    _, window = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"]["transform"].update(window="10 minutes"))
    refresh = plan(window, "gold_user_activity_5m")
    assert refresh.mode == "full-refresh" and refresh.downstream == ()
    assert "window_seconds" in json.dumps(refresh.as_dict()) and "keys, windows" in refresh.render()

    _, seeded = variant(raw, lambda r: r["jobs"]["gold_user_session_summaries"]["transform"].update(
        initial_state="seed/open_sessions"))  # seeds new checkpoints only: an existing one resumes
    assert plan(seeded, "gold_user_session_summaries").mode == "resume"
    _, gap = variant(raw, lambda r: r["jobs"]["gold_user_session_summaries"]["transform"].update(
        params={"gap": "10 minutes"}))
    assert plan(gap, "gold_user_session_summaries").mode == "full-refresh"

    _, keys = variant(raw, lambda r: r["jobs"]["silver_clickstream"]["transform"].update(keys=["event_id", "user_id"]))
    cascade = plan(keys, "silver_clickstream")
    assert cascade.mode == "full-refresh"
    assert cascade.downstream == ("gold_user_activity_5m", "gold_user_activity_1h", "gold_user_sessions",
                                  "gold_user_running_totals", "gold_user_session_summaries",
                                  "gold_order_payments")
    assert cascade.command == "lakehouse checkpoint full-refresh silver_clickstream --cascade"

    def replace_source(r):
        r["jobs"]["gold_user_activity_5m"]["source"]["table"] = "silver/payments"
        r["jobs"]["gold_user_activity_5m"]["source"]["event_time"] = "payment_time"
        r["jobs"]["gold_user_activity_5m"]["transform"]["keys"] = ["order_id"]
        r["jobs"]["gold_user_activity_5m"]["transform"]["aggregations"] = {
            "event_count": {"fn": "count"}, "total_value": {"fn": "sum", "column": "amount"}}
    _, source = variant(raw, replace_source)
    changed = {c.field: c.mode for c in plan(source, "gold_user_activity_5m").changes}
    assert changed["sources"] == "reset-checkpoint" and changed["transform"] == "full-refresh"


def test_checkpoints_without_fingerprint_and_corrupt_fingerprints(settings, registry):
    fake_checkpoint(settings, registry, "silver_clickstream", partitions=3, recorded=False)
    older = plan_job(registry.job("silver_clickstream"), registry, settings.layout.checkpoint("silver_clickstream"))
    assert older.mode == "repartition" and "without a fingerprint" in older.note
    stateless = fake_checkpoint(settings, registry, "bronze_clickstream", partitions=3, recorded=False)
    assert plan_job(registry.job("bronze_clickstream"), registry, stateless).mode == "resume"  # no state to move
    (stateless / "lakehouse_fingerprint.json").write_text("{trunc")
    with pytest.raises(ValueError, match="lakehouse_fingerprint.json is corrupt"):
        plan_job(registry.job("bronze_clickstream"), registry, stateless)


def test_checkpoint_plan_command(settings, registry, raw, lakehouse_env, tmp_path):
    fake_checkpoint(settings, registry, "gold_user_activity_5m")
    changed, _ = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"].update(state_store={"shuffle_partitions": 1}))
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(changed, sort_keys=False))
    result = run_cli(["checkpoint", "plan", "--json"], {**lakehouse_env, "LAKEHOUSE_REGISTRY": str(path)}, timeout=60)
    assert result.returncode == 0, result.stderr
    plans = {p["job"]: p for p in json.loads(result.stdout)}
    assert plans["gold_user_activity_5m"]["mode"] == "repartition"
    assert {p["mode"] for j, p in plans.items() if j != "gold_user_activity_5m"} == {"resume"}


def test_live_supervision_starts_no_job_whose_plan_is_not_resume(settings, registry, raw):
    from include.ops.supervisor import supervise_job

    fake_checkpoint(settings, registry, "gold_user_activity_5m")
    _, one = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"].update(state_store={"shuffle_partitions": 1}))
    assert supervise_job(settings, one, "gold_user_activity_5m", run_id="r1") == "blocked"
    [alert] = delta_store.read_table(settings.layout.ops_table("alerts")).to_pylist()
    assert alert["severity"] == "error" and alert["run_id"] == "r1"
    assert "`lakehouse checkpoint repartition gold_user_activity_5m`" in alert["reason"]
    assert not lease.is_held(settings, "gold_user_activity_5m")


# --- actions on real checkpoints --------------------------------------------------------------------

def registry_file(tmp_path, raw, name: str) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


@pytest.mark.spark
@pytest.mark.slow
def test_a_changed_partition_count_refuses_to_start_then_repartition_resumes_exactly(
        spark, settings, registry, raw, lakehouse_env, tmp_path):
    first = generate(settings, events=1200, seed=91, files=4)
    for job_id in LINEAGE:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    changed, one = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"].update(
        state_store={"shuffle_partitions": 1}))
    env = {**lakehouse_env, "LAKEHOUSE_REGISTRY": registry_file(tmp_path, changed, "one.yaml")}
    refused = run_cli(["run", "gold_user_activity_5m"], env, timeout=300)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "cannot resume its checkpoint" in refused.stderr and "lakehouse checkpoint repartition " \
        "gold_user_activity_5m`" in refused.stderr and f"shuffle_partitions: {SUITE_STATE_PARTITIONS} -> 1" in refused.stderr

    with pytest.raises(ActionRefused, match="its plan is repartition, not resume"):
        verify(None, settings, one, ["gold_user_activity_5m"], run=False, actor="test")
    with pytest.raises(ActionRefused, match=f"already has {SUITE_STATE_PARTITIONS} partitions, the registry's state_store.shuffle_partitions"):
        apply(spark, settings, registry, CheckpointRequest("repartition", ("gold_user_activity_5m",)))
    [row] = apply(spark, settings, one, CheckpointRequest("repartition", ("gold_user_activity_5m",), actor="test"))
    checkpoint = settings.layout.checkpoint("gold_user_activity_5m")
    assert row["outcome"] == "done" and row["archived_to"].endswith("gold_user_activity_5m.reset-1")
    assert settings.layout.archived_checkpoint("gold_user_activity_5m", 1).is_dir()  # the old one, copied aside
    assert {op["partitionsAtLatestBatch"] for op in state_operators(spark, checkpoint)} == {1}
    assert checkpoints.shuffle_partitions(checkpoint) == 1

    second = generate(settings, events=800, seed=92, files=2, start=first_end(first))
    for job_id in LINEAGE:
        run_job(spark, settings, one, job_id, AVAILABLE_NOW)
    expected = expected_gold(one, [arrival_order(first.files), arrival_order(second.files)])
    assert gold_rows(settings, "gold/user_activity_5m") == expected["gold/user_activity_5m"]
    report = json.loads(run_cli(["checkpoint", "inspect", "gold_user_activity_5m", "--json"], env, timeout=300).stdout)
    assert report["shuffle_partitions"] == {"recorded": 1, "configured": 1} and report["plan"]["mode"] == "resume"
    assert report["sinks"][0]["delta_version"] == delta_store.latest_version(
        settings.layout.table("gold/user_activity_5m"))
    audit = checkpoint_audit.outcomes(settings)
    assert sorted((a["job"], a["mode"], a["outcome"], a["actor"]) for a in audit) == [
        ("gold_user_activity_5m", "repartition", "done", "test"), ("gold_user_activity_5m", "verify", "failed", "test")]


def first_end(result):
    from datetime import timedelta

    from include.generator import DEFAULT_START

    return DEFAULT_START + timedelta(minutes=result.lines / 20 + 30)


@pytest.mark.spark
@pytest.mark.slow
def test_full_refresh_rebuilds_a_changed_window_and_guards_hold(spark, settings, registry, raw, tmp_path):
    landed = generate(settings, events=1200, seed=93, files=4)
    for job_id in LINEAGE:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    _, ten = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"]["transform"].update(window="10 minutes"))
    gold = settings.layout.table("gold/user_activity_5m")
    versions_before = delta_store.latest_version(gold)

    # guards: downstream jobs need --cascade; a running writer; reset_allowed: false; dry runs change nothing
    with pytest.raises(ActionRefused, match="add --cascade"):
        apply(spark, settings, ten, CheckpointRequest("full-refresh", ("silver_clickstream",)))
    held = lease.acquire(settings, "gold_user_activity_5m", trigger="processing-time=10 seconds")
    try:
        with pytest.raises(lease.LeaseHeld, match="stop it first"):
            apply(spark, settings, ten, CheckpointRequest("full-refresh", ("gold_user_activity_5m",)))
    finally:
        held.release()
    _, protected = variant(raw, lambda r: r["jobs"]["gold_user_activity_5m"].update(reset_allowed=False))
    with pytest.raises(ActionRefused, match="reset_allowed: false"):
        apply(spark, settings, protected, CheckpointRequest("full-refresh", ("gold_user_activity_5m",)))
    [dry] = apply(spark, settings, ten, CheckpointRequest("full-refresh", ("gold_user_activity_5m",), dry_run=True))
    assert dry["outcome"] == "dry-run" and dry["detail"].startswith("would move ")
    assert delta_store.latest_version(gold) == versions_before and settings.layout.checkpoint(
        "gold_user_activity_5m").is_dir()

    [row] = apply(spark, settings, ten, CheckpointRequest("full-refresh", ("gold_user_activity_5m",)))
    assert row["outcome"] == "done" and row["batch_after"] is not None
    expected = expected_gold(ten, [arrival_order(landed.files)])["gold/user_activity_5m"]
    assert gold_rows(settings, "gold/user_activity_5m") == expected and expected
    assert {end - start for start, end, _ in expected} == {600}
    operations = [json.loads(line)["commitInfo"]["operation"] for v in range(delta_store.latest_version(gold) + 1)
                  for line in (gold / "_delta_log" / f"{v:020d}.json").read_text().splitlines() if "commitInfo" in line]
    assert "DELETE" in operations  # emptied as a new version: the history is kept
    assert plan_job(ten.job("gold_user_activity_5m"), ten, settings.layout.checkpoint("gold_user_activity_5m")
                    ).mode == "resume"
    assert [a["outcome"] for a in checkpoint_audit.outcomes(settings)] == ["dry-run", "done"]


@pytest.mark.spark
@pytest.mark.slow
def test_reset_checkpoint_keeps_the_table_and_says_what_is_missed(spark, settings, registry):
    generate(settings, events=600, seed=94, files=2)
    for job_id in LINEAGE[:2]:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    silver = settings.layout.table("silver/clickstream")
    kept = delta_store.count_rows(silver)
    late = generate(settings, events=300, seed=95, files=1, start=first_end(type("r", (), {"lines": 600})()))
    run_job(spark, settings, registry, "bronze_clickstream", AVAILABLE_NOW)  # silver has not read these yet
    with pytest.raises(ActionRefused, match="reads landing files"):
        apply(spark, settings, registry, CheckpointRequest("reset-checkpoint", ("bronze_clickstream",), options={"from_latest": True}))
    [row] = apply(spark, settings, registry, CheckpointRequest("reset-checkpoint", ("silver_clickstream",), options={"from_latest": True}))
    assert row["outcome"] == "done" and "NOT read (missed)" in row["detail"] and "bronze/clickstream" in row["detail"]
    run_job(spark, settings, registry, "silver_clickstream", AVAILABLE_NOW)
    assert delta_store.count_rows(silver) == kept  # the table is kept; what bronze held before the reset is skipped
    assert checkpoints.query_id(settings.layout.checkpoint("silver_clickstream")) != checkpoints.query_id(
        settings.layout.archived_checkpoint("silver_clickstream", 1))
    generate(settings, events=200, seed=96, files=1, start=first_end(type("r", (), {"lines": 2000})()))
    run_job(spark, settings, registry, "bronze_clickstream", AVAILABLE_NOW)
    run_job(spark, settings, registry, "silver_clickstream", AVAILABLE_NOW)
    assert delta_store.count_rows(silver) > kept and late.lines  # new commits are read from the new position
    ids = delta_store.read_table(silver, columns=["event_id"])["event_id"].to_pylist()
    assert len(ids) == len(set(ids))  # the first batch, planned only now, started at the reset's position, not before


@pytest.mark.spark
@pytest.mark.slow
def test_rollback_to_a_batch_then_rerun_gives_the_same_rows(spark, settings, small_batch_registry):
    registry = small_batch_registry  # several batches per run
    landed = generate(settings, events=1500, seed=81, files=6)

    # bronze (landing files, an append-only table): back to batch 0, then the same rows again
    run_job(spark, settings, registry, "bronze_clickstream", AVAILABLE_NOW)
    bronze = settings.layout.table("bronze/clickstream")
    bronze_checkpoint = settings.layout.checkpoint("bronze_clickstream")
    assert checkpoints.latest_committed_batch(bronze_checkpoint) == 2
    app_id = checkpoints.writer_app_id(bronze_checkpoint, "bronze_clickstream")
    after_0 = batch_ledger.versions_after(settings, "bronze_clickstream", app_id, 0)
    done = apply(spark, settings, registry, CheckpointRequest("rollback", ("bronze_clickstream",), options={"to_batch": 0}))
    assert done[0]["outcome"] == "done" and checkpoints.latest_committed_batch(bronze_checkpoint) == 0
    assert delta_store.count_rows(bronze) == delta_store.read_table(bronze, version=after_0["bronze/clickstream"]).num_rows
    run_job(spark, settings, registry, "bronze_clickstream", AVAILABLE_NOW)
    quarantined = delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))
    assert delta_store.count_rows(bronze) + quarantined == landed.lines

    for job_id in LINEAGE[1:]:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    table, job_id = "gold/user_activity_5m", "gold_user_activity_5m"
    checkpoint = settings.layout.checkpoint(job_id)
    first = gold_rows(settings, table)
    assert first == expected_gold(registry, [arrival_order(landed.files)])[table]
    assert checkpoints.latest_committed_batch(checkpoint) >= 3

    # silver cannot go back while gold has read what that would undo; batches not kept are refused
    with pytest.raises(RollbackRefused, match="gold_user_activity_5m .*read silver/clickstream up to version"):
        apply(spark, settings, registry, CheckpointRequest("rollback", ("silver_clickstream",), options={"to_batch": 0}))
    with pytest.raises(RollbackRefused, match="cannot roll back to batch 99"):
        apply(spark, settings, registry, CheckpointRequest("rollback", (job_id,), options={"to_batch": 99}))

    version = batch_ledger.versions_after(settings, job_id, checkpoints.writer_app_id(checkpoint, job_id), 1)[table]
    dry = apply(None, settings, registry, CheckpointRequest("rollback", (job_id,), dry_run=True, options={"to_batch": 1}))
    assert f"restore {table} to version {version}" in dry[0]["detail"]
    apply(spark, settings, registry, CheckpointRequest("rollback", (job_id,), options={"to_batch": 1}))
    assert checkpoints.latest_committed_batch(checkpoint) == 1
    assert checkpoints.writer_app_id(checkpoint, job_id).endswith(":g1")
    assert set(gold_rows(settings, table)) == gold_rows_at(settings, table, version) != set(first)
    [verified] = verify(spark, settings, registry, [job_id], actor="test")  # the DAG's verify: re-runs batches 2..
    assert verified["outcome"] == "done" and "an available-now run committed batches 2.." in verified["detail"]
    assert gold_rows(settings, table) == first  # the same rows as the first time, none twice
    assert [r["outcome"] for r in checkpoint_audit.outcomes(settings) if r["mode"] == "rollback"] == [
        "done", "dry-run", "done"]


def gold_rows_at(settings, table: str, version: int) -> set:
    rows = delta_store.read_table(settings.layout.table(table), version=version).to_pylist()
    return {(int(r["window_start"].timestamp()), int(r["window_end"].timestamp()), r["user_id"]) for r in rows}
