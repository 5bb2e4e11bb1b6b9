"""The change data capture chain on real parts (include/cdc): the local PostgreSQL with logical decoding, Debezium's
connector on a Kafka Connect worker in distributed mode, the session's broker. The chain is started once per worker
(`cdc_chain`, tests/support/cdc.py) and these tests run in this order on it: the snapshot then every committed change
on the topics, the status, a second `up`, health and supervision, bad input, then `down` and `down --purge`. The
generator's plan is checked without any server."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from include.cdc import shop
from include.cdc.shop import HARD_CASES_EVENTS, State, plan
from include.daemons.postgres import ELSEWHERE
from tests.support.cdc import CONNECTOR, SAMPLES, TOPICS, cdc_registry, messages, query, write_registry


def _replayed(transactions: list[shop.Transaction], state: State | None = None) -> dict[str, dict[int, dict]]:
    rows: dict[str, dict[int, dict]] = {"customers": {}, "orders": {}} if state is None else \
        {"customers": dict(state.customers), "orders": dict(state.orders)}
    for tx in transactions:
        for change in tx.changes:
            if change.op == "d":
                assert change.key in rows[change.table], change
                rows[change.table].pop(change.key)
            else:
                assert (change.key in rows[change.table]) == (change.op == "u"), change
                rows[change.table][change.key] = change.after
            for order in rows["orders"].values():  # the foreign key holds after every statement
                assert order["customer_id"] in rows["customers"], (tx, order)
    return rows


def test_the_generator_plans_the_same_transactions_for_a_seed_with_every_hard_case():
    first, again, other = plan(200, 5), plan(200, 5), plan(200, 6)
    assert first == again and first != other
    assert sum(len(tx.changes) for tx in first) == 200 and sum(len(tx.changes) for tx in plan(17, 5)) == 17
    _replayed(first)  # inserts of new keys, updates and deletes of existing ones, the foreign key kept
    hot = [c.key for tx in first for c in tx.changes if c.op == "u" and c.table == "customers"]
    assert max(hot.count(k) for k in set(hot)) >= 10  # one key updated many times
    assert any(len(tx.changes) >= 3 and len({c.key for c in tx.changes}) >= 3 for tx in first)  # several rows
    assert any(len(tx.changes) == 3 and {(c.op, c.key) for c in tx.changes} == {("u", tx.changes[0].key)}
               for tx in first)  # one key three times in one transaction
    assert any(c.noop and c.op == "u" for tx in first for c in tx.changes)  # an update that changes nothing
    assert any([(c.op, c.key) for c in tx.changes] == [("d", tx.changes[0].key), ("c", tx.changes[0].key)]
               for tx in first)  # a delete then an insert of the same key, in one transaction
    deleted_then = [(i, c.key) for i, tx in enumerate(first) for c in tx.changes if c.op == "d" and len(tx.changes) == 1
                    and c.table == "customers"]
    assert any(any(c.op == "c" and c.key == key for tx in first[i + 1:] for c in tx.changes) for i, key in deleted_then)
    orders = [c for tx in first for c in tx.changes if c.table == "orders"]
    assert {c.op for c in orders} == {"c", "u", "d"}
    stamps = [c.after["updated_at"] for tx in first for c in tx.changes if c.after is not None and not c.noop]
    assert stamps == sorted(stamps) and stamps[0] == datetime(2026, 1, 1, 0, 0, 1, 1000, tzinfo=UTC)


def test_the_generator_plans_on_the_rows_the_tables_hold():
    """A second run starts from the tables as they are (read first): the same plan for the same rows and seed, keys
    after the existing ones, times after the latest."""
    before = State()
    first = plan(120, 1, before)
    rows = _replayed(first)

    def state() -> State:
        return State(customers=dict(rows["customers"]), orders=dict(rows["orders"]),
                     clock=max(r["updated_at"] for t in rows.values() for r in t.values()))

    second = plan(HARD_CASES_EVENTS, 2, state())
    assert second == plan(HARD_CASES_EVENTS, 2, state())
    _replayed(second, state())
    assert min(c.after["updated_at"] for tx in second for c in tx.changes if c.after and not c.noop) > state().clock
    assert all(c.key > max(rows["customers"]) for tx in second[:1] for c in tx.changes)  # new customers' keys


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _same_row(message_after: dict, oracle_after: dict) -> bool:
    return ({k: v for k, v in message_after.items() if k != "updated_at"}
            == {k: v for k, v in oracle_after.items() if k != "updated_at"}
            and _instant(message_after["updated_at"]) == _instant(oracle_after["updated_at"]))


def _oracle(settings) -> list[dict]:
    return [json.loads(line) for path in sorted((settings.layout.cdc / "shop").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


@pytest.mark.cdc
@pytest.mark.kafka
def test_up_captures_the_snapshot_then_every_committed_change_in_commit_order(cdc_chain):
    chain = cdc_chain
    customers = {row[0] for row in query(chain.settings, "SELECT id FROM public.customers")}
    orders = {row[0] for row in query(chain.settings, "SELECT id FROM public.orders")}
    snapshot = {name: messages(chain.bootstrap, topic, at_least=len(customers if name == "customers" else orders))
                for name, topic in TOPICS.items()}
    assert {m[0]["id"] for m in snapshot["customers"]} == customers and customers  # the rows as `up` found them
    assert {m[0]["id"] for m in snapshot["orders"]} == orders
    assert all(value["op"] == "r" and value["source"]["snapshot"] != "false" for m in snapshot.values()
               for _, value in m)

    second = chain.cli("generate", "--source", "shop", "--events", "60", "--seed", "12", timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]
    run = json.loads(second.stdout)
    oracle = [json.loads(line) for line in open(run["oracle"])]
    assert run["changes"] == 60 == sum(len(tx["changes"]) for tx in oracle)
    for name, topic in TOPICS.items():
        expected = [c | {"txid": tx["txid"]} for tx in oracle for c in tx["changes"] if c["table"] == f"public.{name}"]
        count = len(snapshot[name]) + sum(2 if c["op"] == "d" else 1 for c in expected)
        found = messages(chain.bootstrap, topic, at_least=count)[len(snapshot[name]):]
        assert len(found) == count - len(snapshot[name]), name  # nothing more, nothing missing
        changes = iter(found)
        for change in expected:  # commit order, each change's key, op, transaction and row
            key, value = next(changes)
            assert (key, value["op"], value["source"]["txId"]) == (change["key"], change["op"], change["txid"])
            if change["op"] == "d":
                assert value["after"] is None and value["before"]["id"] == change["key"]["id"]
                assert next(changes) == (change["key"], None)  # the tombstone
            else:
                assert _same_row(value["after"], change["after"]), (value["after"], change["after"])
        lsns = [value["source"]["lsn"] for _, value in found if value]
        assert lsns == sorted(lsns)
    # the oracle of both runs, replayed in commit order, is the database
    rows: dict[str, dict] = {"public.customers": {}, "public.orders": {}}
    for tx in _oracle(chain.settings):
        for change in tx["changes"]:
            rows[change["table"]].pop(change["key"]["id"], None)
            if change["after"] is not None:
                rows[change["table"]][change["key"]["id"]] = change["after"]
    for table, kept in rows.items():
        columns = shop.COLUMNS[table.split(".")[1]]
        found = {r[0]: dict(zip(columns, r, strict=True)) for r in query(chain.settings, f"SELECT {', '.join(columns)} "
                                                                         f"FROM {table}")}
        assert set(found) == set(kept), table
        for key, row in found.items():
            row = {**row, "updated_at": row["updated_at"].isoformat(), **({"amount": float(row["amount"])}
                                                                          if "amount" in row else {})}
            assert _same_row(row, kept[key]), (row, kept[key])


@pytest.mark.cdc
@pytest.mark.kafka
def test_the_captured_samples_have_the_shape_the_chain_writes(cdc_chain):
    """tests/support/debezium_samples.json (the engine's parser is built on it) against what this chain writes now:
    the same fields, of the same JSON types, for each kind of message."""
    samples = json.loads(SAMPLES.read_text())
    live = messages(cdc_chain.bootstrap, TOPICS["customers"]) + messages(cdc_chain.bootstrap, TOPICS["orders"])

    def alike(live_value, sample_value, where: str) -> None:
        """The same fields, each of the same JSON type where both hold one (a field null in one message may hold a
        value in another: a delete's `after`, the first LSN of `source.sequence`)."""
        if isinstance(sample_value, dict) and isinstance(live_value, dict):
            assert set(live_value) == set(sample_value), where
            for name in sample_value:
                alike(live_value[name], sample_value[name], f"{where}.{name}")
        elif None not in (live_value, sample_value):
            assert type(live_value) is type(sample_value), where

    for table in ("customers", "orders"):
        for kind, sample in samples[table].items():
            op = None if sample["value"] is None else sample["value"]["op"]
            candidates = [(k, v) for k, v in live if (v is None if op is None else v and v["op"] == op)
                          and (v is None or v["source"]["table"] == table)]
            assert candidates, (table, kind)
            alike(candidates[-1][0], sample["key"], f"{table} {kind} key")
            if op is not None:
                alike(candidates[-1][1], sample["value"], f"{table} {kind} value")
                assert len(json.loads(candidates[-1][1]["source"]["sequence"])) == 2


@pytest.mark.cdc
@pytest.mark.kafka
def test_status_json_names_the_database_the_worker_each_connector_and_its_slot(cdc_chain):
    result = cdc_chain.cli("cdc", "status", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    info = json.loads(result.stdout)
    port = cdc_chain.settings.cdc_postgres_port
    assert info["database"] == f"postgresql://lakehouse@127.0.0.1:{port}/shop"  # no password
    from include.cdc.database import address

    assert address(cdc_chain.settings).password not in result.stdout
    assert info["connect_url"] == cdc_chain.settings.connect_url and info["up"] is True
    connector = info["connectors"][CONNECTOR]
    assert connector["state"] == "RUNNING" and connector["tasks"] == ["RUNNING"]
    assert connector["slot"] == "lakehouse_shop" and connector["slot_active"] is True
    assert isinstance(connector["slot_lag_bytes"], int) and connector["slot_lag_bytes"] >= 0
    from confluent_kafka.admin import AdminClient, ConfigResource

    from include.cdc.connect import INTERNAL_TOPICS

    admin = AdminClient({"bootstrap.servers": cdc_chain.bootstrap})
    for topic in INTERNAL_TOPICS.values():  # the worker's own topics, made by it: compacted, one replica
        configs = admin.describe_configs([ConfigResource("topic", topic)])
        config = next(iter(configs.values())).result(30)
        assert config["cleanup.policy"].value == "compact", topic
    text = cdc_chain.cli("cdc", "status")
    assert f"connector {CONNECTOR}: RUNNING, tasks RUNNING; slot lakehouse_shop active" in text.stdout


@pytest.mark.cdc
@pytest.mark.kafka
def test_a_second_up_changes_nothing(cdc_chain):
    before = {name: len(messages(cdc_chain.bootstrap, topic)) for name, topic in TOPICS.items()}
    _, config = cdc_chain.rest("GET", f"/connectors/{CONNECTOR}/config")
    again = cdc_chain.cli("cdc", "up")
    assert again.returncode == 0, again.stderr
    assert "local CDC database runs at" in again.stderr and "already answers" in again.stderr
    assert f"connector {CONNECTOR} unchanged, running (publication lakehouse_shop unchanged;" in again.stderr
    assert cdc_chain.rest("GET", f"/connectors/{CONNECTOR}/config")[1] == config
    assert query(cdc_chain.settings, "SELECT slot_name FROM pg_replication_slots") == [("lakehouse_shop",)]
    assert {name: len(messages(cdc_chain.bootstrap, topic)) for name, topic in TOPICS.items()} == before  # no snapshot


def _health_line(chain, wanted: str) -> str | None:
    """`lakehouse health`'s line of the connector, once it says `wanted`."""
    health = chain.cli("health")
    assert health.returncode == 0, health.stderr
    line = next(line for line in health.stdout.splitlines() if line.startswith(CONNECTOR))
    return line if wanted in line else None


@pytest.mark.cdc
@pytest.mark.kafka
def test_health_names_a_failed_task_and_live_supervision_restarts_it_with_an_alert(cdc_chain):
    from include.cdc import database, slots
    from include.ops.connectors import supervise_connectors
    from include.registry import load_registry
    from include.storage.reader import read_table
    from tests.support.helpers import wait_for

    query(cdc_chain.settings, "DROP PUBLICATION lakehouse_shop")  # its task fails at its next start
    cdc_chain.rest("POST", f"/connectors/{CONNECTOR}/restart?includeTasks=true")
    wait_for(lambda: cdc_chain.rest("GET", f"/connectors/{CONNECTOR}/status")[1]["tasks"][0]["state"] == "FAILED",
             60, "the connector's task to fail")
    line = wait_for(lambda: _health_line(cdc_chain, "slot lakehouse_shop inactive: no connector reads it"), 60,
                    "health to name the inactive slot")
    assert "problem" in line and "task 0 FAILED: " in line and "Publication autocreation is disabled" in line

    conn = database.connect(database.address(cdc_chain.settings))
    try:
        with conn.cursor() as cur:  # what a person does about it; then the supervisor restarts the task
            slots.ensure_publication(cur, "shop", load_registry(cdc_chain.settings.registry_path).cdc_sources()["shop"])
    finally:
        conn.close()
    assert supervise_connectors(cdc_chain.settings, ["shop"], run_id="test") == {CONNECTOR: "restarted"}
    wait_for(lambda: cdc_chain.rest("GET", f"/connectors/{CONNECTOR}/status")[1]["tasks"][0]["state"] == "RUNNING",
             60, "the restarted task to run")
    alerts = read_table(cdc_chain.settings.layout.ops_table("alerts")).to_pylist()
    assert [(a["job"], a["severity"]) for a in alerts] == [(CONNECTOR, "warning")]
    assert "task 0 FAILED" in alerts[0]["reason"] and "restarted through Connect's REST API" in alerts[0]["reason"]
    assert supervise_connectors(cdc_chain.settings, ["shop"]) == {CONNECTOR: "running"}


@pytest.mark.cdc
@pytest.mark.kafka
def test_health_names_a_stopped_connector_and_supervision_leaves_it_stopped(cdc_chain):
    from include.ops.connectors import supervise_connectors
    from tests.support.helpers import wait_for

    cdc_chain.rest("PUT", f"/connectors/{CONNECTOR}/stop")
    wait_for(lambda: cdc_chain.rest("GET", f"/connectors/{CONNECTOR}/status")[1]["connector"]["state"] == "STOPPED",
             60, "the connector to stop")
    try:
        line = wait_for(lambda: _health_line(cdc_chain, "slot lakehouse_shop inactive"), 60, "the slot to be idle")
        assert "problem" in line and "connector STOPPED" in line
        assert supervise_connectors(cdc_chain.settings, ["shop"]) == {CONNECTOR: "stopped"}  # a person stopped it
    finally:
        cdc_chain.rest("PUT", f"/connectors/{CONNECTOR}/resume")
    wait_for(lambda: cdc_chain.cli("cdc", "status").returncode == 0, 60, "the connector to run again")


@pytest.mark.cdc
@pytest.mark.kafka
@pytest.mark.parametrize("case", ["malformed url", "no such table", "keys not the primary key",
                                  "no logical decoding"])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(cdc_chain, tmp_path, case):
    from include.cdc.database import address
    from include.daemons import free_port_block
    from include.daemons.postgres import LocalPostgres

    shop_url = address(cdc_chain.settings).url
    sources = cdc_registry()["sources"]
    customers = {**sources["customers"], "cdc": {**sources["customers"]["cdc"], "database": "crm"}}
    registry = {"no such table": {"customers": {**customers, "cdc": {**customers["cdc"], "table": "public.missing"}}},
                "keys not the primary key": {"customers": {**customers, "cdc": {**customers["cdc"], "keys": ["email"]}}},
                }.get(case, {"customers": customers})
    env = {"LAKEHOUSE_REGISTRY": str(write_registry(tmp_path / "registry.yaml", cdc_registry(registry))),
           "LAKEHOUSE_CDC_DATABASE_URL": "postgresql://lakehouse@127.0.0.1/" if case == "malformed url" else shop_url}
    server = None
    if case == "no logical decoding":  # a server of its own, as initdb makes it: wal_level = replica
        server = LocalPostgres("no logical decoding", tmp_path / "pg", free_port_block([0]), lambda: "secret")
        server.initialize("")
        server.start()
        env["LAKEHOUSE_CDC_DATABASE_URL"] = f"postgresql://postgres:secret@127.0.0.1:{server.port}/postgres"
    try:
        result = cdc_chain.cli("cdc", "up", **env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        said = {"malformed url": "LAKEHOUSE_CDC_DATABASE_URL must be postgresql://user:password@host:port/database",
                "no such table": "table public.missing does not exist in postgresql://lakehouse@127.0.0.1:",
                "keys not the primary key": "the primary key of public.customers in postgresql://lakehouse@127.0.0.1:",
                "no logical decoding": "has wal_level = replica, not logical: set `wal_level = logical` in its "
                                       "postgresql.conf"}[case]
        assert said in result.stderr
        if case == "keys not the primary key":
            assert "is (id), not the registry's keys (email): correct the source's `cdc.keys`" in result.stderr
        if server is not None:
            conn = server.connect()
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_publication")
                assert cur.fetchone()[0] == 0
            conn.close()
    finally:
        if server is not None:
            server.stop()
            if server.data_dir().is_relative_to(ELSEWHERE):
                shutil.rmtree(server.data_dir(), ignore_errors=True)
    assert cdc_chain.rest("GET", "/connectors")[1] == [CONNECTOR]  # no connector lakehouse-crm
    assert query(cdc_chain.settings, "SELECT pubname FROM pg_publication") == [("lakehouse_shop",)]


@pytest.mark.cdc
@pytest.mark.kafka
def test_a_broker_that_does_not_answer_is_one_line_and_no_worker_starts(cdc_chain):
    from include.daemons import free_port_block

    dead, worker = free_port_block([0]), f"http://127.0.0.1:{free_port_block([0])}"
    result = cdc_chain.cli("cdc", "up", LAKEHOUSE_KAFKA_BOOTSTRAP=f"127.0.0.1:{dead}", LAKEHOUSE_CONNECT_URL=worker)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert (f"lakehouse cdc up: no Kafka broker answers at 127.0.0.1:{dead}: the Connect worker keeps its connectors, "
            "offsets and statuses there") in result.stderr and "`lakehouse kafka up`" in result.stderr
    from include.cdc.connect import answers

    assert not answers(worker)


@pytest.mark.cdc
@pytest.mark.kafka
def test_the_preflight_check_names_the_problem_of_a_source_and_nothing_when_the_database_is_away(cdc_chain):
    from include.cdc.database import check_source
    from include.registry import build_registry

    sources = cdc_registry()["sources"]
    good = build_registry(cdc_registry()).jobs["bronze_customers"].source
    assert check_source(cdc_chain.settings, good) is None
    keyed = build_registry(cdc_registry({"customers": {**sources["customers"], "cdc": {
        **sources["customers"]["cdc"], "keys": ["id", "email"]}}})).jobs["bronze_customers"].source
    assert "not the registry's keys (id, email)" in check_source(cdc_chain.settings, keyed)
    away = replace(cdc_chain.settings, cdc_database_url="postgresql://u:p@127.0.0.1:1/shop")
    assert check_source(away, good) is None  # the job may still read what its topic holds


@pytest.mark.cdc
@pytest.mark.kafka
def test_a_job_whose_table_the_database_keys_otherwise_is_refused_before_a_jvm(cdc_chain, tmp_path):
    """The one preflight (include/checkpoints/preflight.py) asks the database: one line, exit 2, no driver started,
    nothing written."""
    sources = cdc_registry()["sources"]
    keyed = cdc_registry({"customers": {**sources["customers"], "cdc": {**sources["customers"]["cdc"],
                                                                         "keys": ["email"]}}})
    registry = write_registry(tmp_path / "keyed.yaml", keyed)
    refused = cdc_chain.cli("run", "bronze_customers", LAKEHOUSE_REGISTRY=str(registry), timeout=120)
    assert refused.returncode == 2, refused.stderr[-2000:]
    lines = [x for x in refused.stderr.splitlines() if x.startswith("lakehouse run:")]
    assert len(lines) == 1 and "not the registry's keys (email)" in lines[0], refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and "SparkContext" not in refused.stderr
    assert not (cdc_chain.settings.layout.checkpoint("bronze_customers") / "offsets").exists()


@pytest.mark.cdc
@pytest.mark.kafka
def test_down_keeps_the_slot_a_slot_dropped_meanwhile_means_a_new_snapshot_and_purge_drops_everything(cdc_chain):
    """`down` keeps the slot and says so; a slot a DBA drops while the chain is down (its WAL freed) makes the next
    `up` take a new snapshot and say what was lost; `down --purge`, from a stopped worker (which it starts, and waits
    for until it has read its connectors), deletes the connector and drops the slot and the publication."""
    try:
        _down_then_purge(cdc_chain)
    finally:  # the session's chain, as the next test using it expects it (snapshotted again)
        again = cdc_chain.cli("cdc", "up")
        assert again.returncode == 0, again.stderr


def _down_then_purge(cdc_chain) -> None:
    from include.cdc.database import local_server

    down = cdc_chain.cli("cdc", "down")
    assert down.returncode == 0, down.stderr
    assert "replication slot lakehouse_shop kept: it holds the database's WAL" in down.stdout
    assert "Kafka Connect worker stopped" in down.stdout and "local CDC database stopped" in down.stdout
    assert cdc_chain.cli("cdc", "status").returncode == 1
    line = _health_line(cdc_chain, "the Kafka Connect worker does not answer at")  # a connector that is down
    port = cdc_chain.settings.cdc_postgres_port
    assert "problem" in line and f"the database postgresql://lakehouse@127.0.0.1:{port}/shop does not answer" in line
    _slot_dropped_then_up(cdc_chain)
    assert cdc_chain.cli("cdc", "down").returncode == 0
    purge = cdc_chain.cli("cdc", "down", "--purge")
    assert purge.returncode == 0, purge.stdout + purge.stderr
    assert f"deleted connector(s): {CONNECTOR}" in purge.stdout
    assert "dropped: replication slot lakehouse_shop, publication lakehouse_shop" in purge.stdout
    server = local_server(cdc_chain.settings)
    server.start()  # `down` stopped it: look inside
    try:
        conn = server.connect(database="shop")
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_replication_slots")
            slots = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM pg_publication")
            publications = cur.fetchone()[0]
        conn.close()
    finally:
        server.stop()
    assert (slots, publications) == (0, 0)


def _slot_dropped_then_up(cdc_chain) -> None:
    """The slot dropped behind the stopped connector's back: `up` has it read its tables again (`op: r`)."""
    from include.cdc.database import local_server
    from tests.support.helpers import wait_for

    local_server(cdc_chain.settings).start()
    query(cdc_chain.settings, "SELECT pg_drop_replication_slot('lakehouse_shop')")
    rows = query(cdc_chain.settings, "SELECT count(*) FROM customers")[0][0]
    before = len(messages(cdc_chain.bootstrap, TOPICS["customers"]))
    up = cdc_chain.cli("cdc", "up")
    assert up.returncode == 0, up.stderr
    assert (f"replication slot lakehouse_shop of connector {CONNECTOR} was dropped while the connector kept its "
            "position: the changes since are lost to it, so it takes a new snapshot") in up.stderr
    assert f"connector {CONNECTOR} unchanged, running" in up.stderr

    def snapshot_rows() -> int:
        return sum(1 for _, value in messages(cdc_chain.bootstrap, TOPICS["customers"])[before:]
                   if value and value.get("op") == "r")

    wait_for(lambda: snapshot_rows() >= rows, 120, lambda: f"{rows} `op: r` rows, found {snapshot_rows()}")
    wait_for(lambda: query(cdc_chain.settings, "SELECT active FROM pg_replication_slots") == [(True,)], 60,
             "the connector streaming from its new slot")
