"""`lakehouse demo` end to end, once per session (the `demo` fixture): the whole `lakehouse_backfill` DAG through
Airflow, a spark-submit per job, on every source. Its output, its gold tables against the oracle and its quality
reports read that one lakehouse; none of these tests changes its tables (the `data_quality` DAG on demand runs on a
copy of it: tests/test_browser.py)."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from include.quality import run_quality
from include.quality.suites import quality_tables
from include.storage import delta as delta_store
from tests.conftest import LINEAGE_TOPIC
from tests.support.helpers import REPO, arrival_order, gold_rows, run_cli
from tests.support.oracle import expected_gold
from tests.support.quality_data import recorded

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1500)]

SOURCES = {"clickstream": "bronze/clickstream", "payments": "bronze/payments", "logins": "bronze/logins",
           "service_logs": "bronze/service_logs"}


def succeeded(demo) -> None:
    assert demo.result.returncode == 0, demo.result.stderr[-3000:]


def test_demo_runs_the_backfill_through_airflow_and_prints_the_summary(demo, registry):
    from tests.support.airflow_dags import stored_xcom

    succeeded(demo)
    settings, result = demo.settings, demo.result
    assert "running lakehouse_backfill through Airflow" in result.stderr
    # every job ran in the one driver of `run_jobs`; each job's task only reported it
    assert stored_xcom("lakehouse_backfill", demo.run_id, "run_jobs") == {j: "finished" for j in registry.order}
    for task in ("bronze_clickstream", "gold_user_activity_5m", "quality_check"):  # progress as the run goes
        assert f"  started  {task}" in result.stderr and re.search(rf"  finished {task} in \d+\.\d s", result.stderr)
    assert re.search(r"lakehouse_backfill succeeded in \d+ s", result.stderr), result.stderr[-3000:]
    # what it prints is what a newcomer can act on: no JVM, SLF4J, hostname, Spark or Airflow chatter (in its log)
    noise = [line for line in result.stderr.splitlines() if re.search(
        r"SLF4J|WARNING: Using incubator|Your hostname|\bWARN [A-Z]\w+:| INFO airflow\.| WARNING airflow\.", line)]
    assert not noise, noise
    pool = run_cli(["airflow", "pools", "get", "lakehouse_spark", "-o", "json"], demo.env, timeout=120)
    assert pool.returncode == 0, pool.stdout + pool.stderr[-2000:]
    assert int(json.loads(pool.stdout)[0]["slots"]) == settings.spark_pool_slots, pool.stdout
    airflow_log = settings.layout.demo_log.read_text()
    assert "DagRun Finished: dag_id=lakehouse_backfill" in airflow_log and "state=success" in airflow_log
    # the catalog: started for the demo (none answered), every table named by its job's driver, stopped at the end
    uri = demo.env["LAKEHOUSE_METASTORE_URI"]
    assert f"catalog up at {uri}" in result.stderr and "(the demo started it)" in result.stderr, result.stderr[-3000:]
    for table in ("bronze/clickstream", "gold/user_activity_5m", "gold/user_session_summaries"):
        name = table.replace("/", ".")
        assert f"catalog: registered {name} at {settings.layout.table(table).uri}" in airflow_log, name
    for text in ("bronze/clickstream", "gold/user_activity_5m", "gold/user_activity_1h", "quarantined lines:",
                 "state rows", str(settings.root), "data quality gold/user_activity_5m: passed",
                 "data quality report: " + str(settings.layout.data_docs / "index.html"),
                 "pipeline-health report: " + str(settings.layout.health_report_index), "gold/alerts",
                 "data quality gold/alerts: passed", "data quality gold/user_running_totals: passed",
                 "data quality gold/user_session_summaries: passed"):
        assert text in result.stdout


def test_the_dag_run_equals_the_oracle_and_loses_no_line(demo, registry):
    succeeded(demo)
    settings = demo.settings
    landed = arrival_order(list(settings.layout.landing("landing/clickstream").iterdir()))
    expected = expected_gold(registry, [landed])
    assert expected and all(expected.values())
    for table, rows in expected.items():
        assert gold_rows(settings, table) == rows, table
    for source, table in SOURCES.items():  # bronze + quarantine == lines landed (messages produced), per source
        lines = demo.messages.get(source) or sum(
            len(f.read_bytes().splitlines()) for f in settings.layout.landing(f"landing/{source}").iterdir())
        assert delta_store.count_rows(settings.layout.table(table)) + delta_store.count_rows(
            settings.layout.table(f"{table}_quarantine")) == lines, source
    validated = delta_store.read_table(settings.layout.ops_table("dq_results")).to_pylist()
    assert {r["table"] for r in validated} == set(quality_tables(registry)) and all(r["success"] for r in validated)


def test_the_quality_task_links_this_runs_report(demo, registry):
    from tests.support.airflow_dags import report_link

    succeeded(demo)
    data_docs = demo.settings.layout.data_docs
    link = report_link("lakehouse_backfill", demo.run_id, "quality_check")
    assert link.startswith("/lakehouse-data-docs/lakehouse_runs/"), link
    page = (data_docs / link.removeprefix("/lakehouse-data-docs/")).read_text()
    assert all(f"{table}: <span class=\"ok\">passed</span>" in page for table in quality_tables(registry)), page
    for href in re.findall(r'href="\.\./([^"]+)"', page):
        assert (data_docs / href).is_file(), href


def test_every_gold_table_passes_its_suite_with_a_page_per_result(demo, registry):
    succeeded(demo)
    settings = demo.settings
    config_before = (REPO / "include" / "gx" / "great_expectations.yml").read_bytes()
    report = run_quality(settings, registry, full=True)
    assert not report.failed(), report.render()
    specs = quality_tables(registry)  # windows, sessions, joins (tests/test_quality_kinds.py has their defects)
    assert {r.table for r in report.results} == set(specs)
    for table, spec in specs.items():
        assert {r.expectation for r in report.results if r.table == table} == {c.name for c in spec.checks}
    for table in ("gold/user_activity_5m", "gold/user_activity_1h", "gold/user_sessions"):
        reconciliation = next(r for r in report.results if r.table == table and r.expectation == "reconciliation")
        observed = json.loads(reconciliation.observed_value)
        # backfill: gold equals the distinct silver events of every finalized window, exactly
        assert observed["gold_events"] == observed["source_events"] > 0
        assert observed.get("finalized_windows", observed.get("finalized_sessions")) > 0
        assert observed["watermark_source"] == "checkpoint"
    assert report.docs_index == settings.layout.data_docs / "index.html" and report.docs_index.exists()
    # each table's validation results (a gold table's row and table suites, bronze's row suite) have a page; the
    # run's page links them
    assert all(len(report.pages[t]) == len({c.scope for c in spec.checks}) and all(
        (settings.layout.data_docs / p).is_file() for p in report.pages[t]) for t, spec in specs.items()), report.pages
    assert {t for t, spec in specs.items() if len(report.pages[t]) == 1} == {
        "bronze/clickstream", "bronze/payments", "bronze/logins", "bronze/service_logs", "bronze/customers",
        "bronze/orders", "ops/lineage"}
    assert report.report_page() == report.run_page and (settings.layout.data_docs / report.run_page).is_file()
    rows = recorded(settings, report.run_id)
    assert len(rows) == len(report.results) and all(r["success"] for r in rows)
    assert {r["engine"] for r in rows} == {"pandas"}
    # the GE project in the repo is untouched; its stores live under LAKEHOUSE_ROOT
    assert [p.name for p in (REPO / "include" / "gx").iterdir()] == ["great_expectations.yml"]
    assert (REPO / "include" / "gx" / "great_expectations.yml").read_bytes() == config_before


def test_the_health_report_draws_only_what_each_job_measured(demo, registry):
    """The backfill's report: no state or watermark charts for a stateless job, no rates for available-now runs,
    watermark delays from the first real watermark (never the epoch); `lakehouse health` prints the same status."""
    succeeded(demo)
    settings = demo.settings
    data = json.loads((settings.layout.health_report / "health.json").read_text())
    assert set(data) == set(registry.order)
    for job_id, job in registry.jobs.items():
        charts = data[job_id]["charts"]
        assert data[job_id]["batches"] > 0 and data[job_id]["status"] != "not run yet", job_id
        assert ("state rows" in charts) == job.stateful, (job_id, list(charts))
        assert "rows / s" not in charts, job_id  # available-now runs measure no rates
        assert "batch duration (s)" in charts
        for delay in charts.get("watermark delay (s)", {}).get("watermark delay", []):
            assert delay is None or 0 <= delay < 10 * 365 * 86400, (job_id, delay)  # not "now - 1970"
    assert "watermark delay (s)" not in data["bronze_clickstream"]["charts"]
    assert "watermark delay (s)" in data["gold_user_activity_5m"]["charts"]
    printed = run_cli(["health"], demo.env, timeout=120)
    assert printed.returncode == 0, printed.stderr[-2000:]
    lines = {line.split()[0]: line for line in printed.stdout.splitlines()[1:] if line.strip()}
    for job_id in registry.order:
        assert f" {data[job_id]['batches']} " in lines[job_id] and data[job_id]["status"] in lines[job_id]


@pytest.mark.s3
@pytest.mark.full  # make test: the chain on S3 equals the oracle, with quality and reports (tests/test_s3.py), and
# the demo's S3 server started only when none answers (tests/test_storage.py)
def test_the_demo_on_s3_starts_its_store_and_equals_the_local_demo(demo, registry, s3_server, kafka_broker, tmp_path):
    """`lakehouse demo` on an S3 root whose endpoint nothing answers yet: it starts the S3 server, runs every job (one
    driver, --direct), Great Expectations and the reports on the bucket, stops the server it started; its summary
    equals the local demo's on the same seed (rows, quarantine, state, quality), only the locations differ."""
    from dataclasses import replace

    from include.settings import load_settings
    from include.summary import summarize
    from tests.support.kafka import delete_topics
    from tests.support.s3 import free_s3_port

    succeeded(demo)
    # the demo produces its payments and its shop's changes again, on empty topics
    delete_topics(kafka_broker, ["payments", *(s.cdc.topic for c in registry.cdc_sources().values() for s in c)])
    endpoint = f"http://127.0.0.1:{free_s3_port()}"
    env = {**demo.env, "LAKEHOUSE_ROOT": "s3://lakehouse-demo/demo", "LAKEHOUSE_S3_ENDPOINT": endpoint,
           "LAKEHOUSE_LOCAL_DIR": str(tmp_path / "local"), "LAKEHOUSE_LINEAGE": "off"}  # the topic: the local demo's
    result = run_cli(["demo", "--events", "1500", "--files", "3", "--seed", "51", "--direct"], env, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"S3 server up at {endpoint}" in result.stderr and "S3 server stopped" in result.stderr, result.stderr
    s3 = replace(load_settings(), root=env["LAKEHOUSE_ROOT"], local_dir=tmp_path / "local",
                 s3=replace(load_settings().s3, endpoint=endpoint))
    up = run_cli(["storage", "up"], env, timeout=120)  # the demo stopped its server: its data stays
    try:
        assert up.returncode == 0, up.stderr
        local, on_s3 = summarize(demo.settings, registry), summarize(s3, registry)
        # ops/lineage: a row per run event on the topic (the local demo's; the local one's own START may come before
        # or after its read of the topic)
        assert [(t.table, t.rows, t.writer) for t in on_s3.tables if t.table != "ops/lineage"] == [
            (t.table, t.rows, t.writer) for t in local.tables if t.table != "ops/lineage"]
        assert all(t.path.startswith("s3a://lakehouse-demo/demo/") for t in on_s3.tables)
        assert (on_s3.state_rows, on_s3.quarantine_reasons) == (local.state_rows, local.quarantine_reasons)
        assert on_s3.quality == local.quality and all(not failed for _, failed in on_s3.quality.values())
        assert (s3.layout.data_docs / "index.html").is_file() and s3.layout.health_report_index.is_file()
        assert f"data quality report: {s3.layout.data_docs / 'index.html'}" in result.stdout
    finally:
        run_cli(["storage", "down"], env, timeout=120)


def test_airflow_history_older_than_its_days_is_deleted_with_its_logs(demo, tmp_path):
    """`lakehouse airflow-history` on a copy of the session's Airflow (SQLite, after the demo): the demo's
    `lakehouse_backfill` run backdated forty days, with its task logs, is kept at LAKEHOUSE_AIRFLOW_HISTORY_DAYS=50
    and deleted at 30 with its task instances and log folders; the other runs and a newer log stay."""
    import os
    import sqlite3
    import time
    from pathlib import Path

    succeeded(demo)
    source, home = Path(os.environ["AIRFLOW_HOME"]), tmp_path / "airflow"
    home.mkdir()
    with sqlite3.connect(source / "airflow.db") as live, sqlite3.connect(home / "airflow.db") as copy:
        live.backup(copy)
    # `dags test` ran the tasks in its own process, logging to its output: the run's task logs are laid out here as
    # the executor writes them (the cluster's test deletes the ones its executor wrote)
    run_logs = home / "logs" / "dag_id=lakehouse_backfill" / f"run_id={demo.run_id}"
    forty_days_ago = time.time() - 40 * 86400
    with sqlite3.connect(home / "airflow.db") as db:
        task_ids = [r[0] for r in db.execute("SELECT task_id FROM task_instance WHERE run_id = ?", (demo.run_id,))]
    for task_id in task_ids:
        path = run_logs / f"task_id={task_id}" / "attempt=1.log"
        path.parent.mkdir(parents=True)
        path.write_text(f"{task_id}'s log")
        os.utime(path, (forty_days_ago, forty_days_ago))
    newer = home / "logs" / "dag_id=lakehouse_live" / "run_id=scheduled__now" / "task_id=check" / "attempt=1.log"
    newer.parent.mkdir(parents=True)
    newer.write_text("a newer run's log")

    def runs() -> tuple[int, int, int]:
        """(the demo run's rows, its task instances, other runs)"""
        with sqlite3.connect(home / "airflow.db") as db:
            return tuple(db.execute(sql, (demo.run_id,)).fetchone()[0] for sql in (
                "SELECT count(*) FROM dag_run WHERE run_id = ?", "SELECT count(*) FROM task_instance WHERE run_id = ?",
                "SELECT count(*) FROM dag_run WHERE run_id != ?"))

    with sqlite3.connect(home / "airflow.db") as db:
        for table in ("dag_run", "task_instance"):
            db.execute(f"UPDATE {table} SET start_date = strftime('%Y-%m-%d %H:%M:%f', start_date, '-40 days') "  # noqa: S608
                       "WHERE run_id = ?", (demo.run_id,))
    demo_run, tasks, others = runs()
    assert demo_run == 1 and tasks >= 4, (demo_run, tasks)
    logs = len(list(run_logs.rglob("*.log")))
    env = {**demo.env, "AIRFLOW_HOME": str(home), "LAKEHOUSE_AIRFLOW_HISTORY_DAYS": "50"}
    kept = run_cli(["airflow-history"], env)
    assert kept.returncode == 0 and "0 log files" in kept.stdout, kept.stdout + kept.stderr[-3000:]
    assert runs() == (1, tasks, others) and len(list(run_logs.rglob("*.log"))) == logs

    cleaned = run_cli(["airflow-history"], {**env, "LAKEHOUSE_AIRFLOW_HISTORY_DAYS": "30"})
    assert cleaned.returncode == 0 and f" {logs} log files" in cleaned.stdout, cleaned.stdout + cleaned.stderr[-3000:]
    assert runs() == (0, 0, others)
    assert not run_logs.exists() and newer.read_text() == "a newer run's log"


def test_the_metrics_endpoint_says_what_the_backfill_recorded(demo, registry):
    """`lakehouse metrics --serve` on the demo's lakehouse, scraped over HTTP: per job its batches and input rows as
    `_ops/query_progress` holds them and 0 up (nothing runs); per table its last commit and version as its Delta log
    says (`gold/user_activity_5m` as the registry names it); a second endpoint on the taken port is one line, exit 2;
    Ctrl-C ends the first cleanly."""
    import signal
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from include.daemons import free_port_block
    from include.ops.health import last_batches
    from include.ops.health_report import progress_by_job
    from tests.support.helpers import LAKEHOUSE, signal_group_when

    succeeded(demo)
    env = {**demo.env, "LAKEHOUSE_METRICS_PORT": str(free_port_block([0]))}
    scraped: dict = {}

    def scrape() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{env['LAKEHOUSE_METRICS_PORT']}/metrics", timeout=30) as r:
                scraped["text"] = r.read().decode()
        except OSError:
            return False
        scraped["again"] = run_cli(["metrics", "--serve"], env, timeout=120)
        return True

    code, output = signal_group_when(LAKEHOUSE + ["metrics", "--serve"], env, scrape, signal.SIGINT, "/metrics")
    assert code == 0 and "Traceback" not in output, output[-2000:]
    again = scraped["again"]
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "LAKEHOUSE_METRICS_PORT" in again.stderr
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for family in text_string_to_metric_families(scraped["text"]) for s in family.samples}
    progress = progress_by_job(demo.settings)
    for job_id, job in registry.jobs.items():
        rows = progress[job_id]
        label = (("job", job_id),)
        assert found[("lakehouse_job_up", label)] == 0.0
        assert found[("lakehouse_job_batches_total", label)] == len(rows) > 0, job_id
        assert found[("lakehouse_job_input_rows_total", label)] == sum(r["num_input_rows"] or 0 for r in rows), job_id
        assert found[("lakehouse_job_last_batch_duration_seconds", label)] == rows[-1]["batch_duration_ms"] / 1000
        assert last_batches(rows, rows[-1]["query_id"], 1) == [rows[-1]]
        durations = [r["batch_duration_ms"] / 1000 for r in rows]
        assert found[("lakehouse_job_batch_duration_seconds_count", label)] == len(rows)
        assert found[("lakehouse_job_batch_duration_seconds_sum", label)] == pytest.approx(sum(durations))
        assert found[("lakehouse_job_batch_duration_seconds_bucket", label + (("le", "10.0"),))] == \
            sum(1 for d in durations if d <= 10)
        if job.stateful:
            assert found[("lakehouse_job_state_rows", label)] == rows[-1]["state_rows_total"], job_id
            assert sum(v for k, v in found.items() if k[0] == "lakehouse_job_operator_state_rows"
                       and dict(k[1])["job"] == job_id) == rows[-1]["state_rows_total"], job_id
        for table in job.tables_written():
            path = demo.settings.layout.table(table)
            if not delta_store.table_exists(path):  # a quarantine table no bad line made
                assert ("lakehouse_table_version", (("table", table),)) not in found
                continue
            last = delta_store.open_table(path).history(1)[0]
            assert found[("lakehouse_table_version", (("table", table),))] == last["version"], table
            assert found[("lakehouse_table_last_commit_timestamp_seconds", (("table", table),))] == \
                last["timestamp"] / 1000, table
            assert found[("lakehouse_table_rows", (("table", table),))] == delta_store.count_rows(path), table
            assert found[("lakehouse_table_files", (("table", table),))] == len(delta_store.open_table(path).file_uris())
            if table == job.sink.quarantine_table:
                assert found[("lakehouse_job_quarantined_rows_total", label)] == delta_store.count_rows(path)
            if job.sink.mode == "append":  # what its writers' batches wrote (the ledger's rows_written) is all it holds
                assert sum(found[("lakehouse_job_output_rows_total", (("job", w.id), ("table", table)))]
                           for w in registry.writers_of(table)) == delta_store.count_rows(path), table
    # a Kafka-fed job's lag, when its broker answers at the scrape: the backfill read every payment (the change data
    # capture may have published more changes of the shop since)
    lags = {dict(k[1])["job"]: v for k, v in found.items() if k[0] == "lakehouse_kafka_lag_messages"}
    assert lags.get("bronze_payments", 0) == 0 and all(v >= 0 for v in lags.values()), lags
    assert ("lakehouse_table_last_commit_timestamp_seconds", (("table", "gold/user_activity_5m"),)) in found
    for table, spec in quality_tables(registry).items():  # the demo's quality run: every suite passes
        assert found[("lakehouse_quality_failing_checks", (("severity", "blocking"), ("table", table)))] == 0, table
        checks = {dict(k[1])["check"] for k in found if k[0] == "lakehouse_quality_check_success"
                  and dict(k[1])["table"] == table}
        assert checks == {c.name for c in spec.checks}, table


def test_the_backfill_sent_a_run_per_job_to_the_lineage_topic_that_openlineages_client_reads(demo, registry,
                                                                                             kafka_broker):
    """The demo's drivers, on the default transport (the topic on the broker the Kafka sources use): per job of the
    registry one run, its START and its COMPLETE, read back with OpenLineage's Python client; each with the tables it
    reads and writes by their catalog names, and gold/user_activity_5m's columns' lineage."""
    from confluent_kafka import Consumer

    from include.catalog_client.tables import catalog_name
    from include.lineage.graph import job_lineage
    from tests.support.openlineage import parse

    succeeded(demo)
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": f"demo-lineage-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    events, deadline = [], time.monotonic() + 60
    try:
        consumer.subscribe([LINEAGE_TOPIC])
        while len(events) < 2 * len(registry.jobs) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                events.append(parse(message.value().decode()))
    finally:
        consumer.close()

    def named(dataset: str) -> str:  # a landing directory by its path, a topic by its name, a table as the catalog
        return dataset.removeprefix("kafka:") if dataset.startswith(("kafka:", "landing/")) else catalog_name(dataset)

    runs: dict[str, list] = {}
    for event in events:
        runs.setdefault(event.run.runId, []).append(event)
    ran = sorted(run[0].job.name for run in runs.values())
    assert ran == sorted(registry.jobs), ran  # one run per job
    for run in runs.values():
        assert [e.eventType.value for e in run] == ["START", "COMPLETE"], run
        lineage = job_lineage(registry, run[0].job.name)
        tables = [catalog_name(t) for t in lineage.outputs]
        assert [d.name for d in run[1].outputs] == tables
        assert [d.name for d in run[1].inputs] == [named(d) for d in lineage.inputs]
    # each names the Airflow task that ran it (`run_jobs`) as its parent, and the DAG run as its root, by the ids Airflow's
    # OpenLineage provider gives them
    from airflow.models.dagrun import DagRun
    from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        dag_run = session.scalar(select(DagRun).where(DagRun.run_id == demo.run_id))
        when, clear_number = dag_run.logical_date or dag_run.run_after, dag_run.clear_number
    task_run = OpenLineageAdapter.build_task_instance_run_id("lakehouse_backfill", "run_jobs", 1, when, -1)
    dag_run_id = OpenLineageAdapter.build_dag_run_id("lakehouse_backfill", when, clear_number)
    for event in events:
        parent = event.run.facets["parent"]
        assert (parent.job.name, parent.run.runId, parent.root.job.name, parent.root.run.runId) == (
            "lakehouse_backfill.run_jobs", task_run, "lakehouse_backfill", dag_run_id), event.job.name
    [gold] = [r[1] for r in runs.values() if r[0].job.name == "gold_user_activity_5m"]
    assert [d.name for d in gold.inputs] == ["silver.clickstream"]
    fields = gold.outputs[0].facets["columnLineage"].fields
    assert [(f.name, f.field) for f in fields["total_value"].inputFields] == [("silver.clickstream", "value")]

# What wrote a table, from what, which columns: ops.lineage as docs/operations/lineage.md asks it
WRITERS_OF = """
SELECT get_json_object(job, '$.name') AS job,
       transform(from_json(inputs, 'array<struct<name: string>>'), d -> d.name) AS reads,
       from_json(get_json_object(outputs, '$[0].facets.columnLineage.fields'),
                 'map<string, struct<inputFields: array<struct<name: string, field: string>>>>') AS columns
FROM ops.lineage
WHERE eventType = 'COMPLETE' AND get_json_object(outputs, '$[0].name') = '{table}'
"""


def test_ops_lineage_answers_what_wrote_a_gold_table_from_what_and_which_columns(demo, registry, spark):
    """The registry's ops_lineage ran last in the backfill and ingested every other job's run from the lineage topic:
    SQL on it walks gold.user_activity_5m up to silver.clickstream and bronze.clickstream, with the columns."""
    succeeded(demo)
    lineage, quarantine = (demo.settings.layout.table(t) for t in ("ops/lineage", "ops/lineage_quarantine"))
    spark.read.format("delta").load(lineage.uri).createOrReplaceTempView("ops_lineage_demo")
    assert delta_store.count_rows(quarantine) == 0  # every message an event

    def writers(table: str) -> list:
        return spark.sql(WRITERS_OF.format(table=table).replace("ops.lineage", "ops_lineage_demo")).collect()

    [gold] = writers("gold.user_activity_5m")
    assert (gold.job, gold.reads) == ("gold_user_activity_5m", ["silver.clickstream"])
    assert [(f.name, f.field) for f in gold.columns["total_value"].inputFields] == [("silver.clickstream", "value")]
    [silver] = writers("silver.clickstream")
    assert (silver.job, silver.reads) == ("silver_clickstream", ["bronze.clickstream"])
    completed = spark.sql("SELECT DISTINCT get_json_object(job, '$.name') AS job FROM ops_lineage_demo "
                          "WHERE eventType = 'COMPLETE'").collect()
    assert sorted(r.job for r in completed) == sorted(registry.order[:-1])  # every run before its own
