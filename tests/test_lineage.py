"""Lineage from the registry (include/lineage): what each table is made from, down to its columns, and
`lakehouse lineage` (no process: the registry is the whole input); the OpenLineage events a run sends, read back
with OpenLineage's own client, through each transport (the demo's backfill's: tests/test_demo.py)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace

import pytest

from include.cli import main
from include.lineage.emitter import JobRun
from include.lineage.graph import ROWS, dataset_of, job_lineage, lineages, table_lineage
from tests.support.kafka import delete_topics
from tests.support.openlineage import parse, read_events

GOLD = "gold/user_activity_5m"
JOB = "gold_user_activity_5m"


def test_a_gold_table_names_its_upstream_tables_jobs_and_columns(registry):
    found = table_lineage(registry, GOLD)
    assert found["written_by"] == ["gold_user_activity_5m"] and found["catalog_name"] == "gold.user_activity_5m"
    assert [(e["from"], e["job"], e["to"]) for e in found["upstream"]] == [
        ("silver/clickstream", "gold_user_activity_5m", GOLD),
        ("bronze/clickstream", "silver_clickstream", "silver/clickstream"),
        ("landing/clickstream", "bronze_clickstream", "bronze/clickstream")]
    assert found["downstream"] == []
    assert {"silver/clickstream": "silver.clickstream", "bronze/clickstream": "bronze.clickstream"}.items() <= \
        found["catalog_names"].items()
    sources = {name: {(s["dataset"], s["column"], s["transformation"]) for s in said}
               for name, said in found["columns"].items()}
    assert sources == {
        "window_start": {("silver/clickstream", "event_time", "window")},
        "window_end": {("silver/clickstream", "event_time", "window")},
        "user_id": {("silver/clickstream", "user_id", "identity")},
        "event_count": {("silver/clickstream", ROWS, "aggregation")},  # a count of rows
        "total_value": {("silver/clickstream", "value", "aggregation")},
    }
    below = table_lineage(registry, "silver/clickstream")["downstream"]
    assert {e["job"] for e in below} >= {"gold_user_activity_5m", "gold_order_payments", "gold_user_sessions"}


def test_every_column_source_is_a_column_of_what_its_job_reads(registry):
    """For every job of the shipped registry: each source of each column is one of the job's inputs and a column of
    it (or its rows); every column of a sink without a source is one the product adds (`_...`) or a processor's."""
    for job_id, lineage in lineages(registry).items():
        job = registry.job(job_id)
        schemas = {dataset_of(s): registry.table_schemas[s.name] if s.kind == "delta" else s.schema for s in job.sources}
        assert all(d.startswith(("landing/", "kafka:")) or d in registry.table_schemas for d in schemas), schemas
        assert set(lineage.inputs) == set(schemas), job_id
        for table, columns in lineage.columns.items():
            for column, found in columns.items():
                for source in found.sources:
                    assert source.column == ROWS or source.column in schemas[source.dataset], (job_id, column)
            unexplained = [c for c in registry.table_schemas[table] if c not in columns and not c.startswith("_")]
            assert not unexplained, (job_id, table, unexplained)


def test_a_join_takes_each_column_from_its_side_and_an_scd_its_validity_from_the_change_order(registry):
    joined = job_lineage(registry, "gold_order_payments").columns["gold/order_payments"]
    assert {s.dataset for s in joined["payment_id"].sources} == {"silver/payments"}
    assert {s.dataset for s in joined["user_id"].sources} == {"silver/clickstream"}
    history = job_lineage(registry, "silver_customers_history").columns["silver/customers_history"]
    assert history["__start_at"].transformation == "scd"
    assert [(s.dataset, s.column) for s in history["__start_at"].sources] == [("bronze/customers", "_cdc_sequence")]
    deletes = job_lineage(registry, "silver_customers").columns["silver/customers_deletes"]
    assert set(deletes) == {"id"}


def test_the_command_answers_by_table_and_names_the_tables_it_knows(capsys):
    assert main(["lineage", GOLD, "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert {"table", "catalog_name", "written_by", "upstream", "downstream", "columns", "catalog_names"} <= set(said)
    assert main(["lineage", GOLD]) == 0
    text = capsys.readouterr().out
    assert "bronze/clickstream -> silver_clickstream -> silver/clickstream" in text
    assert "total_value" in text and "silver/clickstream.value (aggregation)" in text
    assert main(["lineage", "gold/nope"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("lakehouse lineage: no table 'gold/nope' in the registry; its tables: bronze/clickstream")
    assert error.count("\n") == 1


def _run(settings, registry, job_id: str, failure: BaseException | None = None) -> str:
    """One run of the job as the drivers report it (include/lineage/emitter.py JobRun: START, then its end)."""
    run = JobRun(settings, registry, job_id, live=False)
    run.end(registry, failure)
    return run.run_id


def test_a_runs_events_name_tables_as_the_catalog_does_with_their_schemas_and_columns_lineage(settings, registry):
    """LAKEHOUSE_LINEAGE=file: a run's START and COMPLETE (one run id), read back by OpenLineage's client: its
    input and output tables by their catalog names in the lakehouse's storage namespace, their schemas, the written
    table's columns' lineage; a failed run's FAIL carries its error, an interrupted one is an ABORT."""
    own = replace(settings, lineage="file")
    run_id = _run(own, registry, JOB)
    failed = _run(own, registry, "bronze_payments", RuntimeError("the broker went away"))
    aborted = _run(own, registry, "silver_clickstream", KeyboardInterrupt())
    events = read_events(own.local / "_lineage")
    assert [(e.run.runId, e.eventType.value) for e in events] == [
        (run_id, "START"), (run_id, "COMPLETE"), (failed, "START"), (failed, "FAIL"), (aborted, "START"),
        (aborted, "ABORT")]
    complete = events[1]
    namespace = f"file://{own.root}"
    assert (complete.job.namespace, complete.job.name) == ("lakehouse", JOB)
    assert [(d.namespace, d.name) for d in complete.inputs] == [(namespace, "silver.clickstream")]
    [output] = complete.outputs
    assert (output.namespace, output.name) == (namespace, "gold.user_activity_5m")
    assert [f.name for f in output.facets["schema"].fields] == list(registry.table_schemas[GOLD])
    lineage = output.facets["columnLineage"].fields
    [value] = lineage["total_value"].inputFields
    assert (value.name, value.field, value.transformations[0].subtype) == ("silver.clickstream", "value",
                                                                           "AGGREGATION")
    assert set(lineage) == {"window_start", "window_end", "user_id", "total_value"}  # a count of rows names none
    payments = events[3]
    assert [(d.namespace, d.name) for d in payments.inputs] == [(f"kafka://{own.kafka_bootstrap}", "payments")]
    said = [json.loads(line) for path in sorted((own.local / "_lineage").glob("*.jsonl"))
            for line in path.read_text().splitlines() if '"FAIL"' in line]
    assert said[0]["run"]["facets"]["errorMessage"]["message"] == "RuntimeError: the broker went away"


def test_a_driver_started_by_an_airflow_task_names_it_as_its_runs_parent():
    """OPENLINEAGE_PARENT_ID / OPENLINEAGE_ROOT_PARENT_ID (`namespace/job/run id`, as the operators pass the provider's
    ids: tests/test_demo.py checks them on the demo's run) become the `parent` facet; the root is the parent when not
    given; an id not of three parts is no parent."""
    from include.lineage.events import parent_facet

    task, dag = str(uuid.uuid4()), str(uuid.uuid4())
    facet = parent_facet({"OPENLINEAGE_PARENT_ID": f"default/lakehouse_backfill.run_jobs/{task}",
                          "OPENLINEAGE_ROOT_PARENT_ID": f"default/lakehouse_backfill/{dag}"})
    assert (facet.job.namespace, facet.job.name, facet.run.runId) == ("default", "lakehouse_backfill.run_jobs", task)
    assert (facet.root.job.name, facet.root.run.runId) == ("lakehouse_backfill", dag)
    alone = parent_facet({"OPENLINEAGE_PARENT_ID": f"team/nightly.load/{task}"})
    assert (alone.root.job.name, alone.root.run.runId) == ("nightly.load", task)
    assert parent_facet({"OPENLINEAGE_PARENT_ID": "default/only-two"}) is None and parent_facet({}) is None


def test_no_event_when_off_and_a_driver_without_its_broker_says_so_once_without_waiting(settings, registry, caplog):
    from include.daemons import free_port_block

    _run(replace(settings, lineage="off"), registry, JOB)
    assert not (settings.local / "_lineage").exists()
    nowhere = replace(settings, lineage="kafka", kafka_bootstrap=f"127.0.0.1:{free_port_block([0])}")
    started = time.monotonic()
    for _ in range(3):
        _run(nowhere, registry, JOB)
    assert time.monotonic() - started < 10  # one broker check (2 s) for the process, no wait per event
    assert sum("OpenLineage events are not sent: no broker answers" in r.message for r in caplog.records) == 1


def test_events_reach_the_lineage_topic_on_the_products_broker(settings, registry, kafka_broker):
    """The default transport: the topic (made when missing) on the broker the Kafka sources use."""
    from confluent_kafka import Consumer

    topic = f"lineage-{uuid.uuid4().hex[:8]}"
    own = replace(settings, lineage="kafka", lineage_topic=topic, kafka_bootstrap=kafka_broker)
    run_id = _run(own, registry, JOB)
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        received = []
        deadline = time.monotonic() + 30
        while len(received) < 2 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                received.append(parse(message.value().decode()))
    finally:
        consumer.close()
        delete_topics(kafka_broker, [topic])
    assert [(e.run.runId, e.eventType.value) for e in received] == [(run_id, "START"), (run_id, "COMPLETE")]
    assert received[1].outputs[0].name == "gold.user_activity_5m"


def test_the_registrys_lineage_job_reads_the_default_topic_into_ops_lineage(registry):
    """`ops_lineage` ingests what the drivers send by default (the topic of LAKEHOUSE_LINEAGE_TOPIC's default) into the
    table the catalog names `ops.lineage`, last in a backfill (after every run it records); an event's nested parts
    kept whole as JSON (the demo's backfill fills it: tests/test_demo.py)."""
    from include.catalog_client.tables import catalog_name, named_tables
    from include.settings import SETTINGS, load_settings
    from tests.conftest import LINEAGE_TOPIC

    [default] = [s.default for s in SETTINGS if s.name == "LAKEHOUSE_LINEAGE_TOPIC"]
    job = registry.job("ops_lineage")
    assert job.source.kafka.topics == (default,) == (LINEAGE_TOPIC,)
    assert registry.order[-1] == "ops_lineage" and job.sink.table == "ops/lineage"
    assert {"ops.lineage", "ops.lineage_quarantine"} <= {t.name for t in named_tables(load_settings(), registry)}
    assert catalog_name(job.sink.table) == "ops.lineage"
    assert {c: t for c, t in job.output_schema.items() if t == "json"} == dict.fromkeys(
        ("job", "run", "inputs", "outputs"), "json")


def test_a_job_reading_the_lineage_topic_before_any_event_finds_it_made(settings, kafka_broker):
    """The drivers' events' topic is the product's own: a job reading it (ops_lineage's start, its checkpoint actions)
    makes it when missing, as a driver does before its first event (LAKEHOUSE_LINEAGE off, or a new broker); any other
    missing topic is still the registry's mistake."""
    from include.kafka.broker import BrokerError
    from include.kafka.offsets import require_topics
    from include.lineage.emitter import ensure_lineage_topic

    topic, other = f"lineage-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    own = replace(settings, lineage="off", lineage_topic=topic)
    try:
        ensure_lineage_topic(own, kafka_broker, (topic,))
        [partition] = require_topics(kafka_broker, (topic,))[topic]
        assert partition.latest == partition.earliest  # empty
        ensure_lineage_topic(own, kafka_broker, (other,))
        with pytest.raises(BrokerError, match=f"topic\\(s\\) {other} do not exist"):
            require_topics(kafka_broker, (other,))
    finally:
        delete_topics(kafka_broker, [topic])


@pytest.mark.airflow
def test_the_operators_tell_airflows_openlineage_provider_what_their_task_read_and_wrote(settings, registry,
                                                                                         lakehouse_root):
    """Through the provider's own extractor (it calls the operators' get_openlineage_facets_on_complete): a job's
    task its datasets as the drivers name them, a checkpoint action's the jobs it named, a quality task's tables with
    their checks' latest results as dataQualityAssertions."""
    from airflow.providers.openlineage.extractors.base import DefaultExtractor

    from include.airflow.operators import (
        CheckpointOperator,
        LakehouseSparkSubmitOperator,
        QualityCheckOperator,
    )
    from include.quality import run_quality
    from tests.support.quality_data import make_tables

    def lineage(operator):
        found = DefaultExtractor(operator).extract_on_complete(None)
        return [d.name for d in found.inputs], [d.name for d in found.outputs], found

    job = LakehouseSparkSubmitOperator(task_id="gold", job_id=JOB, trigger="available-now", settings=settings)
    read, written, found = lineage(job)
    assert (read, written) == (["silver.clickstream"], ["gold.user_activity_5m"])
    assert found.outputs[0].facets["columnLineage"].fields["total_value"].inputFields[0].field == "value"
    action = CheckpointOperator(task_id="reset", settings=settings)
    action.application_args = ["repartition", JOB, "--actor", "someone"]
    assert lineage(action)[:2] == (["silver.clickstream"], ["gold.user_activity_5m"])

    make_tables(settings, registry, lambda rows: rows.append(dict(rows[3])))  # a duplicate window
    run_quality(settings, registry, [GOLD])
    quality = QualityCheckOperator(task_id="quality", tables=[GOLD], writers={GOLD: [JOB]})
    read, written, found = lineage(quality)
    assert (read, written) == (["gold.user_activity_5m"], [])
    assertions = {a.assertion: a.success for a in found.inputs[0].inputFacets["dataQualityAssertions"].assertions}
    assert assertions["unique_windows"] is False and assertions["window_size"] is True
