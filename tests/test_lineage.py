"""Lineage from the registry (include/lineage): what each table is made from, down to its columns, and
`lakehouse lineage`. No process: the registry is the whole input."""

from __future__ import annotations

import json

from include.cli import main
from include.lineage.graph import ROWS, dataset_of, job_lineage, lineages, table_lineage

GOLD = "gold/user_activity_5m"


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
