"""Schema changes without reprocessing: a producer's new field is rescued in bronze until the registry names it, then
the plan is `evolve`, the starts add the column, a reading query restarts itself on the new schema, and nothing is
read twice; changes that are not additive stay `full-refresh`, each with its reason."""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
import yaml

from include import checkpoints
from include.checkpoints.plan import fingerprint, plan_job, write_fingerprint
from include.generator import DEFAULT_START
from include.quality import run_quality
from include.records import checkpoint_audit
from include.records.heartbeats import read_heartbeat
from include.registry import Trigger, build_registry
from include.storage import delta as delta_store
from spark_jobs.rescued_backfill import backfill
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, generate, gold_rows, run_cli, saved_registry, wait_until_read
from tests.support.oracle import expected_gold

AVAILABLE_NOW = Trigger(available_now=True)
LINEAGE = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")
CHAIN = ("bronze_clickstream", "silver_clickstream")
GROUP_NAME = "clickstream"  # tests/test_groups.py's group
WIDE = 2**31  # a rank beyond int's range
PRICEY = 10**11  # a price beyond decimal(10,2)


def with_field(raw: dict, name: str = "device", ctype: str = "string") -> dict:
    changed = copy.deepcopy(raw)
    changed["sources"]["clickstream"]["schema"][name] = ctype
    return changed


def recorded_checkpoint(settings, registry, job_id: str, output_schema: dict | None = None):
    """A checkpoint as a run leaves it, its fingerprint recorded from `registry` (its output schema replaced)."""
    checkpoint = settings.layout.checkpoint(job_id)
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{}')
    print_ = fingerprint(registry.job(job_id), registry)
    if output_schema is not None:
        print_["output_schema"] = output_schema
    write_fingerprint(checkpoint, print_)
    return checkpoint


def plans(settings, registry, jobs=None) -> dict:
    return {j: plan_job(registry.job(j), registry, settings.layout.checkpoint(j)) for j in jobs or registry.order}


def evolution_state(settings, registry, jobs, driver: int) -> str:
    """Each job's plan and heartbeat, where the driver's threads are, and its own log lines (not Spark's): what a
    failed wait says."""
    from tests.support.groups import driver_stacks

    stacks = driver_stacks(settings, driver)
    states = {j: (p.mode, (read_heartbeat(settings, j) or {}).get("status"))
              for j, p in plans(settings, registry, jobs).items()}
    path = settings.layout.job_log(GROUP_NAME)
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    own = [line[:240] for line in lines if re.match(r"\S+ \S+ (INFO|WARNING|ERROR) (spark_jobs|include|lakehouse)", line)]
    return "\n".join([f"plans and heartbeats {states}; the driver's threads:", *stacks, "its last lines:", *own[-25:]])


# --- plans (no Spark) -------------------------------------------------------------------------------

def test_an_added_nullable_column_evolves_and_every_other_change_does_not(settings, raw):
    with_device = with_field(with_field(raw), "seq", "long")
    base = build_registry(with_device)
    for job_id in base.order:
        recorded_checkpoint(settings, base, job_id)
    assert {p.mode for p in plans(settings, base).values()} == {"resume"}

    added = build_registry(with_field(with_device, "os"))
    evolving = plans(settings, added)
    assert {j for j, p in evolving.items() if p.mode == "evolve"} == set(CHAIN)
    assert {p.mode for j, p in evolving.items() if j not in CHAIN} == {"resume"}  # gold reads no new column
    bronze = evolving["bronze_clickstream"]
    assert bronze.startable and bronze.command == "" and bronze.downstream == ()
    assert "nullable column os added" in bronze.render() and "next start" in bronze.render()

    def mode_and_reason(change) -> tuple[str, str]:
        changed = copy.deepcopy(with_device)
        change(changed)
        plan = plans(settings, build_registry(changed), ["bronze_clickstream", "silver_clickstream"])
        return plan["bronze_clickstream"].mode, plan["silver_clickstream"].render()

    def rename(r, declared: bool = True):
        schema = r["sources"]["clickstream"]["schema"]
        schema["platform"] = {"type": schema.pop("device"), "renamed_from": "device"} if declared else schema.pop("device")

    mode, text = mode_and_reason(rename)
    assert mode == "evolve" and "device renamed to platform in place" in text and "column mapping" in text
    assert "delta-rs" in text and "schema tracking location" in text  # who reads it, and how
    mode, text = mode_and_reason(lambda r: rename(r, declared=False))  # a rename not declared: a drop and an add
    assert mode == "evolve" and "column device dropped in place" in text and "nullable column platform added" in text
    assert "declare `platform: {type: string, renamed_from: device}` to keep its values" in text
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].pop("device"))
    assert mode == "evolve" and "column device dropped in place" in text and "column mapping" in text
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].update(device="int"))
    assert mode == "full-refresh" and "device string -> int" in text  # text does not fit a number
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].update(seq="int"))
    assert mode == "full-refresh" and "seq long -> int" in text  # narrowing
    widened = copy.deepcopy(with_device)
    widened["sources"]["clickstream"]["schema"]["rank"] = "int"
    for job_id in base.order:  # checkpoints recorded with an int column
        write_fingerprint(settings.layout.checkpoint(job_id), fingerprint(build_registry(widened).job(job_id),
                                                                          build_registry(widened)))
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].update(rank="long"))
    assert mode == "evolve" and "rank int -> long widened in place" in text and "delta-rs" in text  # who can't read
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].update(rank="double"))
    assert mode == "evolve" and "rank int -> double widened" in text
    floats = with_field(widened, "ratio", "float")
    for job_id in CHAIN:  # checkpoints recorded with a float column
        write_fingerprint(settings.layout.checkpoint(job_id), fingerprint(build_registry(floats).job(job_id),
                                                                          build_registry(floats)))
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].update(rank="int", ratio="double"))
    assert mode == "evolve" and "ratio float -> double widened in place" in text
    mode, text = mode_and_reason(lambda r: r["sources"]["clickstream"]["schema"].update(rank="int", ratio="long"))
    assert mode == "full-refresh" and "ratio: not a change Delta's type widening makes in place" in text
    priced = with_field(widened, "price", "decimal(10,2)")
    for job_id in CHAIN:  # checkpoints recorded with a decimal column
        write_fingerprint(settings.layout.checkpoint(job_id), fingerprint(build_registry(priced).job(job_id),
                                                                          build_registry(priced)))
    for price, widens in (("decimal(12,2)", True), ("decimal(13,3)", True), ("decimal(10,3)", False),
                          ("decimal(9,2)", False), ("double", False)):  # integer digits and scale: neither shrinks
        mode, text = mode_and_reason(lambda r, p=price: r["sources"]["clickstream"]["schema"].update(rank="int",
                                                                                                     price=p))
        assert (mode == "evolve" and f"price decimal(10,2) -> {price} widened in place" in text) if widens else \
            (mode == "full-refresh" and "price: not a change Delta's type widening makes in place" in text), price
    for rank, widens in (("decimal(10,0)", True), ("decimal(12,2)", True), ("decimal(11,2)", False)):
        mode, _ = mode_and_reason(lambda r, k=rank: r["sources"]["clickstream"]["schema"].update(rank=k,
                                                                                                price="decimal(10,2)"))
        assert mode == ("evolve" if widens else "full-refresh"), rank  # an int needs 10 integer digits

    def keyed_on_rank(r):
        r["sources"]["clickstream"]["schema"]["rank"] = "long"
        r["jobs"]["silver_clickstream"]["transform"]["keys"] = ["event_id", "rank"]

    keyed = copy.deepcopy(widened)
    keyed["jobs"]["silver_clickstream"]["transform"]["keys"] = ["event_id", "rank"]
    for job_id in CHAIN:  # checkpoints of a silver deduplicating on an int rank
        write_fingerprint(settings.layout.checkpoint(job_id), fingerprint(build_registry(keyed).job(job_id),
                                                                          build_registry(keyed)))
    mode, text = mode_and_reason(keyed_on_rank)
    assert mode == "evolve" and "silver_clickstream: full-refresh" in text and "keyed on rank" in text
    for job_id in base.order:
        write_fingerprint(settings.layout.checkpoint(job_id), fingerprint(base.job(job_id), base))
    key_change = with_field(with_device, "os")  # an added column that is also a new key: the state's keys change
    key_change["jobs"]["silver_clickstream"]["transform"]["keys"] = ["event_id", "os"]
    silver = plans(settings, build_registry(key_change), ["silver_clickstream"])["silver_clickstream"]
    assert silver.mode == "full-refresh" and "transform" in {c.field for c in silver.changes}
    assert not silver.startable and "--cascade" in silver.command

    # a job whose state holds its output rows: an output column added to it rebuilds it too
    gold = base.job("gold_user_activity_5m")
    recorded = fingerprint(gold, base)
    recorded["output_schema"].pop("total_value")
    write_fingerprint(settings.layout.checkpoint(gold.id), recorded)
    rebuilt = plan_job(gold, base, settings.layout.checkpoint(gold.id))
    assert rebuilt.mode == "full-refresh" and "window_aggregate job's state" in rebuilt.render()


def test_a_rename_evolves_the_jobs_that_read_it_by_name_and_rebuilds_only_a_job_keyed_on_it(settings, raw):
    """`value` renamed to `amount` (and `user_id` to `account`): the pass-through jobs evolve; a gold job whose
    aggregation now names `amount` evolves (its state holds sums, not names); one keyed on the renamed `account`
    is rebuilt, alone with its downstream, never the jobs above it."""
    raw = copy.deepcopy(raw)  # the chain and its aggregations (a processor reads the columns its catalogue names)
    raw["jobs"] = {j: raw["jobs"][j] for j in (*LINEAGE, "gold_user_activity_1h")}
    base = build_registry(raw)
    for job_id in base.order:
        recorded_checkpoint(settings, base, job_id)
    renamed = copy.deepcopy(raw)
    schema = renamed["sources"]["clickstream"]["schema"]
    schema["amount"] = {"type": schema.pop("value"), "renamed_from": "value"}
    for job in renamed["jobs"].values():
        for aggregation in (job["transform"].get("aggregations") or {}).values():
            if isinstance(aggregation, dict) and aggregation.get("column") == "value":
                aggregation["column"] = "amount"
    after = build_registry(renamed)
    planned = plans(settings, after)
    assert planned["bronze_clickstream"].mode == planned["silver_clickstream"].mode == "evolve"
    gold = planned["gold_user_activity_5m"]
    assert gold.mode == "evolve" and "reads value as amount (renamed upstream)" in gold.render(), gold.render()
    assert "value renamed to amount in place" in planned["silver_clickstream"].render()

    schema["account"] = {"type": schema.pop("user_id"), "renamed_from": "user_id"}
    for job in renamed["jobs"].values():  # the gold jobs group (and upsert) by it
        for part, field in ((job["transform"], "keys"), (job["sink"], "merge_keys")):
            if "user_id" in (part.get(field) or []):
                part[field] = ["account" if k == "user_id" else k for k in part[field]]
    keyed = plans(settings, build_registry(renamed), ["silver_clickstream", "gold_user_activity_5m"])
    assert keyed["silver_clickstream"].mode == "evolve"  # deduplicates on event_id: passes account through
    rebuilt = keyed["gold_user_activity_5m"]
    assert rebuilt.mode == "full-refresh" and "its state is keyed on user_id, renamed to account" in rebuilt.render()
    assert "bronze_clickstream" not in rebuilt.downstream and "silver_clickstream" not in rebuilt.downstream


def test_a_bad_renamed_from_is_named(raw):
    from include.registry import RegistryError

    for declared, text in (({"type": "string", "renamed_from": "user_id"}, "'user_id' is a column of the schema"),
                           ({"type": "string", "renamed_from": "2x"}, "renamed_from: must be the column's former name"),
                           ({"type": "strng", "renamed_from": "old"}, "unknown type 'strng'"),
                           ({"type": "string", "renamed_from": "old", "was": 1}, "unknown fields ['was']")):
        bad = copy.deepcopy(raw)
        bad["sources"]["clickstream"]["schema"]["platform"] = declared
        with pytest.raises(RegistryError, match=re.escape(text)):
            build_registry(bad)
    dropped = copy.deepcopy(raw)
    dropped["sources"]["clickstream"]["schema"].pop("value")  # gold still sums it: the registry names the reader
    with pytest.raises(RegistryError, match="value"):
        build_registry(dropped)


def test_a_checkpoint_from_before_the_rescued_column_evolves(settings, registry):
    """Lakehouses made before bronze had `_rescued`: their bronze and silver plans add it, nothing else."""
    for job_id in CHAIN:
        old = {c: t for c, t in registry.job(job_id).output_schema.items() if c != "_rescued"}
        recorded_checkpoint(settings, registry, job_id, old)
    for plan in plans(settings, registry, CHAIN).values():
        assert plan.mode == "evolve", plan.render()
        [change] = plan.changes
        assert set(change.after) - set(change.before) == {"_rescued"}


# --- on real Spark and Delta --------------------------------------------------------------------------

def rewrite_events(files, change) -> None:
    """Rewrite the landed files in place: `change(record)` may change each event (a JSON object with an id) and says
    whether it did; other lines stay as they are."""
    for path in files:
        lines = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict) and isinstance(record.get("event_id"), str) and change(record):
                line = json.dumps(record)
            lines.append(line)
        path.write_text("\n".join(lines) + "\n")


def add_device(files, nested: bool = False, every: int = 3) -> set[str]:
    """Give every `every`-th event of the landed files a `device` field (a name; with `nested`, every other one an
    object), the same for an event's duplicate copy; the ids of the events changed."""
    ids: list[str] = []

    def give(record: dict) -> bool:
        if int(record["event_id"][-4:], 16) % every:
            return False
        record["device"] = {"kind": "phone", "os": "ios"} if nested and len(ids) % 2 else "tablet"
        ids.append(record["event_id"])
        return True

    rewrite_events(files, give)
    return set(ids)


@pytest.mark.spark
@pytest.mark.slow
def test_a_new_field_is_rescued_then_evolves_the_chain_without_reading_anything_twice(spark, settings, raw,
                                                                                       caplog, tmp_path):
    from include.spark_session import query_session

    settings = replace(settings, registry_path=tmp_path / "jobs.yaml")  # what the live silver's registry watch reads

    before = build_registry(raw)
    first = generate(settings, events=900, seed=41, files=3)
    rescued_lines = add_device(first.files, nested=True)  # not declared yet: any JSON value is kept
    for job_id in LINEAGE:
        run_job(spark, settings, before, job_id, AVAILABLE_NOW)
    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream")).to_pylist()
    quarantine = delta_store.read_table(settings.layout.table("bronze/clickstream_quarantine")).num_rows
    assert len(bronze) + quarantine == first.lines  # nothing lost
    rescued = [json.loads(r["_rescued"]) for r in bronze if r["_rescued"] is not None]
    assert rescued_lines and len(rescued) == sum(r["event_id"] in rescued_lines for r in bronze)  # kept, whole
    assert {tuple(r) for r in rescued} == {("device",)}
    assert {json.dumps(r["device"], sort_keys=True) for r in rescued} == {'"tablet"',
                                                                           '{"kind": "phone", "os": "ios"}'}
    report = run_quality(settings, before, ["bronze/clickstream"])  # the quality check counts them, by name
    [check] = report.results
    observed = json.loads(check.observed_value)
    assert (check.expectation, check.severity, check.success) == ("no_rescued_fields", "warning", False)
    assert observed["rows_with_rescued_fields"] == observed["unexpected_count"] == len(rescued)
    assert observed["fields"] == {"device": len(rescued)} and not report.blocking_failures

    after = saved_registry(with_field(raw), settings.registry_path, {})  # it names the field: bronze, silver evolve
    assert {j: p.mode for j, p in plans(settings, after, LINEAGE).items()} == {
        "bronze_clickstream": "evolve", "silver_clickstream": "evolve", "gold_user_activity_5m": "resume"}
    silver_batches = len(list((settings.layout.checkpoint("silver_clickstream") / "commits").iterdir()))

    # silver runs live and evolves first (its input has no `device` yet: written null); bronze then evolves and
    # reads the next files: silver's query restarts itself on bronze's new schema and reads on
    stop = threading.Event()
    live = {}
    silver = threading.Thread(target=lambda: live.update(result=run_job(
        query_session(spark), settings, after, "silver_clickstream", Trigger(available_now=False, interval_seconds=1), stop_requested=stop)))
    caplog.set_level("INFO", logger="spark_jobs.streaming_query")
    silver.start()
    try:
        deadline = time.monotonic() + 120
        while (read_heartbeat(settings, "silver_clickstream") or {}).get("status") not in ("idle", "running"):
            assert silver.is_alive() and time.monotonic() < deadline  # its query runs, on bronze's schema of now
            time.sleep(0.2)
        assert "device" in delta_store.read_table(settings.layout.table("silver/clickstream")).column_names
        second = generate(settings, events=900, seed=42, files=3, start=DEFAULT_START + timedelta(hours=1))
        new_lines = add_device(second.files)
        run_job(spark, settings, after, "bronze_clickstream", AVAILABLE_NOW)
        bronze_version = delta_store.latest_version(settings.layout.table("bronze/clickstream"))
        wait_until_read(settings, "silver_clickstream", bronze_version, silver, deadline)
    finally:
        stop.set()
        silver.join(60)
    assert live["result"].status == "stopped"
    assert any("has a new schema; its query starts again" in r.getMessage() for r in caplog.records)
    run_job(spark, settings, after, "gold_user_activity_5m", AVAILABLE_NOW)

    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream")).to_pylist()
    quarantine = delta_store.read_table(settings.layout.table("bronze/clickstream_quarantine")).num_rows
    assert len(bronze) + quarantine == first.lines + second.lines  # each line once: nothing read twice
    late = [r for r in bronze if r["_source_file"].endswith(tuple(p.name for p in second.files))]
    assert sum(r["device"] is not None for r in late) == sum(r["event_id"] in new_lines for r in late)
    assert new_lines and not any(r["_rescued"] for r in late)
    early = [r for r in bronze if r not in late]
    assert all(r["device"] is None for r in early)
    assert sum(r["_rescued"] is not None for r in early) == sum(r["event_id"] in rescued_lines for r in early)
    silver_rows = delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist()
    assert len({r["event_id"] for r in silver_rows}) == len(silver_rows)  # no duplicate
    assert {r["event_id"] for r in silver_rows} <= {r["event_id"] for r in bronze}
    assert sum(r["device"] is not None for r in silver_rows) == len({r["event_id"] for r in late if r["device"]})
    assert len(list((settings.layout.checkpoint("silver_clickstream") / "commits").iterdir())) > silver_batches

    expected = expected_gold(after, [arrival_order(first.files), arrival_order(second.files)])
    assert gold_rows(settings, "gold/user_activity_5m") == expected["gold/user_activity_5m"]
    audit = [a for a in checkpoint_audit.outcomes(settings) if a["mode"] == "evolve"]
    assert sorted(a["job"] for a in audit) == sorted(CHAIN)
    assert all("added device (string)" in a["detail"] and a["outcome"] == "done" for a in audit)
    assert {p.mode for p in plans(settings, after, LINEAGE).values()} == {"resume"}
    [check] = run_quality(settings, after, ["bronze/clickstream"]).results  # the rows since: none rescued
    assert check.success and json.loads(check.observed_value)["fields"] == {}

    # the backfill: the early rows' rescued `device` into the column, in bronze and silver, one version each;
    # an object (it does not fit a string) stays rescued
    fits = sum(isinstance(json.loads(r["_rescued"])["device"], str) for r in early if r["_rescued"])
    tables = ("bronze/clickstream", "silver/clickstream")
    versions = {t: delta_store.latest_version(settings.layout.table(t)) for t in tables}
    dry = backfill(spark, settings, after, "bronze_clickstream", ["device"], dry_run=True)
    assert [(f.table, f.filled) for f in dry] == [("bronze/clickstream", fits), ("silver/clickstream", dry[1].filled)]
    assert versions == {t: delta_store.latest_version(settings.layout.table(t)) for t in tables}  # nothing changed
    done = backfill(spark, settings, after, "bronze_clickstream")
    assert [(f.table, f.column, f.filled, f.not_fitting) for f in done if f.column == "device"] == [
        (f.table, f.column, f.filled, f.not_fitting) for f in dry]
    assert fits and dry[0].not_fitting == len(rescued) - fits and 0 < dry[1].filled <= fits
    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream")).to_pylist()
    filled = [r for r in bronze if r["_source_file"].endswith(tuple(p.name for p in first.files)) and r["device"]]
    assert len(filled) == fits and {r["device"] for r in filled} == {"tablet"}
    assert not any(r["_rescued"] for r in filled)  # the field left _rescued (it held nothing else)
    assert sum(r["_rescued"] is not None for r in bronze) == len(rescued) - fits
    silver_rows = delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist()
    early_ids = {r["event_id"] for r in early} - {r["event_id"] for r in late}
    carried = [r for r in silver_rows if r["event_id"] in early_ids & rescued_lines]  # a copy of each: its own value
    assert all((r["device"], r["_rescued"]) == ("tablet", None) or (
        r["device"] is None and isinstance(json.loads(r["_rescued"])["device"], dict)) for r in carried)
    assert sum(r["device"] == "tablet" for r in carried) == dry[1].filled
    audit = [a for a in checkpoint_audit.outcomes(settings) if a["mode"] == "backfill" and not a["dry_run"]]
    assert sorted(a["job"] for a in audit) == sorted(CHAIN) and all("rows filled" in a["detail"] for a in audit)
    assert backfill(spark, settings, after, "bronze_clickstream", ["device"])[0].filled == 0  # again: nothing left
    assert {t: delta_store.latest_version(settings.layout.table(t)) for t in tables} != versions

    # the readers pass over the backfill commits: the next drop flows through, nothing read twice
    caplog.set_level("INFO", logger="spark_jobs.evolution")
    third = generate(settings, events=300, seed=43, files=1, start=DEFAULT_START + timedelta(hours=2))
    for job_id in LINEAGE:
        run_job(spark, settings, after, job_id, AVAILABLE_NOW)
    bronze_rows = delta_store.count_rows(settings.layout.table("bronze/clickstream"))
    quarantine = delta_store.read_table(settings.layout.table("bronze/clickstream_quarantine")).num_rows
    assert bronze_rows + quarantine == first.lines + second.lines + third.lines
    silver_rows = delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist()
    assert len({r["event_id"] for r in silver_rows}) == len(silver_rows)
    expected = expected_gold(after, [arrival_order(first.files), arrival_order(second.files),
                                     arrival_order(third.files)])
    assert gold_rows(settings, "gold/user_activity_5m") == expected["gold/user_activity_5m"]
    [check] = run_quality(settings, after, ["bronze/clickstream"]).results  # the backfill rewrote rows: all read
    assert json.loads(check.observed_value)["fields"] == {"device": len(rescued) - fits}
    passed_over = [r.getMessage() for r in caplog.records if "passes over the backfill commits" in r.getMessage()]
    assert any(m.startswith("job=silver_clickstream") for m in passed_over), passed_over
    assert any(m.startswith("job=gold_user_activity_5m") for m in passed_over), passed_over


def add_rank(files, base: int, price_base: int | None = None) -> None:
    """Give every event of the landed files a `rank` (`base` plus a number from its id, its duplicate copy the same)
    and, with a `price_base`, a `price` (that plus the number in cents)."""
    def update(record: dict) -> bool:
        record["rank"] = base + rank_of(record["event_id"])
        if price_base is not None:
            record["price"] = float(price_of(record["event_id"], price_base))
        return True

    rewrite_events(files, update)


def rank_of(event_id: str) -> int:
    return int(event_id[-4:], 16)


def price_of(event_id: str, base: int) -> Decimal:
    return base + Decimal(rank_of(event_id)) / 100


def assert_evolved_once(settings, after, drops, caplog, change: str) -> list[dict]:
    """After two drops run through the chain, the second one past an `evolve`: each line once in bronze, silver
    without a duplicate, a reading query restarted on its input's new schema, gold equal to the oracle, one audit row
    per evolved job saying `change`, every plan back to `resume`. Silver's rows."""
    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream")).num_rows
    quarantine = delta_store.read_table(settings.layout.table("bronze/clickstream_quarantine")).num_rows
    assert bronze + quarantine == sum(d.lines for d in drops)  # each line once: nothing read twice
    silver = delta_store.read_table(settings.layout.table("silver/clickstream")).to_pylist()
    assert len({r["event_id"] for r in silver}) == len(silver)  # no duplicate
    assert any("has a new schema; its query starts again" in r.getMessage() for r in caplog.records)
    expected = expected_gold(after, [arrival_order(d.files) for d in drops])
    assert gold_rows(settings, "gold/user_activity_5m") == expected["gold/user_activity_5m"]
    audit = [a for a in checkpoint_audit.outcomes(settings) if a["mode"] == "evolve"]
    assert sorted(a["job"] for a in audit) == sorted(CHAIN)
    assert all(change in a["detail"] for a in audit), audit
    assert {p.mode for p in plans(settings, after, LINEAGE).values()} == {"resume"}
    return silver


@pytest.fixture(params=["local", pytest.param("s3", marks=[pytest.mark.full, pytest.mark.s3])])  # s3: test-full
def house(request, settings):
    """The test's lakehouse: a local root, or a fresh prefix of the session's S3 bucket."""
    return request.getfixturevalue("s3_settings") if request.param == "s3" else settings


@pytest.mark.spark
@pytest.mark.slow
def test_a_widened_number_evolves_the_chain_in_place_without_reading_anything_twice(spark, house, raw, caplog,
                                                                                      tmp_path):
    settings = replace(house, registry_path=tmp_path / "jobs.yaml")  # what the live silver's registry watch reads
    from delta.tables import DeltaTable

    from include.storage.reader import query

    before = build_registry(with_field(with_field(raw, "rank", "int"), "price", "decimal(10,2)"))
    first = generate(settings, events=600, seed=51, files=2)
    add_rank(first.files, 0, 0)
    for job_id in LINEAGE:
        run_job(spark, settings, before, job_id, AVAILABLE_NOW)
    # ranks outgrow int, prices 8 integer digits
    after = saved_registry(with_field(with_field(raw, "rank", "long"), "price", "decimal(14, 2)"),
                           settings.registry_path, {})
    planned = plans(settings, after, LINEAGE)
    assert {j: p.mode for j, p in planned.items()} == {
        "bronze_clickstream": "evolve", "silver_clickstream": "evolve", "gold_user_activity_5m": "resume"}
    assert "rank int -> long; price decimal(10,2) -> decimal(14,2) widened in place" in \
        planned["silver_clickstream"].render()
    second = generate(settings, events=600, seed=52, files=2, start=DEFAULT_START + timedelta(hours=1))
    add_rank(second.files, WIDE, PRICEY)
    # silver runs live and widens its table first (its input is still int); bronze then widens and reads the ranks
    # beyond int: silver's running query stops once on bronze's new type and reads on with it
    from include.spark_session import query_session

    stop, live = threading.Event(), {}
    silver = threading.Thread(target=lambda: live.update(result=run_job(
        query_session(spark), settings, after, "silver_clickstream", Trigger(available_now=False, interval_seconds=1),
        stop_requested=stop)))
    caplog.set_level("INFO", logger="spark_jobs.streaming_query")
    silver.start()
    try:
        deadline = time.monotonic() + 120
        while (read_heartbeat(settings, "silver_clickstream") or {}).get("status") not in ("idle", "running"):
            assert silver.is_alive() and time.monotonic() < deadline
            time.sleep(0.2)
        run_job(spark, settings, after, "bronze_clickstream", AVAILABLE_NOW)
        bronze_version = delta_store.latest_version(settings.layout.table("bronze/clickstream"))
        wait_until_read(settings, "silver_clickstream", bronze_version, silver, deadline)
    finally:
        stop.set()
        silver.join(60)
    assert live["result"].status == "stopped"
    run_job(spark, settings, after, "gold_user_activity_5m", AVAILABLE_NOW)

    late_files = tuple(p.name for p in second.files)
    for table in ("bronze/clickstream", "silver/clickstream"):
        path = settings.layout.table(table)
        assert DeltaTable.forPath(spark, str(path)).detail().first()["properties"]["delta.enableTypeWidening"] == "true"
        rows = delta_store.read_table(path).to_pylist()
        schema = delta_store.read_table(path).schema
        assert (str(schema.field("rank").type), str(schema.field("price").type)) == ("int64", "decimal128(14, 2)"), table
        assert all((r["rank"] >= WIDE) == r["_source_file"].endswith(late_files) for r in rows), table
        late = [r["_source_file"].endswith(late_files) for r in rows]
        assert [(r["rank"], r["price"]) for r in rows] == [
            ((WIDE if is_late else 0) + rank_of(r["event_id"]), price_of(r["event_id"], PRICEY if is_late else 0))
            for r, is_late in zip(rows, late, strict=True)], table
    silver = assert_evolved_once(settings, after, (first, second), caplog,
                                 "widened rank (int -> long), price (decimal(10,2) -> decimal(14,2))")
    # the readers outside Spark read the widened tables: SQL, quality
    top = query(settings.layout.table("silver/clickstream"), "SELECT max(rank) AS top FROM t").to_pylist()
    assert top == [{"top": max(r["rank"] for r in silver)}] and top[0]["top"] > WIDE
    report = run_quality(settings, after, ["bronze/clickstream"])  # its rows since the last run: by their versions
    assert report.results and not report.blocking_failures


def test_a_live_run_sees_a_registry_that_evolves_its_job_and_nothing_else(settings, raw, tmp_path, caplog):
    import yaml

    from spark_jobs.evolution import RegistryWatch

    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    live = replace(settings, registry_path=path)
    registry = build_registry(raw)
    recorded_checkpoint(live, registry, "silver_clickstream")
    watch = RegistryWatch(live, registry.job("silver_clickstream"), registry)
    assert watch.evolved() is None  # unchanged

    path.write_text(yaml.safe_dump(raw, sort_keys=False) + "# a comment only\n")
    assert watch.evolved() is None  # the job's definition is the same
    path.write_text("jobs: [")
    caplog.set_level("WARNING", logger="spark_jobs.evolution")
    assert watch.evolved() is None and "does not load" in caplog.text
    rekeyed = copy.deepcopy(raw)
    rekeyed["jobs"]["silver_clickstream"]["transform"]["keys"] = ["event_id", "user_id"]
    path.write_text(yaml.safe_dump(rekeyed, sort_keys=False))
    assert watch.evolved() is None and "plan full-refresh" in caplog.text  # waits for a person
    path.write_text(yaml.safe_dump(with_field(raw), sort_keys=False))
    evolved = watch.evolved()
    assert evolved is not None and "device" in evolved.job("silver_clickstream").output_schema


def test_a_registry_change_seen_before_the_first_batch_is_judged_again_once_there_is_one(settings, raw, tmp_path,
                                                                                           monkeypatch):
    """A run whose query has planned no batch yet has a checkpoint without offsets, where every plan reads `resume`:
    the watch looks again (every few seconds) until the query has one, and then sees the `evolve`."""
    import yaml

    from spark_jobs import evolution

    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    live = replace(settings, registry_path=path)
    registry = build_registry(raw)
    checkpoint = recorded_checkpoint(live, registry, "silver_clickstream")
    (checkpoint / "offsets" / "0").unlink()
    (checkpoint / "offsets").rmdir()  # as a query leaves it before its first batch
    watch = evolution.RegistryWatch(live, registry.job("silver_clickstream"), registry)
    assert watch.evolved() is None
    path.write_text(yaml.safe_dump(with_field(raw), sort_keys=False))
    assert watch.evolved() is None  # no batch yet
    (checkpoint / "offsets").mkdir()
    assert watch.evolved() is None  # not before its retry time
    monkeypatch.setattr(watch, "retry_at", 0.0)
    evolved = watch.evolved()
    assert evolved is not None and "device" in evolved.job("silver_clickstream").output_schema


def renamed_and_dropped(raw: dict) -> dict:
    """The producer's `device` is now `platform` (declared renamed), and it sends no `event_type` (removed)."""
    changed = copy.deepcopy(raw)
    schema = changed["sources"]["clickstream"]["schema"]
    schema["platform"] = {"type": schema.pop("device"), "renamed_from": "device"}
    schema.pop("event_type")
    return changed


def producer_moved(path) -> None:
    """The file's events as the producer sends them after the rename: `platform`, no `event_type`."""
    def move(record: dict) -> bool:
        if "device" in record:
            record["platform"] = record.pop("device")
        return record.pop("event_type", None) is not None or "platform" in record

    rewrite_events([path], move)


@pytest.mark.spark
@pytest.mark.slow
def test_a_renamed_and_a_dropped_field_evolve_the_chain_in_place_without_reading_anything_twice(spark, house, raw,
                                                                                                caplog):
    """`device` renamed to `platform` in the registry (`renamed_from`) and `event_type` removed: bronze and silver plan
    `evolve` (gold reads neither); their starts turn column mapping on and rename and drop in place, no file
    rewritten; silver reads bronze on through its schema log (it stops once per schema change and reads on); the
    rows written before read under the new name; a file whose lines still carry `device` is read into `platform`;
    each line once; gold equals the oracle; the product's readers read the tables."""
    from include.checkpoints.inspect import inspect
    from include.ops.health_report import build
    from include.storage.reader import query
    from include.summary import summarize
    from spark_jobs.transforms import SCHEMA_TRACKING

    settings = house
    chain = with_field(raw)
    chain["jobs"] = {j: chain["jobs"][j] for j in LINEAGE}
    before = build_registry(chain)
    first = generate(settings, events=600, seed=61, files=2)
    named = add_device(first.files)
    for job_id in LINEAGE:
        run_job(spark, settings, before, job_id, AVAILABLE_NOW)
    silver_batch = checkpoints.latest_committed_batch(settings.layout.checkpoint("silver_clickstream"))
    after = build_registry(renamed_and_dropped(chain))
    planned = plans(settings, after, LINEAGE)
    assert {j: p.mode for j, p in planned.items()} == {
        "bronze_clickstream": "evolve", "silver_clickstream": "evolve", "gold_user_activity_5m": "resume"}
    text = planned["silver_clickstream"].render()
    assert "device renamed to platform in place" in text and "column event_type dropped in place" in text, text
    assert "column mapping (name mode)" in text and "delta-rs" in text

    second = generate(settings, events=600, seed=62, files=2, start=DEFAULT_START + timedelta(hours=1))
    named |= add_device(second.files)
    moved, not_yet = arrival_order(second.files)
    producer_moved(moved)  # the other file's lines still say `device`: read into `platform` all the same
    caplog.set_level("INFO", logger="spark_jobs.streaming_query")
    for job_id in LINEAGE:
        run_job(spark, settings, after, job_id, AVAILABLE_NOW)

    for table in ("bronze/clickstream", "silver/clickstream"):
        path = settings.layout.table(table)
        assert delta_store.column_mapped(path), table
        rows = delta_store.read_table(path).to_pylist()
        assert "platform" in rows[0] and "device" not in rows[0] and "event_type" not in rows[0], rows[0]
        assert {r["event_id"] for r in rows if r["platform"] == "tablet"} == {r["event_id"] for r in rows} & named
        assert all(r["platform"] is None for r in rows if r["event_id"] not in named), table
        assert not [r for r in rows if "device" in json.loads(r["_rescued"] or "{}")], table  # not rescued: read
    silver = assert_evolved_once(settings, after, (first, second), caplog,
                                 "renamed device to platform and dropped event_type")
    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream")).num_rows
    silver_checkpoint = settings.layout.checkpoint("silver_clickstream")
    assert checkpoints.latest_committed_batch(silver_checkpoint) > silver_batch  # went on from its checkpoint
    assert (silver_checkpoint / SCHEMA_TRACKING).is_dir()

    # the product's readers read the evolved tables: SQL over them, quality (bronze's rows since its last run, by
    # their versions, across the rename), the summary and the health report
    platforms = query(settings.layout.table("silver/clickstream"),
                      "SELECT count(platform) AS n FROM t").to_pylist()
    assert platforms == [{"n": sum(r["platform"] is not None for r in silver)}] and platforms[0]["n"] > 0
    report = run_quality(settings, after, ["bronze/clickstream"])
    assert report.results and not report.blocking_failures, report.render()
    rows = {t.table: t.rows for t in summarize(settings, after).tables}
    assert rows["silver/clickstream"] == len(silver) and rows["bronze/clickstream"] == bronze
    assert "silver_clickstream" in build(settings, after).read_text()
    for job_id in CHAIN:  # the checkpoint inspection reads each sink's commits (the versions its batches wrote)
        report = inspect(settings, after, after.job(job_id))
        assert report["plan"]["mode"] == "resume" and report["sinks"][0]["delta_version"] == \
            delta_store.latest_version(settings.layout.table(after.job(job_id).sink.table)), report


@pytest.mark.spark
def test_the_rescued_column_keeps_other_fields_whole_and_names_exactly(spark):
    from pyspark.sql import functions as F

    from spark_jobs.json_values import rescued_fields

    schema = {"event_id": "string", "value": "double", "event_time": "timestamp"}
    lines = {
        '{"event_id": "a", "value": 1.5, "event_time": "2026-01-01T00:00:00Z"}': None,  # nothing beyond the schema
        '{"event_id": "b", "device": "ios", "tags": ["x", {"y": null}], "n": 12, "f": -0.25, "ok": true}':
            {"device": "ios", "tags": ["x", {"y": None}], "n": 12, "f": -0.25, "ok": True},
        '{"Device": "caps", "value": {"nested": "in a named column"}, "q": "say \\"hi\\" \\u00e9"}':
            {"Device": "caps", "q": 'say "hi" \u00e9'},
        '{"event_id": "c", "x": 1} trailing': {"x": 1},  # the strict parse quarantines it; the column is not read
        "not json": None, "[1, 2]": None, '{"x": ': None, "": None,
    }
    frame = spark.createDataFrame([(line,) for line in lines], "value string")
    got = {r["value"]: r["rescued"] for r in frame.select("value", rescued_fields(F.col("value"), schema)
                                                                .alias("rescued")).collect()}
    assert {line: json.loads(text) if text else None for line, text in got.items()} == lines


def test_a_backfill_names_what_it_cannot_fill(lakehouse_env):
    wrong_job = run_cli(["schema", "backfill", "silver_clickstream"], lakehouse_env)
    assert wrong_job.returncode == 2 and "job 'silver_clickstream' is a deduplicate job: name the bronze" in \
        wrong_job.stderr, wrong_job.stderr
    unknown = run_cli(["schema", "backfill", "bronze_clickstream", "--column", "device"], lakehouse_env)
    assert unknown.returncode == 2 and "source 'clickstream' declares no column 'device'" in unknown.stderr
    assert "add it to the registry first" in unknown.stderr


def test_the_approval_text_shows_an_evolve_and_why_a_keyed_rename_rebuilds_with_the_rows_it_rebuilds(settings, raw):
    from include.checkpoints.preview import preview, render_markdown
    from include.checkpoints.request import CheckpointRequest

    base = build_registry(with_field(raw))
    for job_id in base.order:
        recorded_checkpoint(settings, base, job_id)
    bronze = base.job("bronze_clickstream")
    delta_store.append_rows(settings.layout.table(bronze.sink.table), bronze.output_schema,
                            [{"event_id": f"e{i}", "event_time": None} for i in range(3)])
    request = CheckpointRequest("full-refresh", ("bronze_clickstream",), dry_run=True, options={"cascade": True})

    added = build_registry(with_field(with_field(raw), "os"))
    text = render_markdown(request, preview(settings, added, request))
    assert "**Its checkpoint needs no action** (plan: `evolve`): its next start changes its table in place" in text
    assert "nullable column os added" in text and "This is a **dry run**" in text
    assert "Table `bronze/clickstream`: 3 rows at Delta version 1" in text  # what the refresh would rebuild

    keyed = with_field(raw, "platform")  # a rename of the column silver deduplicates on
    keyed["sources"]["clickstream"]["schema"]["platform"] = {"type": "string", "renamed_from": "device"}
    keyed["jobs"]["silver_clickstream"]["transform"]["keys"] = ["event_id", "platform"]
    recorded = copy.deepcopy(with_field(raw))
    recorded["jobs"]["silver_clickstream"]["transform"]["keys"] = ["event_id", "device"]
    write_fingerprint(settings.layout.checkpoint("silver_clickstream"),
                      fingerprint(build_registry(recorded).job("silver_clickstream"), build_registry(recorded)))
    request = CheckpointRequest("full-refresh", ("silver_clickstream",), dry_run=True, options={"cascade": True})
    text = render_markdown(request, preview(settings, build_registry(keyed), request))
    assert "Its checkpoint's plan: `full-refresh`; transform: its state is keyed on device, renamed to platform; " \
           "output_schema: device renamed to platform: the job's state is keyed on platform" in text, text


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_live_group_evolves_by_itself_without_a_new_driver_no_duplicate_no_gap(settings, tmp_path):
    """bronze, silver and the 5-minute windows in one live driver (a real `lakehouse run --group` process): events with
    a new field flow (rescued), and an int `rank`; the registry file then names the field, widens `rank` to long and
    renames `value` to `amount` (gold sums `amount`): the three queries stop between batches and start again with it
    (gold's also on silver's new schema), in the same driver, with no failure; the next drop's field lands in its
    column, its ranks beyond int in the widened one, its `value` (the producer has not moved) in `amount`, and gold
    equals the oracle over both drops."""
    import os

    from include.generator import GeneratorConfig, write_landing
    from include.ops import processes
    from include.records import lease
    from tests.support.groups import MEMBERS, drivers_launched_here, drop_after, group_registry, holders
    from tests.support.helpers import landed, wait_for

    path = tmp_path / "jobs.yaml"
    group_registry(path)
    raw = yaml.safe_load(path.read_text())
    raw["jobs"] = {j: raw["jobs"][j] for j in MEMBERS}  # (the processors read `value` by the catalogue's name)
    raw["sources"]["clickstream"]["schema"]["rank"] = "int"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    registry = build_registry(raw, path)
    own = replace(settings, registry_path=path)
    drops = [generate(own, events=400, seed=61, files=2, late_fraction=0.0)]
    rescued_ids = add_device(drops[0].files)
    add_rank(drops[0].files, 0)
    with drivers_launched_here(own):
        pid = processes.start_job(own, registry, "bronze_clickstream")  # the group's driver starts all three
        wait_for(lambda: holders(own) == dict.fromkeys(MEMBERS, pid), 180, "the group's jobs in one driver")
        wait_for(lambda: landed(own) == drops[0].lines, 180, "the first drop in bronze")

        schema = raw["sources"]["clickstream"]["schema"]
        schema.update(device="string", rank="long", amount={"type": schema.pop("value"), "renamed_from": "value"})
        raw["jobs"]["gold_user_activity_5m"]["transform"]["aggregations"]["total_value"]["column"] = "amount"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        evolved = build_registry(raw, path)
        wait_for(lambda: {p.mode for p in plans(own, evolved, MEMBERS).values()} == {"resume"}, 180,
                 lambda: f"bronze and silver to evolve by themselves: {evolution_state(own, evolved, MEMBERS, pid)}")
        # written aside, given the field, then moved in: the running bronze sees each file whole
        staged = write_landing(tmp_path / "staged", "clickstream", GeneratorConfig(
            events=300, seed=62, files=1, late_fraction=0.0, start=drop_after(drops)))
        new_ids = add_device(staged.files, every=2)
        add_rank(staged.files, WIDE)
        drops.append(staged)
        expected = expected_gold(evolved, [arrival_order(d.files) for d in drops])["gold/user_activity_5m"]
        for staged_file in staged.files:
            staged_file.rename(own.layout.landing("landing/clickstream") / staged_file.name)
        wait_for(lambda: gold_rows(own, "gold/user_activity_5m") == expected, 240, "gold to equal the oracle",
                 interval=1)
        assert holders(own) == dict.fromkeys(MEMBERS, pid)  # the same driver: no job stopped for good or restarted
        assert not any((read_heartbeat(own, j) or {}).get("status") == "failed" for j in MEMBERS)
        log_text = own.layout.job_log(GROUP_NAME).read_text()
        assert "the registry changes its output in place (plan evolve)" in log_text
        assert "job=gold_user_activity_5m: a table it reads has a new schema" in log_text
        assert processes.stop_jobs(own, MEMBERS, "test", wait_seconds=60) == []
        assert processes.LAUNCHED[os.getsid(pid)].wait(timeout=60) == 0
        assert not any(lease.is_held(own, j) for j in MEMBERS)

    bronze = delta_store.read_table(own.layout.table("bronze/clickstream")).to_pylist()
    quarantine = delta_store.count_rows(own.layout.table("bronze/clickstream_quarantine"))
    assert len(bronze) + quarantine == sum(d.lines for d in drops)  # nothing read twice, nothing skipped
    second = tuple(p.name for p in drops[1].files)
    assert {r["event_id"] for r in bronze if r["device"]} == {
        r["event_id"] for r in bronze if r["_source_file"].endswith(second) and r["event_id"] in new_ids}
    assert {r["event_id"] for r in bronze if r["_rescued"]} == {
        r["event_id"] for r in bronze if r["event_id"] in rescued_ids}
    silver = delta_store.read_table(own.layout.table("silver/clickstream")).to_pylist()
    assert len(silver) == len({r["event_id"] for r in silver})
    for rows in (bronze, silver):  # the ranks beyond int in the widened column, the earlier ones as written
        assert all(r["rank"] == (WIDE if r["_source_file"].endswith(second) else 0) + rank_of(r["event_id"])
                   for r in rows)
    assert all(r["amount"] is not None and "value" not in r for r in silver)  # the producer still sends `value`
    audit = {a["job"]: a for a in checkpoint_audit.outcomes(own) if a["mode"] == "evolve"}
    assert set(audit) == set(MEMBERS) and {a["actor"] for a in audit.values()} == {f"job:{j}" for j in MEMBERS}
    assert all("widened rank (int -> long) and renamed value to amount" in audit[j]["detail"] for j in CHAIN), audit
    assert "reads value as amount, renamed upstream" in audit["gold_user_activity_5m"]["detail"]


@pytest.mark.spark
def test_the_rescued_fields_check_counts_per_field_with_either_engine(spark, settings, registry):
    """The field counts are over every validated row (not a sample), the same with pandas and with Spark."""
    bronze = registry.job("bronze_clickstream")
    table = settings.layout.table(bronze.sink.table)
    rescued = [None] * 30 + ['{"device": "tablet"}'] * 25 + ['{"os": "ios", "device": {"kind": "phone"}}'] * 7
    delta_store.append_rows(table, bronze.output_schema, [{"event_id": f"e{i}", "_rescued": r}
                                                          for i, r in enumerate(rescued)])
    seen = {}
    for engine, threshold in (("pandas", 10**9), ("spark", 0)):
        report = run_quality(replace(settings, dq_spark_threshold_rows=threshold), registry, ["bronze/clickstream"],
                             full=True)
        [check] = report.results
        seen[engine] = json.loads(check.observed_value)
        assert check.engine == engine and not check.success and not report.blocking_failures
    for observed in seen.values():
        assert observed["rows_with_rescued_fields"] == observed["unexpected_count"] == 32
        assert observed["fields"] == {"device": 32, "os": 7}
