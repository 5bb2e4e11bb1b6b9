"""CDC in the registry, without Spark: a `cdc:` source and `apply_changes` jobs by YAML alone, their output columns
and tables, every mistake named in one line, and what a change of them needs of the checkpoints."""

from __future__ import annotations

import copy

import pytest

from include.checkpoints.plan import fingerprint, plan_job
from include.registry import build_registry
from include.registry.cdc import ApplyChanges
from include.storage.paths import as_storage
from tests.support.helpers import problems_of

SCHEMA = {"id": "long", "name": "string", "email": "string", "country": "string", "updated_at": "timestamp"}


def with_cdc(raw: dict, **history) -> dict:
    raw = copy.deepcopy(raw)
    raw["sources"]["customers"] = {"cdc": {"database": "shop", "table": "public.customers", "keys": ["id"]},
                                   "schema": dict(SCHEMA)}
    raw["jobs"]["bronze_customers"] = {
        "source": {"cdc": "customers"}, "transform": {"kind": "parse_json"},
        "sink": {"table": "bronze/customers", "mode": "append", "quarantine_table": "bronze/customers_quarantine"}}
    raw["jobs"]["silver_customers"] = {
        "source": {"table": "bronze/customers"}, "transform": {"kind": "apply_changes", "keys": ["id"]},
        "sink": {"table": "silver/customers", "mode": "update"}}
    raw["jobs"]["silver_customers_history"] = {
        "source": {"table": "bronze/customers"},
        "transform": {"kind": "apply_changes", "keys": ["id"], "scd": 2, **history},
        "sink": {"table": "silver/customers_history", "mode": "update"}}
    return raw


def test_cdc_jobs_by_yaml_alone(raw, tmp_path):
    registry = build_registry(with_cdc(raw, track_history={"except": ["updated_at"]}), tmp_path / "jobs.yaml")
    bronze = registry.job("bronze_customers")
    assert bronze.source.kind == "kafka" and bronze.source.kafka.topics == ("shop.public.customers",)
    assert bronze.source.required == ("id",)  # a change without its key is quarantined
    assert {"_cdc_op", "_cdc_sequence", "_cdc_lsn", "_cdc_tx_id", "_cdc_commit_time", "_kafka_offset"} <= set(
        bronze.output_schema)
    type1, type2 = registry.job("silver_customers"), registry.job("silver_customers_history")
    assert isinstance(type1.transform, ApplyChanges) and type1.transform.scd == 1
    assert list(type1.output_schema) == [*SCHEMA, "_cdc_sequence", "_cdc_commit_time"]
    assert type1.tables_written() == ["silver/customers", "silver/customers_deletes"]
    assert registry.table_schemas["silver/customers_deletes"] == {"id": "long", "_cdc_sequence": "string",
                                                                  "_cdc_commit_time": "timestamp"}
    assert type2.transform.tracked == ("name", "email", "country")
    assert {"__start_at", "__end_at"} <= set(type2.output_schema) and type2.sink.merge_keys == ("id", "_cdc_sequence")
    assert not type1.stateful and not type2.stateful  # their state is their tables
    assert list(registry.cdc_sources()) == ["shop"]


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda r: r["sources"]["customers"]["cdc"].update(table="customers"),
     "source 'customers': cdc.table: must be `schema.table` in lower case (public.customers), got 'customers'"),
    (lambda r: r["sources"]["customers"]["cdc"].update(keys=["customer_id"]),
     "source 'customers': cdc.keys: 'customer_id' is not a column of the source's schema"),
    (lambda r: r["sources"]["customers"]["cdc"].update(database="Shop-1"),
     "source 'customers': cdc.database: must be a lower-case name"),
    (lambda r: r["sources"]["customers"].update(path="landing/customers"),
     "source 'customers': a CDC source reads its table's topic (<database>.<schema>.<table>): no 'path', no 'kafka'"),
    (lambda r: r["jobs"]["bronze_customers"].update(source={"kafka": "customers"}),
     "job 'bronze_customers': source.kafka: source 'customers' is a CDC source: name it with `cdc: customers`"),
    (lambda r: r["jobs"]["silver_customers"]["transform"].update(scd=3),
     "job 'silver_customers': transform.scd: 1 (the rows as they are now) or 2 (their history), got 3"),
    (lambda r: r["jobs"]["silver_customers"]["transform"].update(sequence_by="version"),
     "job 'silver_customers': transform.sequence_by: unknown column 'version'"),
    (lambda r: r["jobs"]["silver_customers"]["transform"].update(track_history=["name"]),
     "job 'silver_customers': transform.track_history: a type 1 table keeps no history (scd: 2 does)"),
    (lambda r: r["jobs"]["silver_customers_history"]["transform"].update(track_history=["phone"]),
     "job 'silver_customers_history': transform.track_history: 'phone' is not a data column of the source"),
    (lambda r: r["jobs"]["silver_customers"]["sink"].update(mode="append"),
     "job 'silver_customers': sink.mode: apply_changes upserts its table: mode update"),
    (lambda r: r["jobs"]["silver_customers"].update(source={"table": "silver/clickstream"}),
     "job 'silver_customers': source: 'silver/clickstream' lacks _cdc_op, _cdc_sequence"),
])
def test_cdc_mistakes_are_named(raw, edit, problem):
    document = with_cdc(raw)
    edit(document)
    assert any(problem in found for found in problems_of(document)), problems_of(document)


def test_a_column_added_to_the_database_table_evolves_a_key_or_scd_change_rebuilds(raw, tmp_path):
    document = with_cdc(raw, track_history={"except": ["updated_at"]})
    registry = build_registry(document, tmp_path / "a.yaml")
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    recorded = {j: fingerprint(registry.job(j), registry) for j in ("silver_customers", "silver_customers_history")}

    def plans(edit) -> dict[str, str]:
        changed = copy.deepcopy(document)
        edit(changed)
        again = build_registry(changed, tmp_path / "b.yaml")
        return {j: plan_job(again.job(j), again, checkpoint, recorded[j]).mode for j in recorded}

    checkpoint = as_storage(checkpoint)
    assert plans(lambda r: r["sources"]["customers"]["schema"].update(phone="string")) == {
        "silver_customers": "evolve", "silver_customers_history": "evolve"}
    assert plans(lambda r: r["jobs"]["silver_customers"]["transform"].update(keys=["email"]))["silver_customers"] \
        == "full-refresh"
    assert plans(lambda r: r["jobs"]["silver_customers_history"]["transform"].update(
        track_history=["name"]))["silver_customers_history"] == "full-refresh"
