"""`lakehouse state`: a job's state per operator, partition skew, timers and the state change feed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from include.checkpoints.state_files import skew
from include.registry import Trigger
from spark_jobs.state_inspect import inspect_state
from spark_jobs.streaming_query import run_job
from tests.support.helpers import generate, run_cli, saved_registry
from tests.support.suite_registry import SUITE_STATE_PARTITIONS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)


def test_skew_is_max_over_median_keys_per_partition():
    assert skew([10, 10, 10, 10]) == 1.0
    assert skew([0, 0, 14, 0]) == 14.0  # the median is floored at 1
    assert skew([2, 4, 40, 6]) == 8.0


def test_state_change_feed_of_a_changelog_job(spark, settings, raw, tmp_path, lakehouse_env):
    raw["jobs"]["gold_user_activity_1h"]["state_store"] = {"changelog_checkpointing": True}
    registry = saved_registry(raw, tmp_path / "registry.yaml", lakehouse_env)
    generate(settings, events=600, seed=9, files=2)
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_1h"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)

    shown = run_cli(["state", "gold_user_activity_1h", "--json", "--changes", "0:1"], lakehouse_env)
    assert shown.returncode == 0, shown.stderr[-3000:]
    (operator,) = json.loads(shown.stdout)["operators"]
    (store,) = operator["stores"]
    assert operator["partitions"] == SUITE_STATE_PARTITIONS and store["keys"] == sum(store["keys_per_partition"]) > 0
    assert operator["bytes"] > 0 and len(operator["bytes_per_partition"]) == SUITE_STATE_PARTITIONS
    changes = store["changes"]
    assert "unavailable" not in changes, changes
    assert sum(sum(kinds.values()) for kinds in changes["per_batch"].values()) > 0
    assert {e["change"] for e in changes["examples"]} <= {"update", "delete"}

    text = run_cli(["state", "silver_clickstream", "--changes", "0:0"], lakehouse_env)  # snapshots only
    assert text.returncode == 0, text.stderr[-2000:]
    assert f"operator 0 dedupeWithinWatermark: {SUITE_STATE_PARTITIONS} partitions" in text.stdout
    assert "changes: unavailable:" in text.stdout and "changelog_checkpointing: true" in text.stdout
    stateless = run_cli(["state", "bronze_clickstream"], lakehouse_env)
    assert stateless.returncode == 0 and "keeps no state" in stateless.stdout
    bad = run_cli(["state", "gold_user_activity_1h", "--changes", "3:1"], lakehouse_env)
    assert bad.returncode == 2 and "--changes 3:1: batches must be in 0.." in bad.stderr


def test_skew_is_reported_on_a_deliberately_skewed_input(spark, settings, raw):
    """40 users whose keys hash to state partition 2 of 4, one in each other partition: keys per partition 1, 1, 40,
    1."""
    from include.registry import build_registry

    raw["jobs"]["gold_fraud_alerts"]["state_store"] = {"shuffle_partitions": 4}  # the suite's default is 2
    registry = build_registry(raw)
    users = [r["user"] for r in spark.range(5000).select(F.format_string("user_%05d", "id").alias("user"))
             .where(F.pmod(F.hash("user"), F.lit(4)) == 2).limit(40).collect()]
    for partition in (0, 1, 3):
        users += [r["user"] for r in spark.range(5000).select(F.format_string("other_%05d", "id").alias("user"))
                  .where(F.pmod(F.hash("user"), F.lit(4)) == partition).limit(1).collect()]
    start = datetime(2026, 4, 1, tzinfo=UTC)
    landing = settings.layout.landing("landing/logins")
    landing.mkdir(parents=True)
    (landing / "logins.jsonl").write_text("".join(
        json.dumps({"user_id": user, "outcome": "failure", "event_time": (start + timedelta(seconds=i)).isoformat()})
        + "\n" for i, user in enumerate(users)))
    for job_id in ("bronze_logins", "silver_logins", "gold_fraud_alerts"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    (operator,) = inspect_state(spark, settings, registry, "gold_fraud_alerts")["operators"]
    pending = next(s for s in operator["stores"] if s["store"].startswith("variable pending"))
    assert pending["keys_per_partition"] == [1, 1, 40, 1] and pending["skew"] == 40.0
    assert operator["timers"]["count"] == 43  # one per pending event: the watermark has not reached them
