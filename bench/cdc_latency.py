"""Benchmark: change data capture's latency, from a PostgreSQL commit to its row in the SCD type 1 table, live.

    .venv/bin/python bench/cdc_latency.py [--rate 200] [--seconds 120] [--customers 20000] [--rows-per-transaction 1]
                                          [--connections 4] [--warmup 60] [--drain 300] [--bronze-trigger SECONDS]
                                          [--seed 1] [--out PATH] [--keep]

The real chain, private to the run (a lakehouse root, broker, database and Connect worker under a new scratch
directory, on free ports; the default ports are never touched): `lakehouse kafka up`, then `lakehouse cdc up` (the local
PostgreSQL on its own LAKEHOUSE_CDC_POSTGRES_PORT, Debezium on a Connect worker on its own LAKEHOUSE_CONNECT_URL),
then the shipped registry's shop jobs live in one driver, `lakehouse run --group payments`, from a copy of the
registry holding only them (bronze_customers, silver_customers, silver_customers_history, bronze_orders, silver_orders,
gold_customer_order_totals, in the group `payments` with its resources; the group's three payment jobs left out: they
read a topic and silver/clickstream this run has not), their live triggers as shipped (bronze on its 30-second clock
unless `--bronze-trigger`, the rest on their upstream's commits).

First `--customers` rows are inserted in one transaction and waited for in silver/customers (the driver's first
batches, untimed). Then a load generator commits customer updates at `--rate` changes per second for `--seconds`, each
change an `UPDATE` of one row in a transaction of its own (`--rows-per-transaction N`: N rows per transaction, at the
same rate of rows), committed over `--connections` connections side by side (each takes the next transaction due: a
commit waits for its WAL flush, and one connection does not reach 1,000 a second on a busy machine), over the
customers round robin in a shuffled order (a key changes again only after every other one: every change reaches the
type 1 table unless its key changed again before silver's batch took it). The value written is the change's number
(`name = 'bench-<n>'`); its commit time is the client's clock when COMMIT returned. While it runs, the table logs of
bronze/customers and silver/customers are polled for new versions (every 50 ms: when each version became visible to a
reader); afterwards the rows are read from silver's change data feed and bronze's commits. A change's latency: the
time the first silver version holding it (or a later change of its key) became visible, minus its commit time; p50 /
p95 / p99 over the run, over the first `--warmup` seconds of commits and after them (steady). Where the time goes, per
change: Debezium's delivery (the Kafka message's timestamp minus the commit), waiting for bronze's trigger (its
batch's `_ingested_at`, the batch's start, minus the message's timestamp), bronze's batch (its version visible minus
its start), silver (its version visible minus bronze's); and each job's batch durations from `_ops/query_progress`,
the rate the generator reached and the machine's load. The result: bench/results/cdc_latency-<rate>.json (`--out`).
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC
from pathlib import Path
from urllib.parse import unquote

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import lakehouse, load_average, run_facts, write_result  # noqa: E402
from bench.live_latency import percentiles  # noqa: E402
from include.daemons import free_port_block  # noqa: E402
from include.kafka.broker import free_port_pair  # noqa: E402
from include.registry import load_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.storage import delta as delta_store  # noqa: E402

GROUP = "payments"
JOBS = ("bronze_customers", "silver_customers", "silver_customers_history", "bronze_orders", "silver_orders",
        "gold_customer_order_totals")
MEASURED = JOBS[:3]  # the jobs the customers' changes run through
PREFIX = "bench-"


def bench_registry(base: Path, path: Path, bronze_trigger: int | None) -> None:
    """The shipped registry with only the shop's jobs (in their group), and bronze's live trigger if given."""
    raw = yaml.safe_load(base.read_text())
    raw["jobs"] = {job: raw["jobs"][job] for job in JOBS}
    raw["sources"] = {name: raw["sources"][name] for name in ("customers", "orders")}
    raw["groups"] = {GROUP: raw["groups"][GROUP]}
    if bronze_trigger:
        bronze = raw["jobs"]["bronze_customers"]
        bronze["triggers"] = {**bronze.get("triggers", {}), "live": f"processing-time={bronze_trigger} seconds"}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


class VersionWatch(threading.Thread):
    """When each new version of the tables became visible: their logs polled every 50 ms (wall clock)."""

    def __init__(self, tables: dict[str, Path]):
        super().__init__(daemon=True)
        self.tables = tables
        self.seen: dict[str, dict[int, float]] = {name: {} for name in tables}
        self.done = threading.Event()

    def run(self) -> None:
        following = dict.fromkeys(self.tables, 0)
        while not self.done.is_set():
            for name, path in self.tables.items():
                while (path / "_delta_log" / f"{following[name]:020d}.json").exists():
                    self.seen[name][following[name]] = time.time()
                    following[name] += 1
            time.sleep(0.05)


def insert_customers(settings, count: int) -> None:
    """Customers 1..count and an order for each of the first hundred, in one transaction (every job of the group then
    has its tables)."""
    from include.cdc import database

    conn = database.connect(database.address(settings))
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO public.customers (id, name, email, country, updated_at) SELECT n, 'start', "
                        "'c' || n || '@example.com', 'NL', now() FROM generate_series(1, %s) n", (count,))
            cur.execute("INSERT INTO public.orders (id, customer_id, amount, status, updated_at) SELECT n, n, 10.5, "
                        "'placed', now() FROM generate_series(1, %s) n", (min(count, 100),))
        conn.commit()
    finally:
        conn.close()


def generate(settings, keys: list[int], rate: int, seconds: int, per_transaction: int, connections: int,
             committed: dict[int, float]) -> None:
    """Updates at `rate` rows per second for `seconds`, `per_transaction` rows per transaction, over `connections`
    connections taking the next due transaction in turn: change n sets customer keys[n % len(keys)]'s name to
    `bench-<n>`; committed[n] is when its COMMIT returned."""
    from include.cdc import database

    issued, lock, started = [0], threading.Lock(), time.monotonic()

    def commit_due() -> None:
        conn = database.connect(database.address(settings))
        conn.autocommit = False
        try:
            with conn.cursor() as cur:
                while (elapsed := time.monotonic() - started) < seconds:
                    with lock:
                        first = issued[0] if issued[0] + per_transaction <= int(elapsed * rate) else None
                        issued[0] += per_transaction if first is not None else 0
                    if first is None:
                        time.sleep(0.002)
                        continue
                    for n in range(first, first + per_transaction):
                        cur.execute("UPDATE public.customers SET name = %s, updated_at = now() WHERE id = %s",
                                    (f"{PREFIX}{n}", keys[n % len(keys)]))
                    conn.commit()
                    committed.update(dict.fromkeys(range(first, first + per_transaction), time.time()))
        finally:
            conn.close()

    threads = [threading.Thread(target=commit_due) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def wait_for(what: str, ready, timeout: float, every: float = 2.0) -> float:
    """Poll `ready()` until true; the seconds it took (SystemExit naming `what` after `timeout`)."""
    started = time.monotonic()
    while not ready():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - started


def holds(path: Path, where: str) -> bool:
    return (path / "_delta_log").is_dir() and delta_store.count_rows(path, where) > 0


def change_number(name: str | None) -> int | None:
    return int(name[len(PREFIX):]) if name and name.startswith(PREFIX) else None


def seconds_of(moment) -> float:
    """A timestamp from a table (UTC, with or without its zone) as seconds since the epoch."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def silver_visible(settings, seen: dict[int, float]) -> dict[int, list[tuple[int, float]]]:
    """Per customer, the changes silver/customers showed, (change number, when its version became visible), in order;
    from the table's change data feed."""
    import pyarrow as pa

    feed = pa.table(delta_store.open_table(settings.layout.table("silver/customers")).load_cdf(starting_version=0)
                    .read_all()).select(["id", "name", "_change_type", "_commit_version"]).to_pylist()
    shown: dict[int, list[tuple[int, float]]] = {}
    for row in feed:
        number = change_number(row["name"])
        if row["_change_type"] in ("insert", "update_postimage") and number is not None:
            shown.setdefault(row["id"], []).append((number, seen.get(row["_commit_version"], float("nan"))))
    return {key: sorted(changes) for key, changes in shown.items()}


def bronze_rows(settings, seen: dict[int, float]) -> dict[int, tuple[float, float, float]]:
    """Per change number: its Kafka message's timestamp, its bronze batch's start (`_ingested_at`) and when its bronze
    version became visible."""
    from include.storage import reader

    path = settings.layout.table("bronze/customers")
    version_of = {reader.file_name(path, unquote(add["path"])): version for version in seen
                  for add in delta_store.commit_files(path, version)}
    rows = reader.query(path, "SELECT name, _kafka_timestamp, _ingested_at, filename FROM t WHERE _cdc_op = 'u'",
                        with_file=True).to_pylist()
    found = {}
    for row in rows:
        number = change_number(row["name"])
        if number is not None and row["filename"] in version_of:
            found[number] = (seconds_of(row["_kafka_timestamp"]), seconds_of(row["_ingested_at"]),
                             seen[version_of[row["filename"]]])
    return found


def batch_seconds(settings) -> dict[str, dict]:
    """Per measured job, its batches with input: their durations (seconds) from `_ops/query_progress`."""
    from include.records.query_progress import PROGRESS_TABLE

    progress = delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()
    return {job: percentiles([r["batch_duration_ms"] / 1000 for r in progress
                              if r["job"] == job and r["num_input_rows"]]) for job in MEASURED}


def latencies(committed: dict[int, float], keys: list[int], shown: dict, bronze: dict, started: float,
              warmup: int) -> dict:
    """Each change's latency and its parts, summarized over the run, its first `warmup` seconds and after."""
    overall, first, steady, parts = [], [], [], {"delivery": [], "bronze_wait": [], "bronze_batch": [], "silver": []}
    unseen = superseded = 0
    for number, commit in sorted(committed.items()):
        changes = shown.get(keys[number % len(keys)], [])
        at = bisect.bisect_left(changes, (number, float("-inf")))
        if at == len(changes):
            unseen += 1
            continue
        superseded += changes[at][0] != number
        latency = changes[at][1] - commit
        overall.append(latency)
        (first if commit - started < warmup else steady).append(latency)
        if number in bronze:
            message, batch_start, bronze_seen = bronze[number]
            parts["delivery"].append(message - commit)
            parts["bronze_wait"].append(batch_start - message)
            parts["bronze_batch"].append(bronze_seen - batch_start)
            parts["silver"].append(changes[at][1] - bronze_seen)
    return {"commit_to_silver_seconds": percentiles(overall),
            f"commit_to_silver_seconds_first_{warmup}s": percentiles(first),
            "commit_to_silver_seconds_steady": percentiles(steady),
            "where_the_time_goes_seconds": {part: percentiles(values) for part, values in parts.items()},
            "changes_seen_through_a_later_change_of_their_key": superseded, "changes_never_seen": unseen}


def stop_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=200, help="changes per second (default 200)")
    parser.add_argument("--seconds", type=int, default=120, help="how long the generator commits (default 120)")
    parser.add_argument("--customers", type=int, default=20_000,
                        help="the customers the changes go round (default 20,000: bronze's live admission)")
    parser.add_argument("--rows-per-transaction", type=int, default=1, help="rows updated per transaction (default 1)")
    parser.add_argument("--connections", type=int, default=4,
                        help="database connections committing the changes side by side (default 4: one commit waits "
                             "for its WAL flush)")
    parser.add_argument("--warmup", type=int, default=60, help="the first seconds of commits, reported apart (60)")
    parser.add_argument("--drain", type=int, default=300,
                        help="at most this long after the generator ends for silver to show its last change (300 s)")
    parser.add_argument("--bronze-trigger", type=int, default=None,
                        help="bronze_customers' live trigger interval, seconds (default: the registry's, 30 s)")
    parser.add_argument("--seed", type=int, default=1, help="the shuffle of the customers' order (default 1)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the result file (default bench/results/cdc_latency-<rate>.json)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, tables)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cdc-latency-"))
    env = {**os.environ, "LAKEHOUSE_ROOT": str(work / "lakehouse"), "LAKEHOUSE_LOCAL_DIR": str(work),
           "LAKEHOUSE_REGISTRY": str(work / "jobs.yaml"), "LAKEHOUSE_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port_pair()}",
           "LAKEHOUSE_CDC_POSTGRES_PORT": str(free_port_block([0])),
           "LAKEHOUSE_CONNECT_URL": f"http://127.0.0.1:{free_port_block([0])}",
           "PYSPARK_PYTHON": sys.executable, "LAKEHOUSE_LOG_LEVEL": "WARNING"}
    env.pop("LAKEHOUSE_CDC_DATABASE_URL", None)
    os.environ.update(env)
    os.environ.pop("LAKEHOUSE_CDC_DATABASE_URL", None)
    bench_registry(REPO / "include" / "jobs.yaml", work / "jobs.yaml", args.bronze_trigger)
    settings = load_settings()
    silver, bronze = settings.layout.table("silver/customers"), settings.layout.table("bronze/customers")
    keys = list(range(1, args.customers + 1))
    random.Random(args.seed).shuffle(keys)
    committed: dict[int, float] = {}
    loads, group, chain = [], None, []
    try:
        lakehouse(env, "kafka", "up")
        chain.append("kafka")
        chain.append("cdc")
        lakehouse(env, "cdc", "up")
        insert_customers(settings, args.customers)
        log = (work / "group.log").open("w")
        group = subprocess.Popen([sys.executable, "-m", "include.cli", "run", "--group", GROUP], env=env, cwd=REPO,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        first_rows = wait_for(f"the {args.customers} customers in silver/customers (log {work / 'group.log'})",
                              lambda: group.poll() is None and delta_store.count_rows(silver) >= args.customers, 600)
        watch = VersionWatch({"silver": silver, "bronze": bronze})
        watch.start()
        time.sleep(5)
        load_before = load_average()
        started = time.time()
        generator = threading.Thread(target=generate, args=(settings, keys, args.rate, args.seconds,
                                                            args.rows_per_transaction, args.connections, committed))
        generator.start()
        while generator.is_alive():
            generator.join(10)
            loads.append(os.getloadavg()[0])
        generated_seconds = time.time() - started
        last = max(committed, key=committed.get)  # the last to commit: its change is the last delivered
        drained = wait_for(f"change {last} in silver/customers",
                           lambda: holds(silver, f"name = '{PREFIX}{last}'") or group.poll() is not None, args.drain)
        time.sleep(1)
        watch.done.set()
        watch.join()
    finally:
        if group is not None:
            stop_group(group)
        for part in reversed(chain):
            try:
                lakehouse(env, part, "down")
            except SystemExit as exc:
                print(exc, file=sys.stderr)
        if "cdc" in chain:
            from include.cdc.database import local_server
            from include.daemons.postgres import ELSEWHERE

            data = local_server(settings).data_dir()
            if data.is_relative_to(ELSEWHERE):  # run as root: the server user's data, where it may reach it
                shutil.rmtree(data, ignore_errors=True)
    shown = silver_visible(settings, watch.seen["silver"])
    result = {
        **run_facts(),
        "group": f"{GROUP} (the shipped registry's shop jobs only: {', '.join(JOBS)})",
        "bronze_trigger_seconds": load_registry(settings.registry_path).job("bronze_customers").triggers["live"]
        .interval_seconds, "rate_target": args.rate, "seconds": args.seconds,
        "rows_per_transaction": args.rows_per_transaction, "customers": args.customers,
        "changes_committed": len(committed), "rate_reached": round(len(committed) / generated_seconds, 1), "connections": args.connections,
        "first_customers_in_silver_seconds": round(first_rows, 1),
        "last_change_in_silver_after_the_generator_seconds": round(drained, 1),
        **latencies(committed, keys, shown, bronze_rows(settings, watch.seen["bronze"]), started, args.warmup),
        "batch_seconds_with_input": batch_seconds(settings),
        "load_before": load_before,
        "load_while_generating": {"median": round(statistics.median(loads), 1), "max": round(max(loads), 1)},
        "work": str(work) if args.keep else None,
    }
    path = write_result(result, args.out, f"cdc_latency-{args.rate}")
    steady, parts = result["commit_to_silver_seconds_steady"], result["where_the_time_goes_seconds"]
    print(f"{result['changes_committed']} changes at {result['rate_reached']}/s (target {args.rate}); commit -> "
          f"silver/customers p50/p95/p99 {'/'.join(str(result['commit_to_silver_seconds'][q]) for q in ('p50', 'p95', 'p99'))}"
          f" s, steady (after {args.warmup} s) {steady['p50']}/{steady['p95']}/{steady['p99']} s; medians: delivery "
          f"{parts['delivery']['p50']} s, waiting for bronze {parts['bronze_wait']['p50']} s, bronze batch "
          f"{parts['bronze_batch']['p50']} s, silver {parts['silver']['p50']} s; load median "
          f"{result['load_while_generating']['median']}; result {path}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
