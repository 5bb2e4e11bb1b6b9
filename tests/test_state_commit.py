"""How a job's state store commits per run: `state_store.changelog_checkpointing: live` writes changelogs in live runs
(cheap commits every few seconds, for weeks) and snapshots in available-now runs (a backfill's large batches: a
snapshot loads without replaying them), switching on one checkpoint with exact results."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from include import checkpoints
from include.generator import DEFAULT_START
from include.registry import Trigger, build_registry
from include.spark_session import query_session
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows, wait_until_read
from tests.support.oracle import expected_gold

pytestmark = [pytest.mark.spark, pytest.mark.slow]
AVAILABLE_NOW = Trigger(available_now=True)
LIVE = Trigger(available_now=False, interval_seconds=1)
JOB = "gold_user_activity_5m"


def state_versions(settings, kind: str) -> set[int]:
    """The state versions (batch id + 1) the job's checkpoint holds as `kind` files (changelog, zip)."""
    state = settings.layout.checkpoint(JOB) / "state"
    return {int(f.name.split(".")[0]) for f in state.rglob(f"*.{kind}") if f.name.split(".")[0].isdigit()}


def committed(settings) -> int:
    return checkpoints.latest_committed_batch(settings.layout.checkpoint(JOB))


def upstream(spark, settings, registry) -> None:
    for job in ("bronze_clickstream", "silver_clickstream"):
        run_job(spark, settings, registry, job, AVAILABLE_NOW)


def test_live_runs_commit_changelogs_and_backfills_snapshots_on_one_checkpoint(spark, settings, raw):
    raw["defaults"]["state_store"]["changelog_checkpointing"] = "live"
    registry = build_registry(raw)
    drops = [generate(settings, events=600, seed=91, files=2, late_fraction=0.0)]
    upstream(spark, settings, registry)
    run_job(spark, settings, registry, JOB, AVAILABLE_NOW)  # a backfill: snapshots
    backfilled = committed(settings)
    assert state_versions(settings, "zip") >= {backfilled + 1} and not state_versions(settings, "changelog")

    stop, live = threading.Event(), {}
    thread = threading.Thread(target=lambda: live.update(result=run_job(
        query_session(spark), settings, registry, JOB, LIVE, stop_requested=stop)))
    thread.start()
    try:
        for hour in (1, 2):  # two drops the live run reads as they come
            drops.append(generate(settings, events=600, seed=91 + hour, files=2, late_fraction=0.0,
                                  start=DEFAULT_START + timedelta(hours=hour)))
            upstream(spark, settings, registry)
            silver = delta_store.latest_version(settings.layout.table("silver/clickstream"))
            wait_until_read(settings, JOB, silver, thread, time.monotonic() + 180)
    finally:
        stop.set()
        thread.join(120)
    assert live["result"].status == "stopped"
    lived = committed(settings)
    live_versions = set(range(backfilled + 2, lived + 2))
    assert len(live_versions) >= 2 and live_versions <= state_versions(settings, "changelog")

    drops.append(generate(settings, events=600, seed=95, files=2, late_fraction=0.0,
                          start=DEFAULT_START + timedelta(hours=3)))
    upstream(spark, settings, registry)
    run_job(spark, settings, registry, JOB, AVAILABLE_NOW)  # loads the changelogs' state, commits snapshots again
    caught_up = committed(settings)
    backfill_versions = set(range(lived + 2, caught_up + 2))
    assert backfill_versions and backfill_versions <= state_versions(settings, "zip")
    assert not backfill_versions & state_versions(settings, "changelog")
    expected = expected_gold(registry, [arrival_order(d.files) for d in drops])
    assert gold_rows(settings, "gold/user_activity_5m") == expected["gold/user_activity_5m"]
