"""SIGKILL the job process at each commit point, restart it, and find the tables exactly right.

The job is killed as a real process (`lakehouse run`, a fault hook at the commit point); the restart and the
jobs downstream run in this process. The landed files and the upstream tables are built once for the module.
`make test` kills the 5-minute windows at each commit point; the other jobs' kills are `full` (`make test-full`):
bronze's two-table commit is killed on S3 in `make test` (tests/test_s3.py), a processor in tests/test_stateful.py.
"""

from __future__ import annotations

import re
import signal

import pytest

from include import checkpoints
from include.checkpoints.plan import downstream_jobs
from include.registry import Trigger
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows, lineage, run_cli
from tests.support.kill_hooks import kill_env
from tests.support.oracle import expected_gold
from tests.support.snapshots import SnapshotLakehouse

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)
CASES = [
    ("gold_user_activity_5m", "before_commit", 1),
    ("gold_user_activity_5m", "after_commit", 1),
    # Between batches 0 and 1: a restart with data to read. After the last data batch (1), the listener's kill
    # races Spark's planning of the no-data batch: test_kill_before_the_no_data_batch_is_planned makes that exact.
    pytest.param("gold_user_activity_5m", "between_batches", 0, marks=pytest.mark.full),
    pytest.param("gold_user_activity_1h", "after_commit", 1, marks=pytest.mark.full),
    pytest.param("gold_user_sessions", "after_commit", 1, marks=pytest.mark.full),
    pytest.param("bronze_clickstream", "after_commit", 0, marks=pytest.mark.full),
]


def case_id(case) -> str:
    job_id, point, batch = case.values if hasattr(case, "values") else case
    return f"{job_id}-{point}-{batch}"



def rows_out(summary: str, table: str) -> int:
    """The rows a run's summary line says `table` gained."""
    match = re.search(rf"{re.escape(table)} \+(\d+)", summary)
    return int(match.group(1)) if match else 0


@pytest.fixture(scope="module")
def house(spark, tmp_path_factory):
    """Four landing files; snapshots before any job ran and after bronze and silver (several batches each)."""
    import yaml

    from include.settings import load_settings

    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["defaults"]["backfill"] = {"max_files_per_trigger": 1}  # several micro-batches per run
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 2}
    house = SnapshotLakehouse(spark, tmp_path_factory.mktemp("exactly_once"), raw)
    house.landed = generate(house.settings, events=1500, seed=31, files=4)
    house.take("landed")
    for job_id in ("bronze_clickstream", "silver_clickstream"):
        run_job(spark, house.settings, house.registry, job_id, AVAILABLE_NOW)
    house.take("upstream")
    return house


@pytest.mark.parametrize(("job_id", "point", "batch"), CASES, ids=[case_id(c) for c in CASES])
def test_kill_and_restart_gives_exact_results(spark, house, job_id, point, batch):
    settings, registry = house.settings, house.registry
    position = lineage(registry).index(job_id)
    house.restore("upstream" if position else "landed")  # gold jobs read silver

    killed = run_cli(["run", job_id], {**house.env, **kill_env(job_id, point, batch)})
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

    sink = settings.layout.table(job.sink.table)
    before = delta_store.count_rows(sink)
    restarted = run_job(spark, settings, registry, job_id, AVAILABLE_NOW)  # the same code as a process's restart
    if job.sink.mode == "append":  # the summary counts what the table gained: a replayed batch adds nothing
        assert rows_out(restarted.summary, job.sink.table) == delta_store.count_rows(sink) - before, restarted.summary
    downstream = [j for j in lineage(registry) if j in downstream_jobs(registry, job_id)]
    for later in downstream:
        run_job(spark, settings, registry, later, AVAILABLE_NOW)

    bronze = delta_store.count_rows(settings.layout.table("bronze/clickstream"))
    quarantined = delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))
    assert bronze + quarantined == house.landed.lines
    assert_gold_equals_the_oracle(house, [job_id, *downstream])


# (job, its last batch: the no-data batch that emits the windows its last data batch closed)
OWED = [pytest.param("gold_user_activity_5m", 2, id="gold_user_activity_5m"),
        pytest.param("gold_user_sessions", 2, id="gold_user_sessions", marks=pytest.mark.full)]


@pytest.mark.parametrize(("job_id", "no_data_batch"), OWED)
def test_kill_before_the_no_data_batch_is_planned(spark, house, job_id, no_data_batch):
    """A process killed after its last data batch committed, before Spark wrote the offsets of the no-data batch
    that emits the windows the new watermark closes: the restart still emits them. The kill is made exact by
    killing inside the no-data batch (before its rows reach Delta) and taking its planned offsets back."""
    settings, registry = house.settings, house.registry
    house.restore("upstream")
    killed = run_cli(["run", job_id], {**house.env, **kill_env(job_id, "before_commit", no_data_batch)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoint = settings.layout.checkpoint(job_id)
    assert checkpoints.latest_committed_batch(checkpoint) == no_data_batch - 1
    for name in (f".{no_data_batch}.crc", str(no_data_batch)):
        (checkpoint / "offsets" / name).unlink(missing_ok=True)
    assert checkpoints.owed_watermark_batch(checkpoint) == no_data_batch - 1, "not the state this test is about"

    run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    assert_gold_equals_the_oracle(house, [job_id])
    assert checkpoints.owed_watermark_batch(checkpoint) is None
    again = run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    assert again.last_batch == checkpoints.latest_committed_batch(checkpoint) and " 0 batches" in again.summary


def assert_gold_equals_the_oracle(house, jobs: list[str]) -> None:
    settings, registry = house.settings, house.registry
    expected = expected_gold(registry, [arrival_order(house.landed.files)])
    written = {registry.job(j).sink.table for j in jobs}
    assert written & set(expected)
    for table in written & set(expected):
        assert gold_rows(settings, table) == expected[table], table
