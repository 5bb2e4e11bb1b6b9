"""The lakehouse on a real S3 server (the session's SeaweedFS): the oracle's equalities, a rerun that commits
nothing, kills at commit points and in a checkpoint action, two drivers racing for one lease, a holder frozen past
its lease, and several processes committing to one table at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
import yaml

from include.records import lease
from include.registry import Trigger
from include.settings import load_settings
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import (
    LAKEHOUSE,
    REPO,
    arrival_order,
    fraud_alert_rows,
    generate,
    gold_rows,
    land_logins,
    run_cli,
    saved_registry,
    session_summary_rows,
    wait_for,
)
from tests.support.kill_hooks import kill_env, pause_env
from tests.support.oracle import expected_alerts, expected_gold, expected_session_summaries

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.s3]

AVAILABLE_NOW = Trigger(available_now=True)
CHAIN = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m", "gold_user_sessions",
         "gold_user_session_summaries")
LOGINS = ("bronze_logins", "silver_logins", "gold_fraud_alerts")
PAYMENTS = ("bronze_payments", "silver_payments", "gold_order_payments")


def s3_lakehouse(tmp_path, name: str):
    """Settings on a fresh prefix of the session's bucket, and the environment of its job processes."""
    from tests.support.s3 import BUCKET

    settings = replace(load_settings(), root=f"s3://{BUCKET}/{name}-{os.urandom(3).hex()}",
                       local_dir=tmp_path / "local")
    env = {**os.environ, **settings.storage_environment(), "PYSPARK_PYTHON": sys.executable}
    for variable in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS"):
        env.pop(variable, None)
    return settings, env


def assert_chain_equals_the_oracle(settings, registry, drops, jobs: tuple[str, ...] = CHAIN) -> None:
    """The gold tables of `jobs` (of CHAIN) equal the oracle's."""
    for table, rows in expected_gold(registry, drops).items():
        if table in ("gold/user_activity_5m", "gold/user_sessions") and registry.writer_of(table).id in jobs:
            assert rows and gold_rows(settings, table) == rows, table
    if "gold_user_session_summaries" in jobs:
        assert session_summary_rows(settings) == expected_session_summaries(registry, drops)


@pytest.fixture(scope="module")
def s3_house(spark, s3_server, kafka_broker, tmp_path_factory):
    """Clickstream and logins landed on S3, payments on Kafka, the jobs of the clickstream chain, the fraud alerts
    and the join run once (available-now) in this session's driver, with the lakehouse, its checkpoints and state on
    the S3 server."""
    from include.registry import load_registry
    from tests.support.joins import land_both
    from tests.support.kafka import delete_topics

    settings, env = s3_lakehouse(tmp_path_factory.mktemp("s3_house"), "house")
    registry = load_registry(settings.registry_path)
    delete_topics(kafka_broker, ["payments"])
    from include.kafka.produce import ensure_topic

    ensure_topic(kafka_broker, "payments", 3)
    payments = land_both(settings, "payments", events=2400, seed=41, files=4)
    clicks = sorted((p for p in settings.layout.landing("landing/clickstream").iterdir()), key=lambda p: p.name)
    logins = land_logins(settings, events=1200, files=3, users=10)
    for job_id in (*CHAIN, *LOGINS, *PAYMENTS):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    return {"settings": settings, "env": env, "registry": registry, "clicks": clicks, "logins": logins,
            "payments": payments}


def test_the_chain_the_processors_and_the_join_equal_the_oracle_on_s3_and_a_rerun_commits_nothing(spark, s3_house):
    from tests.support.joins import assert_join_is_exact

    settings, registry = s3_house["settings"], s3_house["registry"]
    assert str(settings.root).startswith("s3a://") and not settings.layout.checkpoint("gold_fraud_alerts").is_local
    lines = sum(len(p.read_text().splitlines()) for p in s3_house["clicks"])
    assert (delta_store.count_rows(settings.layout.table("bronze/clickstream"))
            + delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))) == lines
    assert_chain_equals_the_oracle(settings, registry, [arrival_order(s3_house["clicks"])])
    expected = expected_alerts(registry, [arrival_order(s3_house["logins"].files)])
    assert expected and fraud_alert_rows(settings) == expected
    assert_join_is_exact(settings, registry)
    state = settings.layout.checkpoint("gold_user_activity_5m") / "state"
    assert any(p.name.endswith(".zip") for p in state.rglob("*.zip")), "RocksDB snapshots live on S3"

    # Great Expectations and the health report read the bucket and write their reports to it: a bronze table's suite
    # and a window's (its reconciliation reads the checkpoint's watermark); every table's suites: tests/test_demo.py
    from include.ops.health_report import build
    from include.quality import run_quality

    report = run_quality(settings, registry, ["bronze/clickstream", "gold/user_activity_5m"], full=True)
    assert {r.table for r in report.results} == {"bronze/clickstream", "gold/user_activity_5m"}
    assert not report.failed(), report.render()
    reconciliation = next(r for r in report.results if r.expectation == "reconciliation")
    assert json.loads(reconciliation.observed_value)["watermark_source"] == "checkpoint", reconciliation
    assert (settings.layout.data_docs / "index.html").is_file() and not settings.layout.data_docs.is_local
    assert build(settings, registry).is_file() and not settings.layout.health_report.is_local

    jobs = (*CHAIN, *LOGINS, *PAYMENTS)
    tables = sorted({t for j in jobs for t in registry.job(j).tables_written()})
    before = {t: delta_store.latest_version(settings.layout.table(t)) for t in tables}
    for job_id in jobs:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    assert {t: delta_store.latest_version(settings.layout.table(t)) for t in tables} == before


def test_a_checkpoint_action_killed_mid_way_on_s3_is_resumed_to_the_same_result(spark, s3_house):
    """A full refresh SIGKILLed on S3 after its first step: the job refuses to start, naming the action; resumed
    (here in this driver: `lakehouse checkpoint resume-action` as a process, tests/test_checkpoint_crashes.py), the
    same windows rebuilt, the old checkpoint kept whole."""
    from include.checkpoints.request import CheckpointRequest
    from spark_jobs.checkpoint_actions import apply

    settings, env = s3_house["settings"], s3_house["env"]
    job = "gold_user_activity_5m"
    expected = gold_rows(settings, "gold/user_activity_5m")
    killed = run_cli(["checkpoint", "full-refresh", job, "--actor", "test"],
                     {**env, **kill_env(job, "after_step", 0)}, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    archives = settings.layout.archived_checkpoints(job)
    assert archives and not (settings.layout.checkpoint(job) / "offsets").exists()  # moved aside (copy, delete)
    refused = run_cli(["run", job], env, timeout=300)
    assert refused.returncode == 2 and "resume-action" in refused.stderr, refused.stderr[-2000:]
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # another process changed the tables
    apply(spark, settings, s3_house["registry"], CheckpointRequest("resume-action", (job,), actor="test"))
    assert gold_rows(settings, "gold/user_activity_5m") == expected  # rebuilt from silver: the same windows
    assert (archives[-1] / "offsets").is_dir() and (archives[-1] / "metadata").is_file()  # the old one, whole


KILLS = [("bronze_clickstream", "after_commit", 1),  # two tables committed (rows, quarantine), the batch not
         pytest.param(("gold_user_activity_5m", "before_commit", 1), ("gold_user_session_summaries", "after_commit", 0),
                      marks=pytest.mark.full)]


@pytest.mark.parametrize(("kills", "chain"), [
    pytest.param([KILLS[0]], CHAIN[:3], id="bronze"),
    pytest.param([KILLS[0], *KILLS[1].values], CHAIN, id="bronze-gold-processor", marks=pytest.mark.full)])
def test_kills_at_commit_points_on_s3_lose_nothing_and_duplicate_nothing(spark, s3_server, tmp_path, kills, chain):
    """Bronze SIGKILLed after its Delta commits (and, in `make test-full`, a windowed gold and a processor at theirs),
    each run resumed by the next, the last in this driver (the same code as a process's): the tables equal the
    oracle's (`make test` runs bronze, silver and a windowed gold; the processors' tables on S3 are checked by the
    chain's test above)."""
    settings, env = s3_lakehouse(tmp_path, "kills")
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 1}  # killed at its batch 1
    if len(kills) > 1:  # the jobs after bronze killed at their commits too: several micro-batches each
        raw["defaults"]["backfill"] = {"max_files_per_trigger": 1}
    registry = saved_registry(raw, tmp_path / "small_batches.yaml", env)
    landed = generate(settings, events=900, seed=61, files=3)
    jobs = ["run", *chain]
    for job_id, point, batch in kills:
        killed = run_cli(jobs, {**env, **kill_env(job_id, point, batch)}, timeout=900)
        assert killed.returncode == -signal.SIGKILL, (job_id, killed.stderr[-3000:])
    for job_id in chain:  # the lease of the killed process taken over: its pid is gone from this host
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    lines = sum(len(p.read_text().splitlines()) for p in landed.files)
    assert (delta_store.count_rows(settings.layout.table("bronze/clickstream"))
            + delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))) == lines
    assert_chain_equals_the_oracle(settings, registry, [arrival_order(landed.files)], chain)


def test_two_drivers_race_for_a_lease_and_a_holder_frozen_past_it_commits_nothing(s3_server, tmp_path):
    settings, env = s3_lakehouse(tmp_path, "leases")
    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 1}
    saved_registry(raw, tmp_path / "one_file_batches.yaml", env)
    first = generate(settings, events=900, seed=71, files=2)

    racers = [subprocess.Popen([*LAKEHOUSE, "run", "bronze_clickstream"], env=env, cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outcomes = sorted((r.wait(timeout=600), r.stderr.read()) for r in racers)
    assert [code for code, _ in outcomes] == [0, 75], outcomes
    assert "holds its checkpoint lease" in outcomes[1][1] and "on " in outcomes[1][1]

    # A holder paused at its next commit, then frozen (SIGSTOP) past its lease: another host takes the lease over
    # and writes the batch; continued, the frozen one commits nothing and stops with one line.
    second = generate(settings, events=900, seed=72, files=2, start=first_after(first))
    lease_seconds = 8
    gate = tmp_path / "gate"
    frozen_env = {**env, **pause_env("bronze_clickstream", "before_commit", 2, gate), "LAKEHOUSE_HOST_NAME": "host-a",
                  "LAKEHOUSE_LEASE_SECONDS": str(lease_seconds)}
    frozen = subprocess.Popen([*LAKEHOUSE, "run", "bronze_clickstream"], env=frozen_env,
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    other = None
    try:
        wait_for(lambda: (tmp_path / "gate.waiting").exists(), 300, "the holder to reach its commit")
        os.killpg(frozen.pid, signal.SIGSTOP)
        time.sleep(lease_seconds + 2)
        other = subprocess.Popen([*LAKEHOUSE, "run", "bronze_clickstream"],
                                 env={**env, "LAKEHOUSE_HOST_NAME": "host-b",
                                      "LAKEHOUSE_LEASE_SECONDS": str(lease_seconds)},
                                 cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: getattr(lease.read_lease(settings, "bronze_clickstream"), "host", None) == "host-b", 300,
                 "the other host to take the lease over")
        gate.touch()
        os.killpg(frozen.pid, signal.SIGCONT)  # while the other host holds the lease
        _, stderr = frozen.communicate(timeout=300)
        _, other_stderr = other.communicate(timeout=600)
        assert other.returncode == 0, other_stderr[-3000:]
        assert "took over the lease of pid" in other_stderr
    finally:
        if frozen.poll() is None:
            os.killpg(frozen.pid, signal.SIGKILL)
        if other is not None and other.poll() is None:
            other.kill()
    assert frozen.returncode == 75, stderr[-3000:]
    last = [line for line in stderr.splitlines() if line.startswith("lakehouse run")]
    assert len(last) == 1 and "taken over by pid" in last[0] and "host-b" in last[0], stderr[-3000:]
    lines = sum(len(p.read_text().splitlines()) for p in [*first.files, *second.files])
    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream"), columns=["event_id", "_source_file"])
    quarantined = delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))
    assert bronze.num_rows + quarantined == lines  # nothing written twice, nothing lost


def first_after(result):
    from datetime import timedelta

    from include.generator import DEFAULT_START

    return DEFAULT_START + timedelta(minutes=result.lines / 20 + 30)


# Each process gets ready (its JVM started), says so with `<gate>.<name>.ready`, waits for the gate, then works for
# its seconds: all of them at once, however long each took to start.
READY_THEN_WAIT = """
import pathlib, sys, time
def ready_then_wait(gate, name):
    pathlib.Path(f"{gate}.{name}.ready").touch()
    deadline = time.monotonic() + 600
    while not pathlib.Path(gate).exists():
        assert time.monotonic() < deadline, "the gate never opened"
        time.sleep(0.05)
"""

WRITER = READY_THEN_WAIT + """
from include.settings import load_settings
from include.storage import delta as delta_store
gate, path, writer, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
settings = load_settings()
table = settings.path(path)
ready_then_wait(gate, writer)
appended, deadline = 0, time.monotonic() + seconds
while time.monotonic() < deadline:
    delta_store.append_rows(table, {"writer": "string", "n": "long"}, [{"writer": writer, "n": appended + i}
                                                                    for i in range(5)])
    appended += 5
print(appended)
"""

SPARK_WRITER = READY_THEN_WAIT + """
from include.settings import load_settings
from include.spark_session import get_spark
gate, path, writer, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
spark = get_spark(load_settings(), app_name="writer-" + writer)
ready_then_wait(gate, writer)
appended, start = 0, time.monotonic()
# for its seconds, and on until the optimizer beside it has committed a compaction (however slow the machine is)
while time.monotonic() < start + seconds or not pathlib.Path(f"{gate}.compacted").exists():
    assert time.monotonic() < start + seconds + 300, "no compaction committed beside the writers in 300 s"
    spark.range(appended, appended + 5).selectExpr(f"'{writer}' AS writer", "id AS n").write.format("delta") \\
        .mode("append").save(path)
    appended += 5
print(appended)
"""

# Compacts in a loop for its seconds, and on until one compaction has committed (`<gate>.compacted`: the Spark writers
# go on appending until then, so that it commits beside them on a slow machine too).
OPTIMIZER = READY_THEN_WAIT + """
from delta.tables import DeltaTable
from include.settings import load_settings
from include.spark_session import get_spark
gate, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
spark = get_spark(load_settings(), app_name="optimizer")
ready_then_wait(gate, "optimizer")
start, runs, committed = time.monotonic(), 0, 0
while time.monotonic() < start + seconds or not committed:
    assert time.monotonic() < start + seconds + 300, "no compaction committed in 300 s"
    metrics = DeltaTable.forPath(spark, path).optimize().executeCompaction().first()["metrics"]
    runs, committed = runs + 1, committed + (metrics["numFilesRemoved"] > 0)
    if committed:
        pathlib.Path(f"{gate}.compacted").touch()
print(runs)
"""


def run_concurrently(scripts: list[list[str]], env: dict, gate) -> list[str]:
    """The scripts' last lines: each started with `gate` as its first argument, the gate opened once all are ready."""
    processes = [subprocess.Popen([sys.executable, "-c", script, str(gate), *args], env=env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for script, *args in scripts]
    try:
        def ready() -> bool:
            assert all(p.poll() is None for p in processes), [p.stderr.read()[-3000:] for p in processes if p.poll()]
            return len(list(gate.parent.glob(f"{gate.name}.*.ready"))) == len(processes)

        wait_for(ready, 300, lambda: f"every writer to start: {sorted(p.name for p in gate.parent.glob('*.ready'))}")
        gate.touch()
        outputs = []
        for process in processes:
            out, err = process.communicate(timeout=900)
            assert process.returncode == 0, err[-3000:]
            outputs.append(out.strip().splitlines()[-1])
        return outputs
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def assert_every_append_is_there_once(settings, path, appended: dict[str, int]) -> None:
    rows = delta_store.read_table(path, columns=["writer", "n"]).to_pylist()
    got: dict[str, list[int]] = {}
    for r in rows:
        got.setdefault(r["writer"], []).append(r["n"])
    assert {w: sorted(ns) for w, ns in got.items()} == {w: list(range(n)) for w, n in appended.items()}
    log = path / "_delta_log"
    versions = sorted(int(p.stem) for p in log.glob("*.json"))
    assert versions == list(range(versions[-1] + 1))  # contiguous: no version written twice, none skipped


@pytest.mark.parametrize("seconds", [10, pytest.param(60, marks=pytest.mark.full)])
def test_writers_in_several_processes_commit_to_one_table_at_once_and_lose_nothing(s3_server, tmp_path, seconds):
    """Delta's commits on S3, at once for `seconds`: three Python processes appending to one operational table
    (delta-rs's conditional-put commits), and two Spark drivers appending to one table beside a third compacting it in
    a loop (the lakehouse's log store: conditional create). Every row appended is there once, no version is lost."""
    settings, env = s3_lakehouse(tmp_path, "writers")
    ops, table = settings.layout.ops_table("contended"), settings.layout.table("gold/contended")
    for path in (ops, table):
        delta_store.ensure_table(path, {"writer": "string", "n": "long"})
    counts = run_concurrently([*([WRITER, str(ops), f"w{i}", str(seconds)] for i in range(3)),
                               *([SPARK_WRITER, str(table), name, str(seconds)] for name in ("a", "b")),
                               [OPTIMIZER, str(table), str(seconds)]], env, tmp_path / "gate")
    python = {f"w{i}": int(n) for i, n in enumerate(counts[:3])}
    spark = {"a": int(counts[3]), "b": int(counts[4])}
    assert all(n > 0 for n in [*python.values(), *spark.values()]) and int(counts[5]) > 0, counts
    assert_every_append_is_there_once(settings, ops, python)
    assert_every_append_is_there_once(settings, table, spark)
    history = [op for op in delta_store.open_table(table).history() if op["operation"] == "OPTIMIZE"]
    assert history, "the compaction beside the writers committed"


@pytest.mark.timeout(900)
# make test: OPTIMIZE beside Spark writers on S3 (above), a reader going on after a compaction (test_native_delta.py)
@pytest.mark.full
def test_maintenance_beside_a_live_group_on_s3_compacts_and_loses_nothing(s3_server, tmp_path):
    """`lakehouse maintain` (OPTIMIZE, VACUUM) of bronze, silver and gold run twice while a live bronze -> silver ->
    gold group on S3 appends to the same tables, with new events landing: the compactions commit beside the
    writers' micro-batches, the writers go on, and the windows equal the oracle."""
    from include.records.maintenance_log import MAINTENANCE_TABLE
    from tests.support.groups import GROUP, MEMBERS, drop_after, group_registry

    settings, env = s3_lakehouse(tmp_path, "live-maintenance")
    path = tmp_path / "jobs.yaml"
    registry = group_registry(path, following=MEMBERS[1:])
    settings, env = replace(settings, registry_path=path), {**env, "LAKEHOUSE_REGISTRY": str(path)}
    tables = ["bronze/clickstream", "silver/clickstream", "gold/user_activity_5m"]

    def gold_equals_the_oracle(drops) -> None:
        expected = expected_gold(registry, drops)["gold/user_activity_5m"]
        gold = settings.layout.table("gold/user_activity_5m")
        wait_for(lambda: delta_store.table_exists(gold) and gold_rows(settings, "gold/user_activity_5m") == expected,
                 300, "gold to equal the oracle", interval=2)

    drops = [arrival_order(generate(settings, events=400, seed=95, files=2, late_fraction=0.0).files)]
    driver = subprocess.Popen([*LAKEHOUSE, "run", "--group", GROUP], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        gold_equals_the_oracle(drops)
        for seed in (96, 97):
            drops.append(arrival_order(generate(settings, events=300, seed=seed, files=2, late_fraction=0.0,
                                                start=drop_after(drops)).files))
            maintained = run_cli(["maintain", *tables], env, timeout=600)
            assert maintained.returncode == 0, maintained.stderr[-3000:]
            assert driver.poll() is None, driver.stderr.read()[-3000:]  # the writers go on
        gold_equals_the_oracle(drops)
        stopped = run_cli(["stop", "--all", "--wait", "60"], env)
        assert stopped.returncode == 0, stopped.stderr[-2000:]
        _, stderr = driver.communicate(timeout=120)
        assert driver.returncode == 0, stderr[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
    lines = sum(len(p.read_text().splitlines()) for drop in drops for p in drop)
    assert (delta_store.count_rows(settings.layout.table("bronze/clickstream"))
            + delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))) == lines
    silver = delta_store.read_table(settings.layout.table("silver/clickstream"), columns=["event_id"]).to_pylist()
    assert len(silver) == len({r["event_id"] for r in silver})
    recorded = delta_store.read_table(settings.layout.ops_table(MAINTENANCE_TABLE)).to_pylist()
    optimized = [r for r in recorded if r["operation"] == "optimize"]
    assert len(optimized) == 6 and all(r["outcome"] == "done" for r in optimized), optimized
    assert any(r["files_before"] > r["files_after"] for r in optimized), optimized  # something was compacted
    history = delta_store.open_table(settings.layout.table("silver/clickstream")).history()
    assert any(op["operation"] == "OPTIMIZE" for op in history)
