"""The CDC chain proved against the database itself (issue 75's proof): the generator's transactions in the local
PostgreSQL, captured by Debezium on the session's Connect worker (`cdc_chain`, tests/support/cdc.py), processed by
the shipped registry's six CDC jobs; the tables then equal what the database holds and the history its committed
transactions imply (tests/support/cdc_oracle.py says how each is taken, never from the engine): once on a healthy
chain, read by the Python reader and by name through the SQL endpoint, and once over two generator runs with a job
driver killed twice, the Connect worker killed while the generator commits and the database restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from include.cdc.capture import end_offsets
from include.registry import Registry, Trigger, load_registry
from include.settings import Settings, load_settings
from spark_jobs.streaming_query import run_job
from tests.support import cdc_oracle as oracle
from tests.support.cdc import TOPICS, CdcChain, messages, query
from tests.support.helpers import LAKEHOUSE, REPO, run_cli, wait_for
from tests.support.kill_hooks import kill_env

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.cdc, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)
CDC_JOBS = ("bronze_customers", "silver_customers", "silver_customers_history", "bronze_orders", "silver_orders",
            "gold_customer_order_totals")


@dataclass(frozen=True)
class Lakehouse:
    """A fresh lakehouse on the session's chain: the suite's registry (the shipped one), its root, a `lakehouse`
    command's environment."""

    settings: Settings
    env: dict
    registry: Registry

    @property
    def jobs(self) -> list[str]:
        return [job for job in self.registry.order if job in CDC_JOBS]


@pytest.fixture(scope="module")
def house(cdc_chain: CdcChain, tmp_path_factory) -> Lakehouse:
    """The module's lakehouse: the first test processes the chain's changes so far, the second goes on from there
    through its faults (alone, it processes them all in its killed drivers)."""
    root = tmp_path_factory.mktemp("shop") / "lakehouse"
    chain = cdc_chain.settings
    settings = replace(load_settings(), root=root, cdc_postgres_port=chain.cdc_postgres_port,
                       connect_url=chain.connect_url, cdc_database_url="")
    env = {**os.environ, "LAKEHOUSE_ROOT": str(root), "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_CDC_POSTGRES_PORT": str(chain.cdc_postgres_port), "LAKEHOUSE_CONNECT_URL": chain.connect_url}
    for name in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS", "LAKEHOUSE_CDC_DATABASE_URL"):
        env.pop(name, None)
    registry = load_registry(settings.registry_path)
    assert set(CDC_JOBS) <= set(registry.order)
    return Lakehouse(settings, env, registry)


def generate(chain: CdcChain, events: int, seed: int) -> list[dict]:
    """`lakehouse generate --source shop`: its committed transactions (the oracle file it wrote)."""
    result = chain.cli("generate", "--source", "shop", "--events", str(events), "--seed", str(seed), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    return [json.loads(line) for line in Path(summary["oracle"]).read_text().splitlines()]


def run_in_driver(spark, house: Lakehouse) -> None:
    """The six jobs, available-now, one after another in the worker's driver."""
    for job in house.jobs:
        run_job(spark, house.settings, house.registry, job, AVAILABLE_NOW)


def run_killed(house: Lakehouse, jobs: list[str], job: str, point: str, batch: int) -> None:
    """`lakehouse run` of `jobs` (one driver, dependency order), SIGKILLed at `job`'s `point` of `batch`."""
    killed = run_cli(["run", *jobs], {**house.env, **kill_env(job, point, batch)}, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert f"test hook: SIGKILL at job={job} point={point} batch={batch}" in killed.stderr, killed.stderr[-3000:]


def next_batch(house: Lakehouse, job: str) -> int:
    from include.checkpoints.reader import latest_committed_batch

    latest = latest_committed_batch(house.settings.layout.checkpoint(job))
    return 0 if latest is None else latest + 1


@dataclass(frozen=True)
class Expected:
    customers: dict[int, dict]
    orders: dict[int, dict]
    history: list[dict]
    totals: dict[int, tuple]  # customer_id -> (count, sum(amount)) of the orders the database holds
    emptied: set[int]  # customers who had an order captured and hold none now: gold may keep a row of zeros


def expected(chain: CdcChain) -> Expected:
    """The tables as the database and the generator's record say they must be now (tests/support/cdc_oracle.py)."""
    settings = chain.settings
    runs = oracle.oracle_runs(settings)
    before = Path(chain.first_run["oracle"]).stem  # committed before `cdc up`: the first snapshot holds their rows
    since = [tx for run, lines in runs.items() if run != before for tx in lines]
    snapshot, taken = {}, {}
    for table in TOPICS:
        snapshot[table], taken[table] = oracle.first_snapshot(chain.bootstrap, table)
    assert snapshot == oracle.replayed(runs[before]), "the first snapshot is not the first run's rows"
    history = oracle.expected_history(snapshot["customers"], taken["customers"], since,
                                      oracle.commit_times(settings, [tx["txid"] for tx in since]))
    ordered = {o["customer_id"] for o in snapshot["orders"].values()} | {
        c["after"]["customer_id"] for tx in since for c in tx["changes"] if c["table"] == "public.orders" and c["after"]}
    totals = oracle.database_totals(settings)
    return Expected(oracle.database_rows(settings, "customers"), oracle.database_rows(settings, "orders"), history,
                    totals, ordered - set(totals))


def assert_gold(found: dict[int, tuple], want: Expected) -> None:
    """gold/customer_order_totals against the database's GROUP BY: the same count and (to the cent, summed in
    doubles) amount for every customer with orders; a row for no other customer but one whose orders were all deleted,
    with 0 and 0.0 (the job keeps the key it summed to nothing: the GROUP BY has no row for it)."""
    held = {k: v for k, v in found.items() if v[0] != 0}
    assert set(held) == set(want.totals), {"missing": sorted(set(want.totals) - set(held)),
                                           "unexpected": sorted(set(held) - set(want.totals))}
    wrong = {k: (held[k], want.totals[k]) for k in held
             if held[k][0] != want.totals[k][0] or abs(held[k][1] - float(want.totals[k][1])) > 1e-6}
    assert not wrong, wrong
    zeros = {k: v for k, v in found.items() if v[0] == 0}
    assert set(zeros) <= want.emptied and all(abs(total) < 1e-6 for _, total in zeros.values()), zeros


def assert_tables_exact(house: Lakehouse, want: Expected) -> None:
    """The four tables, read by the Python reader, equal the oracle; at most one row per key (type 1), one current
    version per key (type 2)."""
    settings = house.settings
    for table, rows in (("customers", want.customers), ("orders", want.orders)):
        found = oracle.keyed(oracle.table_rows(settings, f"silver/{table}"), oracle.COLUMNS[table])
        diff = oracle.differences(found, rows)
        assert not any(diff.values()), (f"silver/{table}", diff)
    history = oracle.history_rows(settings)
    current = [v["id"] for v in history if v["__end_at"] is None]
    assert len(current) == len(set(current)), sorted(k for k in current if current.count(k) > 1)
    diff = oracle.history_differences(history, want.history)
    assert not diff, ("silver/customers_history", len(diff), dict(list(diff.items())[:5]))
    totals = {r["customer_id"]: (r["order_count"], r["total_amount"])
              for r in oracle.table_rows(settings, "gold/customer_order_totals")}
    assert_gold(totals, want)


def assert_bronze_commit_times(chain: CdcChain, house: Lakehouse) -> None:
    """Every change bronze holds carries its transaction's commit time as PostgreSQL recorded it (Debezium's
    `source.ts_us`): the times the history's intervals are made of."""
    for table in TOPICS:
        rows = [r for r in oracle.table_rows(house.settings, f"bronze/{table}") if r["_cdc_op"] in ("c", "u", "d")]
        assert rows
        times = oracle.commit_times(chain.settings, sorted({r["_cdc_tx_id"] for r in rows}))
        wrong = [(r["_cdc_tx_id"], r["_cdc_commit_time"], times[r["_cdc_tx_id"]]) for r in rows
                 if oracle.instant(r["_cdc_commit_time"]) != times[r["_cdc_tx_id"]]]
        assert not wrong, (table, wrong[:10])


@pytest.mark.timeout(900)
def test_the_tables_equal_the_database_and_the_history_its_committed_transactions_imply(cdc_chain, house, spark):
    """A generator run captured by the chain and processed available-now in the worker's driver: silver/customers
    and silver/orders are `SELECT *` of their tables, silver/customers_history the history of every committed
    transaction since the first snapshot at PostgreSQL's commit times, gold/customer_order_totals the database's
    GROUP BY; by the Python reader, and by name through `lakehouse query` on the SQL endpoint."""
    chain = cdc_chain
    oracle.wait_delivered(chain.bootstrap, generate(chain, events=300, seed=31))
    run_in_driver(spark, house)
    want = expected(chain)
    assert want.history and any(v["__end_at"] is not None for v in want.history)
    assert_tables_exact(house, want)
    assert_bronze_commit_times(chain, house)
    assert_tables_by_name(house, want)


# ---------------------------------------------------------------------------------------------------------------
# By name, through the SQL endpoint

NAMED = {  # one statement, one JDBC client: each table's columns as text, in eight columns
    "customers": "SELECT 'customers' AS t, id, name AS a, email AS b, country AS c, {ts(updated_at)} AS d, "
                 "NULL AS e, NULL AS f FROM silver.customers",
    "orders": "SELECT 'orders', id, CAST(customer_id AS STRING), CAST(amount AS STRING), status, {ts(updated_at)}, "
              "NULL, NULL FROM silver.orders",
    "history": "SELECT 'history', id, name, email, country, {ts(updated_at)}, {ts(__start_at)}, {ts(__end_at)} "
               "FROM silver.customers_history",
    "totals": "SELECT 'totals', customer_id, CAST(order_count AS STRING), CAST(total_amount AS STRING), NULL, NULL, "
              "NULL, NULL FROM gold.customer_order_totals",
}


def _statement() -> str:
    def ts(column: str) -> str:
        return f"date_format({column}, \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\")"

    parts = []
    for text in NAMED.values():
        for column in ("updated_at", "__start_at", "__end_at"):
            text = text.replace(f"{{ts({column})}}", ts(column))
        parts.append(text)
    return " UNION ALL ".join(parts)


def assert_tables_by_name(house: Lakehouse, want: Expected) -> None:
    """`lakehouse catalog up` (its sync names the tables the jobs wrote), `lakehouse sql up`, then the four tables
    by name in one `lakehouse query` (beeline, JDBC) against the same oracle."""
    from include.daemons import free_port_block

    env = {**house.env, "LAKEHOUSE_METASTORE_URI": f"thrift://127.0.0.1:{free_port_block([0])}",
           "LAKEHOUSE_SQL_PORT": str(free_port_block([0])), "LAKEHOUSE_SQL_PASSWORD": "shop-by-name"}
    try:
        up = run_cli(["catalog", "up"], env, timeout=300)
        assert up.returncode == 0, up.stderr[-3000:]
        assert "registered silver.customers_history" in up.stdout, up.stdout
        endpoint = run_cli(["sql", "up"], env, timeout=400)
        assert endpoint.returncode == 0, endpoint.stderr[-3000:]
        result = run_cli(["query", "--format", "json", _statement()], env, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    finally:
        run_cli(["sql", "down"], env)
        run_cli(["catalog", "down"], env)
    rows = json.loads(result.stdout)
    by = {name: [r for r in rows if r["t"] == name] for name in NAMED}
    text = {"a": None, "b": None, "c": None, "d": None, "e": None, "f": None}
    assert all(set(r) == {"t", "id", *text} for r in rows), rows[:3]

    def number(value) -> int:
        return int(value)

    def time(value) -> str | None:  # beeline's NULL
        return None if value in (None, "", "NULL") else value

    customers = oracle.keyed([{"id": number(r["id"]), "name": r["a"], "email": r["b"], "country": r["c"],
                               "updated_at": r["d"]} for r in by["customers"]], oracle.CUSTOMERS)
    assert not any(oracle.differences(customers, want.customers).values())
    orders = oracle.keyed([{"id": number(r["id"]), "customer_id": number(r["a"]), "amount": float(r["b"]),
                            "status": r["c"], "updated_at": r["d"]} for r in by["orders"]], oracle.ORDERS)
    assert not any(oracle.differences(orders, want.orders).values())
    history = sorted((oracle.normalized({"id": number(r["id"]), "name": r["a"], "email": r["b"], "country": r["c"],
                                         "updated_at": r["d"], "__start_at": time(r["e"]), "__end_at": time(r["f"])},
                                        oracle.HISTORY) for r in by["history"]), key=oracle.version_order)
    assert not oracle.history_differences(history, want.history)
    assert_gold({number(r["id"]): (number(r["a"]), float(r["b"])) for r in by["totals"]}, want)


# ---------------------------------------------------------------------------------------------------------------
# Over two generator runs, with faults


def kill_connect_worker(chain: CdcChain) -> int:
    """SIGKILL the Connect worker `cdc up` started (its pid file under the chain's state); its pid, once gone."""
    from include.cdc.connect import answers, worker_files
    from include.daemons import alive

    pid = worker_files(chain.settings).daemon.running_pid()
    assert pid is not None, "no Connect worker runs"
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid) and not answers(chain.settings.connect_url, timeout=1), 60,
             "the killed Connect worker to be gone")
    return pid


def restart_database(chain: CdcChain) -> None:
    """pg_ctl stop (fast) then start of the chain's local PostgreSQL."""
    from include.cdc.database import local_server

    server = local_server(chain.settings)
    assert server.stop()
    server.start("restarting the server")


@dataclass
class HeldGenerator:
    """`lakehouse generate --source shop` held after its first transaction: this test holds the row lock of the
    customer its second transaction updates (the hot one, the smallest id)."""

    process: subprocess.Popen
    conn: object

    @classmethod
    def start(cls, chain: CdcChain, events: int, seed: int) -> HeldGenerator:
        from include.cdc import database

        conn = database.connect(database.address(chain.settings))
        conn.autocommit = False
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM public.customers ORDER BY id LIMIT 1 FOR UPDATE")
        process = subprocess.Popen([*LAKEHOUSE, "generate", "--source", "shop", "--events", str(events), "--seed",
                                    str(seed)], env=chain.env, cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        return cls(process, conn)

    def waiting(self, chain: CdcChain) -> bool:
        """Its second transaction waits for this test's lock (asked on a connection of its own: a transaction sees
        pg_stat_activity as it was at its first look)."""
        return query(chain.settings, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'shop' AND "
                                     "wait_event_type = 'Lock' AND query LIKE 'UPDATE public.customers %%'") == [(1,)]

    def release(self) -> list[dict]:
        """Let it go on; its transactions once it has committed them all."""
        self.conn.rollback()
        self.conn.close()
        stdout, stderr = self.process.communicate(timeout=180)
        assert self.process.returncode == 0, stderr[-3000:]
        return [json.loads(line) for line in Path(json.loads(stdout)["oracle"]).read_text().splitlines()]

    def abandon(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if not self.conn.closed:
            self.conn.close()


@pytest.mark.full  # make test: the database oracle above, and a kill between a batch's commits (test_cdc_apply.py)
@pytest.mark.timeout(1200)
def test_over_two_runs_with_drivers_connect_and_the_database_killed_the_tables_stay_exact(cdc_chain, house, spark):
    """After the first test's run, the database restarts (pg_ctl) under the running connector. The second run is held
    after its first transaction, which the connector delivers once it is back; the Connect worker is SIGKILLed before
    it commits its offsets, and the run commits the rest with no worker; `cdc up` starts it again and Debezium
    replays from its last committed offset (duplicates on the topic). Then a `lakehouse run` of the six jobs is
    SIGKILLed between silver_customers' two commits (the table, then its deletes table), one of
    silver_customers_history after its Delta commit (its batch not yet in the checkpoint), and the worker's driver
    runs the six again: the tables are exact, the type 1 tables hold each key once and the history one current version per key;
    bronze holds every message of the topics once, duplicates included."""
    chain = cdc_chain
    held = None
    try:
        restart_database(chain)
        before = end_offsets(chain.bootstrap, list(TOPICS.values()))
        newest = query(chain.settings, "SELECT max(id) FROM public.customers")[0][0]
        held = HeldGenerator.start(chain, events=200, seed=42)
        wait_for(lambda: held.waiting(chain), 120, "the generator's second transaction to wait for the test's lock")
        inserted = {r[0] for r in query(chain.settings, "SELECT id FROM public.customers WHERE id > %s", (newest,))}
        assert len(inserted) == 3, inserted  # its first transaction: three customers
        # the run's first transaction on the topic: the connector streams again after the database's restart
        oracle.wait_inserted(chain.bootstrap, "customers", before[TOPICS["customers"]], inserted)
        kill_connect_worker(chain)
        second = held.release()
    finally:
        if held is not None:
            held.abandon()
        up = chain.cli("cdc", "up")  # the session's chain as the next test expects it, and Debezium's replay
    assert up.returncode == 0, up.stdout + up.stderr[-3000:]
    assert "Kafka Connect worker up at" in up.stderr, up.stderr
    assert len(second) > 10
    runs = oracle.oracle_runs(chain.settings)
    since = [tx for run, lines in runs.items() if run != Path(chain.first_run["oracle"]).stem for tx in lines]
    on_topics = oracle.wait_delivered(chain.bootstrap, since)
    again = oracle.replays(on_topics)

    run_killed(house, house.jobs, "silver_customers", "between_tables", next_batch(house, "silver_customers"))
    history = "silver_customers_history"
    run_killed(house, [history], history, "after_commit", next_batch(house, history))
    run_in_driver(spark, house)
    assert_tables_exact(house, expected(chain))
    for table, found in on_topics.items():  # bronze: each message of the topic once, duplicates included
        offsets = sorted(r["_kafka_offset"] for r in oracle.table_rows(house.settings, f"bronze/{table}"))
        assert offsets == list(range(len(found))), (table, len(offsets), len(found))
    print(f"changes on the topics more than once (Debezium's replays): {again}")



# ---------------------------------------------------------------------------------------------------------------
# A full refresh once retention took changes (last in the module: the topic keeps its first messages no longer)


@pytest.mark.timeout(900)
def test_a_full_refresh_after_retention_took_changes_snapshots_again_and_duplicates_nothing(cdc_chain, house, spark):
    """The customers' topic loses its first half (deleted as retention deletes, `DeleteRecords`). A dry run of
    `checkpoint full-refresh bronze_customers --cascade` says so and that the connector takes a new snapshot first,
    and that silver_customers is rebuilt from bronze (nothing asked of the database); the action then takes it
    (`op: r` rows again on the topic) and rebuilds the chain: silver/customers is `SELECT *` of the table again, each
    key once, the history one current version per key equal to it, the gold totals the database's GROUP BY."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from include.cdc.database import address
    from include.checkpoints.request import CheckpointRequest
    from spark_jobs.checkpoint_actions.apply import apply

    chain, topic = cdc_chain, TOPICS["customers"]
    oracle.wait_delivered(chain.bootstrap, generate(chain, events=120, seed=47))
    run_in_driver(spark, house)
    end = end_offsets(chain.bootstrap, [topic])[topic]
    admin = AdminClient({"bootstrap.servers": chain.bootstrap})  # held: its futures end with it
    for future in admin.delete_records([TopicPartition(topic, 0, end // 2)]).values():
        future.result(timeout=30)
    request = CheckpointRequest("full-refresh", ("bronze_customers",), options={"cascade": True}, actor="cdc-test")

    planned = {row["job"]: row["detail"] for row in
               apply(None, house.settings, house.registry, replace(request, dry_run=True))}
    assert f"retention deleted from {topic} its first {end // 2} messages: the connector lakehouse-shop takes a new " \
           "snapshot first" in planned["bronze_customers"], planned
    assert "bronze/customers keeps every change captured: the rebuild reads it, the topic is not read again and " \
           "nothing is asked of the database" in planned["silver_customers"], planned

    rows_now = len(oracle.database_rows(chain.settings, "customers"))
    settings = replace(house.settings, cdc_database_url=address(chain.settings).url)  # the chain's, by its URL
    apply(spark, settings, house.registry, request)
    # after the topic's end before the action: the snapshot's rows, each once (changes the slot holds from before
    # its position may be delivered again: Connect delivers at least once)
    since = messages(chain.bootstrap, topic)[end - end // 2:]
    assert len([v for _, v in since if v and v["op"] == "r"]) == rows_now, (len(since), rows_now)

    customers = oracle.keyed(oracle.table_rows(house.settings, "silver/customers"), oracle.CUSTOMERS)
    want = oracle.database_rows(chain.settings, "customers")
    assert not any(oracle.differences(customers, want).values())
    assert len(oracle.table_rows(house.settings, "silver/customers")) == len(want)
    current = [v for v in oracle.history_rows(house.settings) if v["__end_at"] is None]
    assert sorted(v["id"] for v in current) == sorted(want)
    assert not any(oracle.differences(oracle.keyed(current, oracle.CUSTOMERS), want).values())
    totals = {r["customer_id"]: (r["order_count"], r["total_amount"])
              for r in oracle.table_rows(house.settings, "gold/customer_order_totals")}
    held = {k: v for k, v in totals.items() if v[0]}
    database = oracle.database_totals(chain.settings)
    assert set(held) == set(database)
    assert all(held[k][0] == n and abs(held[k][1] - float(amount)) < 1e-6 for k, (n, amount) in database.items())
