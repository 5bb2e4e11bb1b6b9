"""The production topology from real parts (`lakehouse cluster up --storage s3`): PostgreSQL, Airflow's api-server,
scheduler, dag-processor and triggerer on it, a Spark standalone master with two 1-core workers, a Kafka broker, and
the lakehouse on an S3 server the cluster starts: no directory is shared between the parts (the workers' executors
read and write the bucket; nothing of the lakehouse is on disk). A backfill is
triggered through the API server as a person's Trigger click is, the scheduler runs it, the jobs run as an
application of the master, and gold equals the oracle, through faults: PostgreSQL restarted while idle, a Spark
worker and the scheduler SIGKILLed under the running backfill and started again (the scheduler by its keeper,
include/daemons/keeper.py, as a container's restart policy would). Then checkpoint actions through
the API: a full refresh approved under Required Actions. (One backfill carries the faults: each run costs minutes.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import pytest

from include.cluster import airflow_services, postgres, spark_standalone
from include.cluster.topology import Ports, Topology
from include.daemons import free_port_block
from include.generator import DEFAULT_START
from include.kafka.broker import free_port_pair
from include.registry import load_registry
from include.settings import Settings, load_settings
from include.storage import delta as delta_store
from tests.support.airflow_api import AirflowApi
from tests.support.helpers import (
    REPO,
    arrival_order,
    generate,
    gold_rows,
    run_cli,
    session_summary_rows,
    wait_for,
)
from tests.support.oracle import expected_gold, expected_session_summaries
from tests.support.s3 import free_s3_port

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

JOBS = ["bronze_clickstream", "silver_clickstream", "gold_user_activity_5m", "gold_user_sessions",
        "gold_user_session_summaries"]
GOLD = ["gold/user_activity_5m", "gold/user_sessions"]
CDC_JOBS = ["bronze_customers", "silver_customers"]  # the shop database's changes, captured by the cluster's chain


def free_ports(count: int) -> int:
    """A port p with p .. p + count - 1 free on 127.0.0.1 (below the ephemeral range: include.daemons)."""
    return free_port_block(list(range(count)))


@dataclass
class Cluster:
    env: dict
    info: dict
    settings: Settings
    api: AirflowApi
    drops: list

    @property
    def topology(self) -> Topology:
        return Topology(self.settings.layout.cluster, Ports.parse(self.env["LAKEHOUSE_CLUSTER_PORTS"]), 2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster")
    registry = base / "jobs.yaml"  # the cluster's registry: the checkpoint test changes it as a person would
    shutil.copy(load_settings().registry_path, registry)
    endpoint = f"http://127.0.0.1:{free_s3_port()}"  # the cluster's own S3 server, which `up` starts
    env = {**os.environ, "LAKEHOUSE_ROOT": f"s3://lakehouse-cluster/{base.name}", "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_REGISTRY": str(registry), "LAKEHOUSE_LOCAL_DIR": str(base / "local"),
           "LAKEHOUSE_S3_ENDPOINT": endpoint,
           "LAKEHOUSE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port_pair()}", "LAKEHOUSE_SQL_PORT": str(free_ports(1)),
           "LAKEHOUSE_CDC_POSTGRES_PORT": str(free_ports(1)), "LAKEHOUSE_CONNECT_URL": f"http://127.0.0.1:{free_ports(1)}",
           "LAKEHOUSE_CLUSTER_PORTS": f"{free_ports(1)},{free_ports(1)},{free_ports(3)},{free_ports(1)}",
           "LAKEHOUSE_METRICS_PORT": str(free_ports(1)), "LAKEHOUSE_PROMETHEUS_PORT": str(free_ports(1)),
           "LAKEHOUSE_ALERTMANAGER_PORT": str(free_ports(1)),
           # the runs here are the tests' own: a DAG they unpause must not add its hourly run when the module spans the
           # top of an hour (it took the cluster's cores for minutes: a test waiting for them used 261 s of its 300)
           "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"}
    for variable in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS", "LAKEHOUSE_TEST_PAUSE_AT", "AIRFLOW_HOME"):
        env.pop(variable, None)
    up = run_cli(["cluster", "up", "--workers", "2", "--storage", "s3"], env, timeout=420)
    settings = replace(load_settings(), root=env["LAKEHOUSE_ROOT"], registry_path=registry, local_dir=base / "local",
                       s3=replace(load_settings().s3, endpoint=endpoint))
    try:
        assert up.returncode == 0, up.stdout + up.stderr[-3000:]
        info = json.loads(run_cli(["cluster", "status", "--json"], env).stdout)
        yield Cluster(env, info, settings, AirflowApi(info["airflow_url"], info["airflow_user"],
                                                       info["airflow_password"]), [])
    finally:
        down = run_cli(["cluster", "down"], env, timeout=300)
    assert down.returncode == 0, down.stderr[-2000:]
    after = json.loads(run_cli(["cluster", "status", "--json"], env).stdout)
    assert not any(part["up"] for part in after["parts"].values()), after["parts"]
    assert after["storage"] == {"endpoint": endpoint, "root": settings.root.uri, "up": False}, after["storage"]
    if up.returncode == 0:  # the data stays: PostgreSQL started again on it still has the backfill's run
        top = Topology(settings.layout.cluster, Ports.parse(env["LAKEHOUSE_CLUSTER_PORTS"]), 2)
        postgres.start(top)
        try:
            wait_for(lambda: postgres.answers(top), 60, "PostgreSQL on the kept data")
            connection = postgres.connect(top, user="airflow", database="airflow")
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT state FROM dag_run WHERE dag_id = 'lakehouse_backfill'")
                    assert cursor.fetchall() == [("success",)]
            finally:
                connection.close()
        finally:
            postgres.stop(top)
    data = settings.layout.cluster / "postgres"
    if data.is_symlink():  # as root, PostgreSQL's data lives where its user reaches (include/cluster/postgres.py)
        shutil.rmtree(data.resolve(), ignore_errors=True)


def land(cluster: Cluster, seed: int, hours: int) -> None:
    landed = generate(cluster.settings, events=600, seed=seed, files=2, users=20,
                      start=DEFAULT_START + timedelta(hours=hours))
    cluster.drops.append(arrival_order(landed.files))


def commit_shop(cluster: Cluster, changes: int, seed: int) -> None:
    """The shop generator's transactions on the cluster's CDC database, waited for until they are on their topics."""
    from include.cdc import capture

    registry = load_registry(cluster.settings.registry_path)
    topics = [s.cdc.topic for sources in registry.cdc_sources().values() for s in sources]
    before = capture.end_offsets(cluster.env["LAKEHOUSE_KAFKA_BOOTSTRAP"], topics)
    generated = run_cli(["generate", "--source", "shop", "--events", str(changes), "--seed", str(seed)], cluster.env)
    assert generated.returncode == 0, generated.stderr[-2000:]
    lines = [json.loads(x) for x in Path(json.loads(generated.stdout)["oracle"]).read_text().splitlines()]
    capture.wait_captured(cluster.env["LAKEHOUSE_KAFKA_BOOTSTRAP"], before, capture.expected_messages(registry, lines))


def assert_customers_equal_the_database(cluster: Cluster) -> None:
    """silver/customers (SCD type 1, written by the master's executors on S3) holds what the database holds."""
    from include.cdc import database
    from include.storage import reader

    columns = ("id", "name", "email", "country", "updated_at")
    connection = database.connect(database.address(replace(cluster.settings, cdc_postgres_port=int(
        cluster.env["LAKEHOUSE_CDC_POSTGRES_PORT"]))))
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(columns)} FROM public.customers")
            expected = {row[0]: row for row in cursor.fetchall()}
    finally:
        connection.close()
    table = reader.query(cluster.settings.layout.table("silver/customers"), f"SELECT {', '.join(columns)} FROM t")
    found = {row["id"]: tuple(row[c] for c in columns) for row in table.to_pylist()}
    assert found == expected


def assert_equals_the_oracle(cluster: Cluster) -> None:
    registry, settings = load_registry(cluster.settings.registry_path), cluster.settings
    expected = expected_gold(registry, cluster.drops)
    for table in GOLD:
        assert gold_rows(settings, table) == expected[table], table
    assert session_summary_rows(settings) == expected_session_summaries(registry, cluster.drops)
    lines = sum(len(f.read_text().splitlines()) for drop in cluster.drops for f in drop)
    bronze = delta_store.count_rows(settings.layout.table("bronze/clickstream"))
    assert bronze + delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine")) == lines


def test_a_part_that_cannot_start_is_named_and_what_up_started_is_stopped(tmp_path):
    """The catalog's port taken: `up` names the part and the port, exits 1, and stops PostgreSQL, which it had
    started already (its data directory kept). (Kafka, started after the catalog, is stopped by `down`: the
    module's cluster.)"""
    taken = free_ports(1)
    env = {**os.environ, "LAKEHOUSE_ROOT": str(tmp_path / "lakehouse"), "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port_pair()}",
           "LAKEHOUSE_METASTORE_URI": f"thrift://127.0.0.1:{taken}",
           "LAKEHOUSE_CLUSTER_PORTS": f"{free_ports(1)},{free_ports(1)},{free_ports(3)},{free_ports(1)}"}
    env.pop("AIRFLOW_HOME", None)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        failed = run_cli(["cluster", "up"], env, timeout=300)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        f"lakehouse cluster up: catalog: port {taken} on 127.0.0.1 is taken by another program (the metastore needs "
        "it): free it, or set LAKEHOUSE_METASTORE_URI to another thrift://host:port"], failed.stderr
    after = json.loads(run_cli(["cluster", "status", "--json"], env).stdout)
    assert not any(part["up"] for part in after["parts"].values()), after["parts"]
    data = tmp_path / "lakehouse" / "_cluster" / "postgres"
    assert data.exists()
    if data.is_symlink():
        shutil.rmtree(data.resolve(), ignore_errors=True)


def test_every_part_answers_and_up_again_changes_nothing(cluster):
    info = cluster.info
    assert all(part["up"] for part in info["parts"].values()), info["parts"]
    assert all(part["restarts"] == 0 for name, part in info["parts"].items() if name.startswith("airflow-"))
    assert set(info["parts"]) == {"postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
                                  "airflow-triggerer", "airflow-history", "spark-master", "spark-worker-1", "spark-worker-2",
                                  "kafka", "catalog", "cdc", "monitor"}
    assert info["prometheus_url"] == f"http://127.0.0.1:{cluster.env['LAKEHOUSE_PROMETHEUS_PORT']}"
    assert info["metrics_url"] == f"http://127.0.0.1:{cluster.env['LAKEHOUSE_METRICS_PORT']}/metrics"
    assert info["catalog"]["up"] and info["catalog"]["uri"] == cluster.env["LAKEHOUSE_METASTORE_URI"]
    assert info["catalog"]["backend"] == f"postgresql (127.0.0.1:{cluster.topology.ports.postgres}/metastore)", info
    assert info["storage"] == {"endpoint": cluster.settings.s3.endpoint, "root": cluster.settings.root.uri, "up": True}
    assert info["lakehouse_root"] == cluster.settings.root.uri
    assert info["spark_master"] == cluster.topology.spark_master == f"spark://127.0.0.1:{cluster.topology.ports.spark_master}"
    assert info["kafka_bootstrap"] == cluster.env["LAKEHOUSE_KAFKA_BOOTSTRAP"]
    assert set(info["postgres"]) == {"host", "port", "database", "user", "password"}
    again = run_cli(["cluster", "up", "--workers", "2"], cluster.env, timeout=300)
    assert again.returncode == 0 and "everything was already running" in again.stdout, again.stderr[-2000:]
    connections = json.loads((cluster.settings.layout.cluster / "connections.json").read_text())
    assert connections["spark_default"]["host"] == info["spark_master"]


def test_a_backfill_triggered_through_the_api_runs_on_the_master_through_faults(cluster):
    """PostgreSQL stopped and started again: Airflow's components answer again (those that exited over it started
    again by their keeper). Then a backfill triggered as a Trigger click is, run by the scheduler, its jobs an
    application of the master; under it the scheduler is SIGKILLed (its keeper starts it again) and a Spark worker (and
    its executor, `lakehouse cluster up` starts it again). The run succeeds, gold equals the oracle, the run is in
    PostgreSQL."""
    top = cluster.topology
    postgres.stop(top)
    wait_for(lambda: ((airflow_services.health(top) or {}).get("metadatabase") or {}).get("status") != "healthy", 60,
             "the API server to see PostgreSQL gone")
    postgres.start(top)
    wait_for(lambda: postgres.answers(top), 60, "PostgreSQL to answer again")
    wait_for(lambda: all(airflow_services.answers(top, c, airflow_services.health(top))
                         for c in airflow_services.COMPONENTS), 180, "Airflow's components to answer again", interval=1)

    land(cluster, seed=41, hours=0)
    commit_shop(cluster, changes=60, seed=41)
    run_id = cluster.api.trigger("lakehouse_backfill", {"jobs": JOBS + CDC_JOBS})
    wait_for(lambda: any(a["name"] == "lakehouse-jobs" for a in
                         (spark_standalone.master_state(top) or {}).get("activeapps", [])),
             240, "the backfill's application on the master", interval=0.5)
    scheduler = airflow_services.daemon(top, "scheduler")
    killed = scheduler.kept_pid()
    os.kill(killed, signal.SIGKILL)  # the scheduler alone: the task it started goes on
    wait_for(lambda: scheduler.kept_pid() not in (None, killed), 60, "the keeper to start the scheduler again")
    os.killpg(spark_standalone.worker_daemon(top, 1).running_pid(), signal.SIGKILL)  # the worker and its executor
    again = run_cli(["cluster", "up", "--workers", "2"], cluster.env, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.splitlines()[0] == "cluster up (spark-worker-1 started)", again.stdout

    def scheduler_status() -> dict:
        return json.loads(run_cli(["cluster", "status", "--json"], cluster.env).stdout)["parts"]["airflow-scheduler"]

    # the new scheduler answers once it has started and beaten its first heartbeat: seconds, more on a busy machine.
    # The status seen answering is the one checked: a probe a moment later may find the busy scheduler slow to answer.
    shown = wait_for(lambda: (status := scheduler_status())["up"] and status, 180,
                     lambda: f"the new scheduler to answer: {scheduler_status()}", interval=2)
    assert shown["restarts"] >= 1, shown  # and perhaps once over PostgreSQL's restart
    assert f"pid {killed} exited with code -9 after" in shown["last_restart"], shown
    line = next(x for x in run_cli(["cluster", "status"], cluster.env).stdout.splitlines() if "airflow-scheduler" in x)
    assert line.startswith("airflow-scheduler") and f"restarted {shown['restarts']} times, last: " in line, line
    state = cluster.api.wait("lakehouse_backfill", run_id, timeout=600)
    tasks = cluster.api.task_states("lakehouse_backfill", run_id)
    assert state == "success", tasks
    assert all(tasks[job] == "success" for job in JOBS + CDC_JOBS), tasks
    assert_equals_the_oracle(cluster)
    assert_customers_equal_the_database(cluster)

    master = spark_standalone.master_state(top)
    assert [w for w in master["workers"] if w["state"] != "ALIVE"], "the master saw no worker lost"
    apps = [a for a in master["completedapps"] if a["name"] == "lakehouse-jobs"]
    assert apps and apps[0]["state"] == "FINISHED", master["completedapps"]
    connection = postgres.connect(top, user="airflow", database="airflow")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT state FROM dag_run WHERE dag_id = 'lakehouse_backfill' AND run_id = %s", (run_id,))
            assert cursor.fetchone() == ("success",)
            # a killed scheduler's open transaction (kept by the workers it forked) ends on its own, locks and all
            cursor.execute("SHOW idle_in_transaction_session_timeout")
            assert cursor.fetchone() == ("2min",)
    finally:
        connection.close()
    assert not list((cluster.settings.layout.cluster / "airflow").glob("*.db"))  # no SQLite on the side
    # The executors wrote the bucket: nothing of the lakehouse is on this machine's disk
    local = cluster.settings.local
    assert {p.name for p in local.iterdir()} <= {"_cluster", "_kafka", "_s3", "_catalog", "_work", "_spark_warehouse",
                                                  "_cdc", "_monitor"}, \
        list(local.iterdir())  # the servers' own files, the quality run's working copy of its report
    assert not [p for p in local.rglob("_delta_log")] and not [p for p in local.rglob("*.parquet")]
    assert cluster.settings.layout.checkpoint("gold_user_activity_5m").uri.startswith("s3a://")

    # by name through the SQL endpoint (JDBC), over the catalog on PostgreSQL that outlived PostgreSQL's restart
    from include.catalog_client.tables import catalog_name

    endpoint = run_cli(["sql", "up"], cluster.env, timeout=400)
    assert endpoint.returncode == 0, endpoint.stderr[-3000:]
    def query(statement: str) -> list[dict]:
        read = run_cli(["query", "--format", "json", statement], cluster.env, timeout=300)
        assert read.returncode == 0, (statement, read.stderr[-3000:])
        return json.loads(read.stdout)

    try:  # one statement (a beeline JVM): each of the five names must resolve in the catalog for it to run
        registry = load_registry(cluster.settings.registry_path)
        expected = expected_gold(registry, cluster.drops)
        lines = sum(len(f.read_text().splitlines()) for drop in cluster.drops for f in drop)
        windows = query("SELECT unix_timestamp(window_start) AS s, unix_timestamp(window_end) AS e, user_id, "
                        f"event_count, total_value, (SELECT count(*) FROM {catalog_name('gold/user_sessions')}) AS "
                        "sessions, (SELECT count(*) FROM gold.user_session_summaries) AS summaries, (SELECT count(*) "
                        "FROM bronze.clickstream) + (SELECT count(*) FROM bronze.clickstream_quarantine) AS bronze "
                        "FROM gold.user_activity_5m")
        assert len(windows) == len(expected["gold/user_activity_5m"]) and {
            (int(r["s"]), int(r["e"]), r["user_id"]): (int(r["event_count"]), float(r["total_value"]))
            for r in windows} == expected["gold/user_activity_5m"]  # beeline's CSV: every value a string
        assert {(int(r["sessions"]), int(r["summaries"]), int(r["bronze"])) for r in windows} == {
            (len(expected["gold/user_sessions"]), len(expected_session_summaries(registry, cluster.drops)), lines)}
    finally:
        run_cli(["sql", "down"], cluster.env)


def test_executors_import_the_shipped_archive_and_start_with_their_jvm_options(cluster, tmp_path):
    import subprocess

    env = {**cluster.env, "LAKEHOUSE_SPARK_MASTER": cluster.info["spark_master"]}
    env.pop("PYTHONPATH", None)
    probe = subprocess.run([sys.executable, str(REPO / "tests" / "support" / "executor_probe.py")], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    rows = [json.loads(line) for line in probe.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2, probe.stdout
    workers = str(cluster.settings.layout.cluster / "spark")
    for row in rows:
        assert ".zip" in row["module"] and "lakehouse-python-" in row["module"], row
        assert row["cwd"].startswith(workers) and not row["cwd"].startswith(str(REPO)), row
        # LAKEHOUSE_SPARK_EXECUTOR_JAVA_OPTIONS (the suite's C1, tests/conftest.py) reached the executors' JVMs
        assert set(os.environ["LAKEHOUSE_SPARK_EXECUTOR_JAVA_OPTIONS"].split()) <= set(row["jvm"].split()), row


# make test-full: every part of it runs in make test on another topology: the approved full refresh through
# `checkpoint_reset` (tests/test_airflow.py), a checkpoint action on S3 killed and resumed (tests/test_s3.py), the jobs
# on the master (the backfill above). Here, all three at once (~140 s of the cluster's cores).
@pytest.mark.full
def test_an_approved_full_refresh_on_the_cluster_after_a_partitioning_change(cluster):
    """After the backfill above: a registry change of the 5-minute job's shuffle partitions (its checkpoint's plan:
    repartition), resolved by a full refresh through `checkpoint_reset`, which destroys state: approved by a person
    through the API (Required Actions, Reject proposed), rebuilt from silver on the cluster, audited, still equal to
    the oracle. (The repartition itself through the DAG: tests/test_airflow.py.)"""
    import yaml

    from include import checkpoints
    from include.records import checkpoint_audit

    assert cluster.drops, "runs after the backfill above"
    raw = yaml.safe_load(cluster.settings.registry_path.read_text())
    raw["jobs"]["gold_user_activity_5m"]["state_store"] = {"shuffle_partitions": 1}  # the suite's 2
    cluster.settings.registry_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    checkpoint = cluster.settings.layout.checkpoint("gold_user_activity_5m")
    api = cluster.api

    def audit(run_id: str) -> list[tuple]:
        return sorted((r["job"], r["mode"], r["outcome"]) for r in checkpoint_audit.outcomes(cluster.settings)
                      if r["actor"] == f"dag:checkpoint_reset/{run_id}")

    refreshed = api.trigger("checkpoint_reset", {"jobs": ["gold_user_activity_5m"], "mode": "full-refresh",
                                                 "dry_run": False, "verify_run": False})  # it ran available-now
    approval = f"/api/v2/dags/checkpoint_reset/dagRuns/{refreshed}/taskInstances/approve/-1/hitlDetails"

    def asked():
        try:
            return api.call("GET", approval)
        except OSError:  # 404 until the task asks
            return None

    detail = wait_for(asked, 300, "the approval to be asked", interval=1)
    # As a person would, answer once the question is settled: the scheduler has seen the task pause. (An answer within
    # a second of the question races Airflow 3.3's scheduler, which then fails the task: see the README.)
    paused = (f"Received executor event with state success for task instance TaskInstanceKey(dag_id='checkpoint_reset',"
              f" task_id='approve', run_id='{refreshed}'")
    scheduler_log = cluster.topology.logs / "airflow-scheduler.log"
    wait_for(lambda: paused in scheduler_log.read_text(errors="replace"), 120, "the scheduler to see the approval wait")
    assert detail["defaults"] == ["Reject"] and "**destroys state**" in detail["body"], detail
    assert "Its checkpoint's plan: `repartition`" in detail["body"], detail["body"]
    api.call("PATCH", approval, {"chosen_options": ["Approve"], "params_input": {}})
    assert api.wait("checkpoint_reset", refreshed, timeout=420) == "success", api.task_states("checkpoint_reset",
                                                                                             refreshed)
    assert audit(refreshed) == [("gold_user_activity_5m", "full-refresh", "done"),
                                ("gold_user_activity_5m", "verify", "done")]
    assert cluster.settings.layout.archived_checkpoint("gold_user_activity_5m", 1).is_dir()
    assert checkpoints.shuffle_partitions(checkpoint) == 1
    assert_equals_the_oracle(cluster)  # rebuilt from silver on the cluster: the same windows



def test_the_history_part_deletes_airflow_runs_and_logs_older_than_its_days(cluster):
    """After the backfill above: a dry run of `checkpoint_reset` (the plan only), its runs then backdated forty days in
    PostgreSQL, with their task logs. The `airflow-history` part (`lakehouse airflow-history --every 60` under its keeper, outside Airflow's tasks) cleans
    when it starts: SIGKILLed, started again by its keeper, it deletes that run with its task instances and log
    folder (LAKEHOUSE_AIRFLOW_HISTORY_DAYS: 30); the backfill's run and its logs stay."""
    import time

    top = cluster.topology

    def query(sql: str, *params) -> list[tuple]:
        connection = postgres.connect(top, user="airflow", database="airflow")
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                rows = cursor.fetchall() if cursor.description else []
            connection.commit()
            return rows
        finally:
            connection.close()

    backfill = query("SELECT run_id FROM dag_run WHERE dag_id = 'lakehouse_backfill' ORDER BY run_id")
    planned = cluster.api.trigger("checkpoint_reset", {"jobs": ["gold_user_activity_5m"], "mode": "full-refresh",
                                                       "dry_run": True})
    assert cluster.api.wait("checkpoint_reset", planned, timeout=300) == "success", \
        cluster.api.task_states("checkpoint_reset", planned)
    assert backfill and query("SELECT count(*) FROM dag_run WHERE dag_id = 'checkpoint_reset'")[0][0] >= 1
    for table in ("dag_run", "task_instance"):
        query(f"UPDATE {table} SET start_date = start_date - interval '40 days' "  # noqa: S608
              "WHERE dag_id = 'checkpoint_reset'")
    old_logs = top.airflow_home / "logs" / "dag_id=checkpoint_reset"
    forty_days_ago = time.time() - 40 * 86400
    for path in old_logs.rglob("*.log"):
        os.utime(path, (forty_days_ago, forty_days_ago))
    assert list(old_logs.rglob("*.log")), "the action's task logs"
    history = airflow_services.daemon(top, "history")

    def cleanings() -> int:
        return history.log_file.read_text(errors="replace").count("Airflow history before ")

    assert cleanings() >= 1, "it cleaned when the cluster started"
    before, killed = cleanings(), history.kept_pid()
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: cleanings() > before, 180, "the history part, started again, to clean", interval=1)
    assert query("SELECT count(*) FROM dag_run WHERE dag_id = 'checkpoint_reset'") == [(0,)]
    assert query("SELECT count(*) FROM task_instance WHERE dag_id = 'checkpoint_reset'") == [(0,)]
    assert query("SELECT run_id FROM dag_run WHERE dag_id = 'lakehouse_backfill' ORDER BY run_id") == backfill
    assert not old_logs.exists()
    assert list((top.airflow_home / "logs" / "dag_id=lakehouse_backfill").rglob("*.log"))
    shown = json.loads(run_cli(["cluster", "status", "--json"], cluster.env).stdout)["parts"]["airflow-history"]
    assert shown["up"] and shown["restarts"] == 1 and f"pid {killed} exited with code -9" in shown["last_restart"]
