"""The catalog and SQL: `lakehouse catalog up | down | status | sync` runs a Hive metastore from pyspark's jars;
every job names its tables in it when it starts; `lakehouse sql up` serves them over JDBC (Spark's Thrift server),
read-only, behind a login; `lakehouse query` reads them by name through it, or in a local session on the catalog.
Jobs run while the catalog is down, and `catalog up` (its sync) names their tables afterwards.

One lakehouse per root (local in `make test`; a prefix of the session's S3 bucket in `make test-full`): a catalog on a
free port, the clickstream lineage run once by a `lakehouse run` process."""

from __future__ import annotations

import json
import socket
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from include.catalog.metastore import MetastoreFiles, hive_site
from include.catalog_client.tables import catalog_name, named_tables
from include.daemons import free_port_block
from include.settings import Settings, load_settings
from include.storage import delta as delta_store
from tests.support.helpers import arrival_order, generate, run_cli
from tests.support.oracle import expected_gold

LINEAGE = ["bronze_clickstream", "silver_clickstream", "gold_user_activity_5m"]


def test_catalog_names_follow_the_table_paths(settings, registry):
    assert catalog_name("gold/user_activity_5m") == "gold.user_activity_5m"
    assert catalog_name("bronze/clickstream_quarantine") == "bronze.clickstream_quarantine"
    with pytest.raises(ValueError, match="has no database segment"):
        catalog_name("orphan")
    names = {t.name: t.location for t in named_tables(settings, registry)}
    assert names["gold.user_activity_5m"] == settings.layout.table("gold/user_activity_5m")
    assert names["bronze.clickstream_quarantine"] == settings.layout.table("bronze/clickstream_quarantine")
    assert {"ops.query_progress", "ops.batch_ledger", "ops.checkpoint_audit", "ops.dq_results"} <= set(names)
    assert len(names) == len(registry.tables_written()) + 6


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("LAKEHOUSE_METASTORE_URI", "http://127.0.0.1:9083", "LAKEHOUSE_METASTORE_URI must be thrift://host:port"),
    ("LAKEHOUSE_METASTORE_URI", "thrift://127.0.0.1", "LAKEHOUSE_METASTORE_URI must be thrift://host:port"),
    ("LAKEHOUSE_METASTORE_URI", "thrift://:9083", "LAKEHOUSE_METASTORE_URI must be thrift://host:port"),
    ("LAKEHOUSE_SQL_PORT", "ten", "LAKEHOUSE_SQL_PORT must be a port number"),
    ("LAKEHOUSE_SQL_PORT", "70000", "LAKEHOUSE_SQL_PORT must be a port number"),
])
def test_bad_catalog_and_sql_settings_are_named(monkeypatch, name, value, problem):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=problem):
        load_settings()


def test_the_metastore_keeps_derby_beside_it_and_logs_synchronously(tmp_path, settings):
    site = hive_site(MetastoreFiles(tmp_path), settings)
    assert f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true" in site
    assert "<name>hive.async.log.enabled</name><value>false</value>" in site  # else the JVM dies (no LMAX disruptor)


def test_a_taken_port_is_one_line(lakehouse_env):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        taken = run_cli(["catalog", "up"], {**lakehouse_env, "LAKEHOUSE_METASTORE_URI": f"thrift://127.0.0.1:{port}"})
    assert taken.returncode == 1
    assert taken.stderr.strip() == (f"lakehouse catalog up: port {port} on 127.0.0.1 is taken by another program (the "
                                    "metastore needs it): free it, or set LAKEHOUSE_METASTORE_URI to another "
                                    "thrift://host:port"), taken.stderr


@dataclass
class NamedLakehouse:
    settings: Settings
    env: dict
    uri: str
    landed: list  # the landing files (local or S3 paths), in arrival order


ROOTS = ["local", pytest.param("s3", marks=[pytest.mark.full, pytest.mark.s3])]  # S3: `make test-full`; the
# cluster's S3 root reads its names through the endpoint in `make test` (tests/test_cluster.py)


@pytest.fixture(scope="module", params=ROOTS)
def named(request, tmp_path_factory):
    """A lakehouse (a local root, or a prefix of the session's S3 bucket) whose catalog `catalog up` started (asked
    before, it answered nothing), the clickstream lineage run once; the catalog stopped after the module."""
    import os
    import sys

    local = tmp_path_factory.mktemp("named")
    uri = f"thrift://127.0.0.1:{free_port_block([0])}"
    if request.param == "s3":
        from tests.support.s3 import BUCKET

        request.getfixturevalue("s3_server")
        settings = replace(load_settings(), root=f"s3://{BUCKET}/named-{os.urandom(3).hex()}", local_dir=local)
    else:
        settings = replace(load_settings(), root=local / "lakehouse")
    settings = replace(settings, metastore_uri=uri, metastore_uri_set=True)
    env = {**os.environ, **settings.storage_environment(), "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_METASTORE_URI": uri, "LAKEHOUSE_SQL_PORT": str(free_port_block([0])),
           "LAKEHOUSE_SQL_PASSWORD": "tables-by-name"}
    for name in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS"):
        env.pop(name, None)
    down = run_cli(["catalog", "status", "--json"], env)
    assert down.returncode == 1 and json.loads(down.stdout)["up"] is False
    sync_down = run_cli(["catalog", "sync"], env)
    assert sync_down.returncode == 1 and f"no metastore answers at {uri.removeprefix('thrift://')}" in sync_down.stderr
    up = run_cli(["catalog", "up"], env, timeout=300)
    assert up.returncode == 0 and up.stdout.strip().splitlines()[0] == uri, up.stderr[-2000:]
    try:
        again = run_cli(["catalog", "up"], env)  # no table yet: its sync starts no Spark
        assert again.returncode == 0 and f"a metastore already answers at {uri}" in again.stderr, again.stderr
        landed = generate(settings, events=600, seed=81, files=2)
        run = run_cli(["run", *LINEAGE], env, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        files = arrival_order(landed.files) if settings.layout.root.is_local else sorted(landed.files, key=str)
        yield NamedLakehouse(settings, env, uri, files)
    finally:
        run_cli(["sql", "down"], env)
        run_cli(["catalog", "down"], env)


def query(house: NamedLakehouse, statement: str) -> list[dict]:
    return query_in(house.env, statement)


def refused(env: dict, statement: str) -> str:
    result = run_cli(["query", statement], env, timeout=600)
    assert result.returncode == 1, (statement, result.stdout, result.stderr[-2000:])
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.spark
@pytest.mark.slow
def test_the_sql_endpoint_serves_every_table_by_name_read_only_behind_its_login(named, registry):
    house = named
    status = json.loads(run_cli(["catalog", "status", "--json"], house.env).stdout)
    assert status["up"] and status["backend"] == f"derby ({house.settings.layout.catalog / 'metastore_db'})", status
    assert {"bronze", "silver", "gold", "ops"} <= set(status["databases"])

    up = run_cli(["sql", "up"], house.env, timeout=400)
    assert up.returncode == 0, up.stderr[-3000:]
    port = house.env["LAKEHOUSE_SQL_PORT"]
    url = f"jdbc:hive2://127.0.0.1:{port}/default"
    assert up.stdout.splitlines() == [url, "user: lakehouse", "password: tables-by-name"], up.stdout
    endpoint = json.loads(run_cli(["sql", "status", "--json"], house.env).stdout)
    assert endpoint == {"jdbc_url": url, "host": "127.0.0.1", "port": int(port), "up": True, "user": "lakehouse"}

    # every query below goes through the endpoint (beeline: JDBC)
    tables = query(house, "SHOW TABLES IN gold") + query(house, "SHOW TABLES IN bronze")
    assert {(t["namespace"], t["tableName"]) for t in tables} == {
        ("gold", "user_activity_5m"), ("bronze", "clickstream"), ("bronze", "clickstream_quarantine")}, tables
    assert refused(house.env, "DROP TABLE gold.user_activity_5m").startswith(
        "lakehouse query: read-only: DROP TABLE is refused")  # one line, as `lakehouse query` says it
    from include.daemons import spark_home

    writes = {"INSERT": "INSERT INTO gold.user_activity_5m SELECT * FROM gold.user_activity_5m",
              "DELETE": "DELETE FROM bronze.clickstream", "VACUUM": "VACUUM silver.clickstream",
              "ALTER TABLE": "ALTER TABLE silver.clickstream SET TBLPROPERTIES ('x' = 'y')"}
    tried = run_cli_beeline(spark_home(), url, "lakehouse", "tables-by-name", *writes.values())  # one JDBC client
    assert tried.returncode != 0 and [name for name in writes if f"read-only: {name} is refused" in tried.stderr] == \
        list(writes), tried.stderr[-3000:]
    # after the refusals, in one statement: every window as the oracle has it, and every landed line in bronze
    lines = sum(len(p.read_text().splitlines()) for p in house.landed)
    oracle = expected_gold(registry, [house.landed])["gold/user_activity_5m"]
    rows = query(house, "SELECT unix_timestamp(window_start) AS s, unix_timestamp(window_end) AS e, user_id, "
                        "event_count, total_value, (SELECT count(*) FROM bronze.clickstream) + "
                        "(SELECT count(*) FROM bronze.clickstream_quarantine) AS n FROM gold.user_activity_5m")
    assert oracle and len(rows) == len(oracle) and {
        (int(r["s"]), int(r["e"]), r["user_id"]): (int(r["event_count"]), float(r["total_value"])) for r in rows} == oracle
    assert {int(r["n"]) for r in rows} == {lines}

    beeline = run_cli_beeline(spark_home(), url, "lakehouse", "wrong", "SELECT 1")
    assert beeline.returncode != 0 and "Error validating the login" in beeline.stderr, beeline.stderr[-2000:]

    assert run_cli(["sql", "down"], house.env).stdout.startswith("SQL endpoint stopped")
    assert run_cli(["sql", "status"], house.env).returncode == 1


def run_cli_beeline(spark_home: Path, url: str, user: str, password: str, *statements: str):
    """beeline, the JDBC client pyspark ships, as a person would run it: each statement (an `-e` each) runs, whatever
    the one before it did."""
    import os
    import subprocess

    executed = [arg for statement in statements for arg in ("-e", statement)]
    return subprocess.run([str(spark_home / "bin" / "beeline"), "-u", url, "-n", user, "-p", password,
                           "--silent=true", *executed], env={**os.environ, "SPARK_HOME": str(spark_home)},
                          capture_output=True, text=True, timeout=300)


def test_the_catalog_on_postgresql_is_named_by_one_url(monkeypatch, tmp_path, settings):
    from include.settings import postgres_address

    monkeypatch.setenv("LAKEHOUSE_METASTORE_DB", "postgresql://metastore:s%40cret@127.0.0.1:5433/metastore")
    loaded = load_settings()
    database = postgres_address(loaded.metastore_db)
    assert (database.host, database.port, database.database, database.user, database.password) == (
        "127.0.0.1", 5433, "metastore", "metastore", "s@cret")
    site = hive_site(MetastoreFiles(tmp_path), loaded)
    assert "<value>jdbc:postgresql://127.0.0.1:5433/metastore</value>" in site and "org.postgresql.Driver" in site
    for bad in ("mysql://u:p@h:1/db", "postgresql://h:5432/db", "postgresql://u:p@h:5432/"):
        monkeypatch.setenv("LAKEHOUSE_METASTORE_DB", bad)
        with pytest.raises(ValueError, match="LAKEHOUSE_METASTORE_DB must be postgresql://user:password@host:port/"):
            load_settings()


def test_a_sink_may_name_its_table_and_readers_may_too(raw, settings):
    """`sink.table: silver.clicks` names the table in the catalog; its path is silver/clicks, and a job reading it
    may name it either way."""
    from include.registry import RegistryError, build_registry

    raw["jobs"]["silver_clickstream"]["sink"]["table"] = "silver.clicks"
    readers = [j for j in raw["jobs"].values() if (j.get("source") or {}).get("table") == "silver/clickstream"]
    assert len(readers) >= 2
    readers[0]["source"]["table"] = "silver.clicks"
    for reader in readers[1:]:
        reader["source"]["table"] = "silver/clicks"
    registry = build_registry(raw)
    assert registry.job("silver_clickstream").sink.table == "silver/clicks"
    assert registry.writer_of("silver/clicks").id == "silver_clickstream"
    names = {t.name: t.location for t in named_tables(settings, registry)}
    assert names["silver.clicks"] == settings.layout.table("silver/clicks") and "silver.clickstream" not in names
    raw["jobs"]["silver_clickstream"]["sink"]["table"] = "silver.clicks.v2"
    with pytest.raises(RegistryError, match=r"sink.table: 'silver.clicks.v2' must look like 'layer/name' \(or its "
                                            r"name, 'layer.name'\)"):
        build_registry(raw)


@pytest.mark.spark
@pytest.mark.slow
def test_names_stay_true_through_an_evolve_a_full_refresh_a_catalog_down_and_a_move(named, raw, tmp_path):
    """Without the endpoint, `lakehouse query` reads in a local session on the catalog (read-only too), and a DAG task
    by the Spark provider's SparkSqlOperator. The registry names a new field: bronze and silver add the column when
    they start, and `DESCRIBE` by name shows it (from the Delta log, not the metastore's placeholder); a full refresh
    of gold rebuilds it in place, and its name reads the rebuilt rows. It also renames `event_type` to `action` (column
    mapping, in place): the name's SQL reads every row, those written before too, under the new name. The catalog down, the DAG task is skipped; a
    driver whose session was on the catalog starts a query with one warning (nothing of a job names a table in the
    catalog's SQL), and so does a job started without it after the lakehouse moved to another root; `catalog up`
    (its sync) names both jobs' new tables and points every other name at the new root."""
    import copy
    import shutil

    from airflow.sdk.exceptions import AirflowSkipException

    from include.airflow.operators import CatalogSqlOperator
    from tests.support.helpers import gold_rows, saved_registry

    house, env = named, dict(named.env)
    assert run_cli(["sql", "status"], env).returncode == 1  # no endpoint: local sessions
    kinds = Counter(r["event_type"] for r in delta_store.read_table(house.settings.layout.table("silver/clickstream"),
                                                                    columns=["event_type"]).to_pylist())
    changed = copy.deepcopy(raw)
    schema = changed["sources"]["clickstream"]["schema"]
    schema["action"] = {"type": schema.pop("event_type"), "renamed_from": "event_type"}
    schema["device"] = "string"
    changed["jobs"]["gold_order_payments"]["transform"]["where"] = "action = 'purchase'"
    saved_registry(changed, tmp_path / "jobs.yaml", env)
    evolved = run_cli(["run", "bronze_clickstream", "silver_clickstream"], env, timeout=600)
    assert evolved.returncode == 0, evolved.stderr[-3000:]
    columns = [c["col_name"] for c in query_in(env, "DESCRIBE TABLE silver.clickstream")]
    assert columns[:3] == ["event_id", "user_id", "action"] and "device" in columns, columns
    assert "event_type" not in columns
    assert refused(env, "DROP TABLE silver.clickstream").startswith("lakehouse query: read-only: DROP TABLE")

    def task(sql: str) -> CatalogSqlOperator:  # as in the data_quality DAG's gold_summary_by_name
        return CatalogSqlOperator(task_id="by_name", settings=house.settings, sql=sql)

    task("SELECT count(*) FROM gold.user_activity_5m").execute({})  # spark-sql exits 0: the name resolved

    windows = gold_rows(house.settings, "gold/user_activity_5m")
    # a driver on the catalog: gold's full refresh in it (as a backfill's driver applies one) ...
    driver = DriverOnTheCatalog(env, tmp_path, "gold_user_activity_5m", "gold_user_sessions")
    # one statement (a JVM start less): the rebuilt windows, and silver's rows by the renamed column
    counted = query_in(env, "SELECT action, count(*) AS n, (SELECT count(*) FROM gold.user_activity_5m) AS windows "
                            "FROM silver.clickstream GROUP BY action")
    assert {r["action"]: int(r["n"]) for r in counted} == kinds and sum(kinds.values()) > 0  # rows before it too
    assert windows and {int(r["windows"]) for r in counted} == {len(windows)} == {
        len(gold_rows(house.settings, "gold/user_activity_5m"))}

    assert run_cli(["catalog", "down"], env).stdout.startswith("catalog stopped")
    with pytest.raises(AirflowSkipException, match=f"no catalog answers at {house.uri}"):
        task("SELECT 1").execute({})
    log = driver.run_jobs()  # ... its metastore gone, it starts a query: one warning, the rows written
    assert "catalog: could not register gold.user_sessions" in log and "going on without" in log, log[-3000:]
    assert "Failed to connect to the MetaStore" not in log, log[-3000:]  # no Hive call waited for the dead metastore
    sessions = gold_rows(house.settings, "gold/user_sessions")
    assert sessions
    old_root = house.settings.root
    if old_root.is_local:
        moved = tmp_path / "moved" / "lakehouse"
        shutil.move(str(old_root), moved)  # the catalog's own files (Derby) move with it
    else:
        moved = house.settings.path(f"{old_root}-moved")
        old_root.move_to(moved)  # the catalog's own files are on this host (LAKEHOUSE_LOCAL_DIR)
    before, after = house.settings.layout, replace(house.settings, root=moved).layout
    env_moved = {**env, "LAKEHOUSE_ROOT": str(moved)}
    try:
        summaries = run_cli(["run", "gold_user_session_summaries"], env_moved, timeout=600)  # started without it
        assert summaries.returncode == 0, summaries.stderr[-3000:]
        assert f"no catalog answers at {house.uri} (LAKEHOUSE_METASTORE_URI): running without it" in summaries.stderr
        back = run_cli(["catalog", "up"], env_moved, timeout=300)
        assert back.returncode == 0, back.stderr[-2000:]
        changes = back.stdout.splitlines()[1:]
        for table in ("gold/user_sessions", "gold/user_session_summaries"):
            assert f"registered {catalog_name(table)} at {after.table(table).uri}" in changes, back.stdout
        recorded = before.table("gold/user_activity_5m").uri  # as Spark records it: a local path as a file: URI
        recorded = f"file:{recorded}" if old_root.is_local else recorded
        assert f"moved gold.user_activity_5m from {recorded} to {after.table('gold/user_activity_5m').uri}" \
            in changes, back.stdout
        assert all(c.startswith(("moved ", "registered gold.user_session")) for c in changes), back.stdout
        [counted] = query_in(env_moved, "SELECT (SELECT count(*) FROM gold.user_activity_5m) AS windows, "
                                        "(SELECT count(*) FROM gold.user_sessions) AS sessions")
        assert (counted["windows"], counted["sessions"]) == (len(windows), len(sessions))
    finally:
        run_cli(["catalog", "down"], env_moved)


class DriverOnTheCatalog:
    """tests/support/catalog_loss.py: a driver whose session is on the catalog, which applies a full refresh of
    `jobs[0]` on it (waited for here), then runs the others when told (`run_jobs`, after the test stopped the
    metastore); its log is returned."""

    def __init__(self, env: dict, tmp_path: Path, *jobs: str) -> None:
        import subprocess
        import sys

        from tests.support.helpers import REPO, wait_for

        self.out, self.log = tmp_path / "driver.out", tmp_path / "driver.log"
        with self.out.open("w") as out, self.log.open("w") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "tests.support.catalog_loss", *jobs], env=env,
                                            cwd=REPO, stdin=subprocess.PIPE, stdout=out, stderr=log, text=True)
        wait_for(lambda: "on the catalog" in self.out.read_text() or self.process.poll() is not None, timeout=600,
                 what="the driver's full refresh on the catalog")
        assert self.process.poll() is None, self.log.read_text()[-3000:]

    def run_jobs(self) -> str:
        self.process.communicate("go\n", timeout=600)
        log = self.log.read_text()
        assert self.process.returncode == 0, log[-3000:]
        return log


def query_in(env: dict, statement: str) -> list[dict]:
    result = run_cli(["query", "--format", "json", statement], env, timeout=600)
    assert result.returncode == 0, (statement, result.stderr[-3000:])
    return json.loads(result.stdout)
