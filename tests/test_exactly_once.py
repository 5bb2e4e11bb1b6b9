"""SIGKILL the job process at each commit point, restart it, and find the tables exactly right."""

from __future__ import annotations

import signal

import pytest

from include import checkpoints
from include.registry import Trigger
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows, lineage, run_cli
from tests.support.kill_hooks import kill_env
from tests.support.oracle import expected_gold

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)
CASES = [
    ("gold_user_activity_5m", "before_commit", 1),
    ("gold_user_activity_5m", "after_commit", 1),
    ("gold_user_activity_5m", "between_batches", 1),
    ("gold_user_activity_1h", "after_commit", 1),
    ("gold_user_sessions", "after_commit", 1),
    ("bronze_clickstream", "after_commit", 0),
]


@pytest.fixture
def registry(small_batch_registry):
    """Several micro-batches per backfill, so that a kill can land between them."""
    return small_batch_registry


@pytest.mark.parametrize(("job_id", "point", "batch"), CASES, ids=[f"{j}-{p}-{b}" for j, p, b in CASES])
def test_kill_and_restart_gives_exact_results(spark, settings, registry, lakehouse_env, job_id, point, batch):
    landed = generate(settings, events=1500, seed=31, files=4)
    jobs = lineage(registry)
    position = jobs.index(job_id)
    for upstream in jobs[:position]:
        run_job(spark, settings, registry, upstream, AVAILABLE_NOW)

    killed = run_cli(["run", job_id], {**lakehouse_env, **kill_env(job_id, point, batch)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]

    job = registry.job(job_id)
    checkpoint = settings.layout.checkpoint(job_id)
    app_id = f"{job_id}:{checkpoints.query_id(checkpoint)}"
    committed = delta_store.committed_batch(settings.layout.table(job.sink.table), app_id)
    spark_committed = checkpoints.latest_committed_batch(checkpoint)
    if point == "before_commit":
        assert (committed or -1) < batch and (spark_committed if spark_committed is not None else -1) < batch
    elif point == "after_commit":
        assert committed == batch and (spark_committed if spark_committed is not None else -1) < batch
    else:
        assert spark_committed is not None and spark_committed >= batch

    restarted = run_cli(["run", job_id], lakehouse_env)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    for downstream in jobs[position + 1 :]:
        run_job(spark, settings, registry, downstream, AVAILABLE_NOW)

    bronze = delta_store.count_rows(settings.layout.table("bronze/clickstream"))
    quarantined = delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))
    assert bronze + quarantined == landed.lines
    expected = expected_gold(registry, [arrival_order(landed.files)])
    for table, rows in expected.items():
        assert gold_rows(settings, table) == rows, table
