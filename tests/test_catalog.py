"""The catalog: `lakehouse catalog up | down | status | sync` runs a Hive metastore from pyspark's jars; every job
names its tables in it when it starts; jobs run while it is down, and `catalog sync` names their tables afterwards.
Spark sessions on the catalog read every table by name."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from include.catalog.metastore import MetastoreFiles, hive_site
from include.catalog.tables import catalog_name, named_tables
from include.cluster.daemons import free_port_block
from include.settings import load_settings
from tests.support.helpers import REPO, arrival_order, generate, run_cli
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


@pytest.mark.parametrize("uri", ["http://127.0.0.1:9083", "thrift://127.0.0.1", "thrift://:9083", "9083"])
def test_a_bad_metastore_uri_is_named(monkeypatch, uri):
    monkeypatch.setenv("LAKEHOUSE_METASTORE_URI", uri)
    with pytest.raises(ValueError, match="LAKEHOUSE_METASTORE_URI must be thrift://host:port"):
        load_settings()


def test_the_metastore_keeps_derby_beside_it_and_logs_synchronously(tmp_path, settings):
    site = hive_site(MetastoreFiles(tmp_path), settings)
    assert f"jdbc:derby:;databaseName={tmp_path / 'metastore_db'};create=true" in site
    assert "<name>hive.async.log.enabled</name><value>false</value>" in site  # else the JVM dies (no LMAX disruptor)


READ_BY_NAME = """
import json, sys
from include.settings import load_settings
from include.spark_session import get_spark
spark = get_spark(load_settings(), app_name="catalog-reader")
out = {"catalog": spark.conf.get("spark.sql.catalogImplementation"), "tables": {}}
for database in sys.argv[1:]:
    out["tables"][database] = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {database}").collect())
out["gold"] = sorted([int(r.window_start.timestamp()), int(r.window_end.timestamp()), r.user_id, r.event_count,
                      r.total_value] for r in spark.table("gold.user_activity_5m").collect())
out["bronze"] = spark.table("bronze.clickstream").count() + spark.table("bronze.clickstream_quarantine").count()
out["columns"] = [r.col_name for r in spark.sql("DESCRIBE TABLE silver.clickstream").collect()]
print(json.dumps(out))
"""


def read_by_name(env: dict, *databases: str) -> dict:
    """What a Spark session on the catalog (another driver) reads by name."""
    result = subprocess.run([sys.executable, "-c", READ_BY_NAME, *databases], env=env, cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.spark
@pytest.mark.slow
def test_jobs_name_their_tables_and_readers_read_them_by_name_and_a_catalog_down_is_caught_up(
        settings, registry, lakehouse_env):
    port = free_port_block([0])
    uri = f"thrift://127.0.0.1:{port}"
    env = {**lakehouse_env, "LAKEHOUSE_METASTORE_URI": uri}
    down_first = run_cli(["catalog", "status", "--json"], env)
    assert down_first.returncode == 1 and json.loads(down_first.stdout)["up"] is False
    sync_down = run_cli(["catalog", "sync"], env)
    assert sync_down.returncode == 1 and f"no metastore answers at 127.0.0.1:{port}" in sync_down.stderr
    try:
        up = run_cli(["catalog", "up"], env, timeout=300)
        assert up.returncode == 0 and up.stdout.strip().splitlines()[0] == uri, up.stderr[-2000:]
        again = run_cli(["catalog", "up"], env)
        assert again.returncode == 0 and f"a metastore already answers at {uri}" in again.stderr
        status = json.loads(run_cli(["catalog", "status", "--json"], env).stdout)
        assert status["up"] and status["backend"] == "derby" and "default" in status["databases"], status
        assert status["warehouse"] == (settings.layout.catalog / "warehouse").as_uri()

        landed = generate(settings, events=600, seed=81, files=2)
        run = run_cli(["run", *LINEAGE], env, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        seen = read_by_name(env, "bronze", "silver", "gold", "ops")
        assert seen["catalog"] == "hive"
        assert seen["tables"] == {"bronze": ["clickstream", "clickstream_quarantine"], "silver": ["clickstream"],
                                  "gold": ["user_activity_5m"], "ops": ["batch_ledger", "query_progress"]}, seen
        assert seen["bronze"] == sum(len(p.read_text().splitlines()) for p in landed.files)
        oracle = expected_gold(registry, [arrival_order(landed.files)])["gold/user_activity_5m"]
        assert oracle and seen["gold"] == sorted([*key, *value] for key, value in oracle.items())
        assert seen["columns"][:2] == list(registry.job("silver_clickstream").output_schema)[:2]  # the Delta log's

        # The catalog down: a job runs (one warning), and `catalog sync` names its tables once it is back.
        assert run_cli(["catalog", "down"], env).stdout.startswith("catalog stopped")
        sessions = run_cli(["run", "gold_user_sessions"], env, timeout=600)
        assert sessions.returncode == 0, sessions.stderr[-3000:]
        assert f"no catalog answers at {uri} (LAKEHOUSE_METASTORE_URI): running without it" in sessions.stderr
        back = run_cli(["catalog", "up"], env, timeout=300)
        assert back.returncode == 0, back.stderr[-2000:]
        # its sync names the new table, and only it: the others are right already (idempotent)
        assert back.stdout.splitlines()[1:] == [
            f"registered gold.user_sessions at {settings.layout.table('gold/user_sessions').uri}"], back.stdout
    finally:
        stopped = run_cli(["catalog", "down"], env)
        assert stopped.returncode == 0
    status = run_cli(["catalog", "status"], env)
    assert status.returncode == 1 and f"no catalog answers at {uri}" in status.stdout


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

