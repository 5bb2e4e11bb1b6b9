"""Benchmark: the backfill of a topic of Debezium change events into the SCD type 1 table, by the product against the
same MERGE written by hand in foreachBatch.

    .venv/bin/python bench/cdc_backfill.py [--changes 1000000] [--keys 100000] [--seed 1] [--redelivered 1000]
                                           [--stale-replay 0] [--bronze-backfill-offsets N] [--hand-first]
                                           [--out PATH]

A broker (`lakehouse kafka up`'s code, on free ports) gets the topic `shop.public.customers` (one partition, as `lakehouse
cdc up` makes it) filled directly with Debezium 3.6.1's envelope (docs/operations/cdc.md, tests/support/cdc_events.py):
a snapshot of `--keys` customers (`op: r`), then changes until `--changes` change events in all (updates; 2% deletes,
each followed by its tombstone; a deleted key picked again is inserted again; one transaction in ten changes two or
three rows), deterministic from `--seed`. As Connect delivers at least once, the `--redelivered` messages before 60% of
the topic are sent again right after it (a worker killed before its offsets were flushed); `--stale-replay N` sends
N messages from the topic's middle again at its end (older changes arriving after newer ones: a connector resumed
from stale offsets).

The product: `bronze_customers` then `silver_customers` run available-now in this process's driver, as `lakehouse run
bronze_customers silver_customers` runs them one after the other in one driver (the shipped registry's jobs, their
admission: bronze its source's `backfill:` one, 200,000 messages a batch, unless `--bronze-backfill-offsets` gives
another).
By hand: a plain Structured Streaming query over the same bronze table (the same admission as silver_customers, the
same shuffle partitions, the same table properties: the change feed the gold job reads, the writer's compaction),
available-now, `foreachBatch` running `MERGE INTO target USING batch ON id WHEN MATCHED AND
op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED AND op <> 'd' THEN INSERT *` with the tombstones
left out: no order, no deletes table, no transaction identifiers. Two variants: `naive` merges the batch as it is (a
MERGE whose source has two rows for a key fails: expected to fail once a batch holds a key twice), `last_per_key`
first keeps each key's last change in the batch by Kafka offset (the usual fix).

Each side runs once on a small topic first (its own topic and tables), untimed; then silver_customers runs before the
variants, or after them (`--hand-first`): the second to run finds the JVM's code warmer, so both orders are measured.
Reported: wall seconds and the CPU seconds of this process tree (the Python process, its Spark JVM and the JVM's
Python workers) of each job and variant; the ratios product / by hand, the apply alone (silver_customers against
`last_per_key`: the same bronze table to the same type 1 table) and the chain (bronze included on both sides); the
goal, within 1.2x; and whether each table holds the last change per key by sequence (the generator's oracle), and
the two the same rows. The result: bench/results/cdc_backfill.json (`--out`).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import (  # noqa: E402
    lakehouse,
    load_average,
    options,
    run_facts,
    start,
    tree_cpu_seconds,
    warm_up,
    write_result,
)
from include.kafka.broker import free_port_pair  # noqa: E402
from include.kafka.produce import ensure_topic  # noqa: E402
from include.registry import Trigger, build_registry  # noqa: E402
from include.settings import load_settings  # noqa: E402
from include.spark_session import get_spark  # noqa: E402
from spark_jobs.query_session import configure_session  # noqa: E402
from spark_jobs.streaming_query import run_job  # noqa: E402

JOBS = ("bronze_customers", "silver_customers")
COLUMNS = ("id", "name", "email", "country", "updated_at")
EPOCH = datetime(2026, 12, 7, tzinfo=UTC)
SNAPSHOT_LSN, FIRST_LSN, FIRST_TX = 10_000, 1_000_000, 600
COUNTRIES = ("DE", "FR", "NL", "PL", "SE", "ES", "IT")
NAMES = ("Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu")
SAMPLE = 20_000, 2_000  # the untimed first run: changes, keys
# Debezium's envelope with JSON converters without schemas (one line, the fields in Debezium's order)
VALUE = ('{"before":%s,"after":%s,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"%s",'
         '"ts_ms":%d,"snapshot":"%s","db":"%s","sequence":"[%s,\\"%d\\"]","ts_us":%d,"ts_ns":%d000,'
         '"schema":"public","table":"customers","txId":%d,"lsn":%d,"xmin":null,"origin":null,"origin_lsn":null},'
         '"transaction":null,"op":"%s","ts_ms":%d}')
ROW = '{"id":%d,"name":"%s","email":"%s","country":"%s","updated_at":"%s"}'
DELETED_IMAGE = '{"id":%d,"name":"","email":"","country":"","updated_at":"1970-01-01T00:00:00Z"}'


def instant(micros: int) -> str:
    """A timestamptz as Debezium writes it: ISO-8601 in UTC with microseconds."""
    return (EPOCH + timedelta(microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Topic:
    """The topic's messages, (key, value or None), in the order they are produced, and the oracle: each key's row
    after its last change by sequence (a deleted key: absent), rows as (id, name, email, country, updated_at in
    microseconds since the epoch)."""

    def __init__(self, database: str, changes: int, keys: int, seed: int, redelivered: int, stale_replay: int):
        self.database, self.keys, self.changes = database, keys, changes
        self.messages: list[tuple[bytes, bytes | None]] = []
        self.rows: dict[int, tuple] = {}
        rng = random.Random(seed)
        for key in range(1, keys + 1):  # the snapshot: one transaction, one LSN
            self._change(key, "r", self._row(rng, key, 0), SNAPSHOT_LSN, FIRST_TX, None, 0)
        made, tx, lsn = keys, FIRST_TX, FIRST_LSN
        replay_at = int(0.6 * changes)
        while made < changes:
            tx += 1
            size = 1 if rng.random() < 0.9 else rng.choice((2, 3))
            last_commit = lsn - 1
            commit_us = (tx - FIRST_TX) * 1000  # a transaction a millisecond
            for _ in range(min(size, changes - made)):
                key = rng.randrange(1, keys + 1)
                if key not in self.rows:
                    op = "c"
                else:
                    op = "d" if rng.random() < 0.02 else "u"
                row = None if op == "d" else self._row(rng, key, commit_us)
                self._change(key, op, row, lsn, tx, last_commit, commit_us)
                lsn += 8
                made += 1
                if made == replay_at and redelivered:
                    self.messages.extend(self.messages[-redelivered:])
        if stale_replay:
            middle = len(self.messages) // 2
            self.messages.extend(self.messages[middle:middle + stale_replay])

    @staticmethod
    def _row(rng: random.Random, key: int, micros: int) -> tuple:
        name = rng.choice(NAMES)
        return key, name, f"{name.lower()}.{key}.{rng.randrange(10**6)}@example.com", rng.choice(COUNTRIES), micros

    def _change(self, key: int, op: str, row: tuple | None, lsn: int, tx: int, last_commit: int | None,
                commit_us: int) -> None:
        ts_us = int(EPOCH.timestamp() * 1_000_000) + commit_us
        before = DELETED_IMAGE % key if op == "d" else "null"
        after = "null" if row is None else ROW % (*row[:4], instant(row[4]))
        previous = "null" if last_commit is None else f'\\"{last_commit}\\"'
        value = VALUE % (before, after, self.database, ts_us // 1000, "true" if op == "r" else "false", self.database,
                         previous, lsn, ts_us, ts_us, tx, lsn, op, ts_us // 1000 + 1)
        message_key = b'{"id":%d}' % key
        self.messages.append((message_key, value.encode()))
        if op == "d":
            self.messages.append((message_key, None))  # the tombstone
            self.rows.pop(key, None)
        else:
            self.rows[key] = row

    @property
    def topic(self) -> str:
        return f"{self.database}.public.customers"

    def produce(self, bootstrap: str) -> float:
        """Every message on the topic (one partition, in this order); the seconds it took."""
        from confluent_kafka import Producer

        started = time.perf_counter()
        ensure_topic(bootstrap, self.topic, 1)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 500_000})
        for key, value in self.messages:
            while True:
                try:
                    producer.produce(self.topic, key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(300):
            raise SystemExit(f"{self.topic}: not every message was delivered")
        return time.perf_counter() - started


def bench_registry(raw: dict, database: str, bronze_backfill_offsets: int | None):
    """The shipped registry with the customers' source on `database`'s topic (and a backfill admission for it)."""
    raw = yaml.safe_load(yaml.safe_dump(raw))
    raw["sources"]["customers"]["cdc"]["database"] = database
    if bronze_backfill_offsets:
        raw["jobs"]["bronze_customers"]["source"]["backfill"] = {"max_offsets_per_trigger": bronze_backfill_offsets}
    return build_registry(raw)


def timed(what) -> dict:
    """Run `what()`: its wall and process-tree CPU seconds, and what it returned (or the error it raised, in a line)."""
    cpu, started = tree_cpu_seconds(), time.perf_counter()
    outcome = {}
    try:
        outcome["returned"] = what()
    except Exception as exc:  # noqa: BLE001 - the naive MERGE's failure is a result
        outcome["error"] = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return {"seconds": round(time.perf_counter() - started, 1), "cpu_seconds": round(tree_cpu_seconds() - cpu, 1),
            **outcome}


def by_hand(spark, bronze: str, target: str, checkpoint: str, last_per_key: bool, max_bytes: int | None,
            properties: dict[str, str]) -> int:
    """The hand-written MERGE in foreachBatch over the bronze table, available-now, into `target` (made empty first,
    with the table `properties` of the product's: its change feed, its compaction); the batches it ran."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    empty = spark.read.format("delta").load(bronze).select(*COLUMNS).limit(0)
    empty.write.format("delta").mode("overwrite").save(target)
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"ALTER TABLE delta.`{target}` SET TBLPROPERTIES ({listed})")
    batches = []

    def merge(batch, batch_id: int) -> None:
        changes = batch.where("_cdc_op <> 't'")  # the tombstones: a delete's key again
        if last_per_key:
            newest = Window.partitionBy("id").orderBy(F.col("_kafka_offset").desc())
            changes = changes.withColumn("_n", F.row_number().over(newest)).where("_n = 1")
        changes.select(*COLUMNS, "_cdc_op").createOrReplaceTempView("changes")
        batch.sparkSession.sql(
            f"MERGE INTO delta.`{target}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED AND s._cdc_op = 'd' THEN DELETE WHEN MATCHED THEN UPDATE SET * "
            "WHEN NOT MATCHED AND s._cdc_op <> 'd' THEN INSERT *")
        batches.append(batch_id)

    reader = spark.readStream.format("delta")
    if max_bytes:
        reader = reader.option("maxBytesPerTrigger", max_bytes)
    (reader.load(bronze).writeStream.foreachBatch(merge).option("checkpointLocation", checkpoint)
     .trigger(availableNow=True).start().awaitTermination())
    return len(batches)


def rows_of(spark, path: str) -> tuple[dict[int, tuple], int]:
    """The table's rows by key (updated_at in microseconds since the epoch), and how many rows it has."""
    from pyspark.sql import functions as F

    table = spark.read.format("delta").load(path).select(*COLUMNS[:4], F.unix_micros("updated_at")).collect()
    return {r[0]: tuple(r) for r in table}, len(table)


def against(oracle: dict, table: tuple[dict[int, tuple], int]) -> dict:
    """How a table's rows differ from the oracle's (a key's last change by sequence)."""
    rows, count = table
    epoch_us = int(EPOCH.timestamp() * 1_000_000)
    expected = {k: (*row[:4], epoch_us + row[4]) for k, row in oracle.items()}
    wrong = sum(1 for k, row in rows.items() if k in expected and expected[k] != row)
    return {"equal": rows == expected and count == len(rows), "rows": count, "expected_rows": len(expected),
            "duplicate_keys_rows": count - len(rows), "missing_keys": len(expected.keys() - rows.keys()),
            "extra_keys": len(rows.keys() - expected.keys()), "wrong_rows": wrong}


def compare(spark, base, raw: dict, root: Path, topic: Topic, bootstrap: str, backfill_offsets: int | None,
            hand_first: bool = False) -> dict:
    """Fill the topic, run bronze_customers, then silver_customers and the two hand-written variants over its table
    (`hand_first`: the variants first); their timings and rows."""
    settings = replace(base, root=root, kafka_bootstrap=bootstrap, kafka_bootstrap_set=True)
    registry = bench_registry(raw, topic.database, backfill_offsets)
    produce_seconds = topic.produce(bootstrap)

    def run_product(job_id: str) -> dict:
        return timed(lambda: run_job(spark, settings, registry, job_id, Trigger(available_now=True)).summary)

    product = {"bronze_customers": run_product("bronze_customers")}
    if not hand_first:
        product["silver_customers"] = run_product("silver_customers")
    silver = registry.job("silver_customers")
    configure_session(spark, silver, silver.state_store.shuffle_partitions, Trigger(available_now=True))
    bronze = str(settings.layout.table("bronze/customers"))
    max_bytes = silver.source.admission(True).max_bytes
    properties = {k: v for k, v in silver.sink.properties.items() if k != "delta.appendOnly"}
    hand = {variant: timed(lambda variant=variant: by_hand(spark, bronze, str(root / "by_hand" / variant),
                                                           str(root / "by_hand" / f"{variant}_checkpoint"),
                                                           variant == "last_per_key", max_bytes,
                                                           properties))
            for variant in ("naive", "last_per_key")}
    if hand_first:
        product["silver_customers"] = run_product("silver_customers")
    for variant in hand.values():
        variant["batches"] = variant.pop("returned", None)
    product_rows = rows_of(spark, str(settings.layout.table("silver/customers")))
    hand_rows = {variant: rows_of(spark, str(root / "by_hand" / variant)) for variant in hand}
    apply = product["silver_customers"]
    chain = product["bronze_customers"]["seconds"] + apply["seconds"]
    by_hand_seconds = hand["last_per_key"]["seconds"]
    return {
        "changes": topic.changes, "keys": topic.keys, "first": "by hand" if hand_first else "product",
        "messages": len(topic.messages), "produce_seconds": round(produce_seconds, 1),
        "product": product, "by_hand": hand,
        "ratio_apply": round(apply["seconds"] / by_hand_seconds, 2) if "error" not in hand["last_per_key"] else None,
        "ratio_chain": round(chain / (product["bronze_customers"]["seconds"] + by_hand_seconds), 2),
        "ratio_apply_cpu": round(apply["cpu_seconds"] / max(hand["last_per_key"]["cpu_seconds"], 0.1), 2),
        "product_vs_oracle": against(topic.rows, product_rows),
        **{f"by_hand_{variant}_vs_oracle": against(topic.rows, rows) for variant, rows in hand_rows.items()},
        "product_equals_by_hand_last_per_key": product_rows == hand_rows["last_per_key"],
    }


def main() -> None:
    parser = options(__doc__, changes=1_000_000, keys=100_000, seed=1, redelivered=1000, stale_replay=0)
    parser.add_argument("--bronze-backfill-offsets", type=int, default=None,
                        help="give bronze_customers' source a backfill admission of this many messages a batch "
                             "(default: the shipped registry's, 200,000)")
    parser.add_argument("--hand-first", action="store_true",
                        help="run the hand-written variants over bronze's table before silver_customers (the second "
                             "to run finds the JVM's code warmer: measure both orders)")
    parser.add_argument("--out", type=Path, default=None, help="the result file (default bench/results/cdc_backfill.json)")
    args, work = start(parser, "bench-cdc-backfill-")
    base = load_settings()
    raw = yaml.safe_load(base.registry_path.read_text())
    bootstrap = f"127.0.0.1:{free_port_pair()}"
    broker_env = {**os.environ, "LAKEHOUSE_ROOT": str(work / "broker"), "LAKEHOUSE_LOCAL_DIR": str(work),
                  "LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap}
    load_before = load_average()
    lakehouse(broker_env, "kafka", "up")  # its CPU is not this process tree's
    spark = None
    try:
        spark = get_spark(replace(base, root=work / "spark"), app_name="bench-cdc-backfill")
        warm_up(spark, work)
        sample = Topic("benchwarm", *SAMPLE, args.seed, min(args.redelivered, 100), min(args.stale_replay, 100))
        compare(spark, base, raw, work / "warm_up", sample, bootstrap, args.bronze_backfill_offsets)
        started = time.perf_counter()
        topic = Topic("shop", args.changes, args.keys, args.seed, args.redelivered, args.stale_replay)
        generate_seconds = round(time.perf_counter() - started, 1)
        result = compare(spark, base, raw, work / "timed", topic, bootstrap, args.bronze_backfill_offsets,
                         args.hand_first)
    finally:
        if spark is not None:
            spark.stop()
        lakehouse(broker_env, "kafka", "down")
        shutil.rmtree(work, ignore_errors=True)
    result = {**run_facts(), "seed": args.seed,
              "redelivered": args.redelivered, "stale_replay": args.stale_replay,
              "bronze_backfill_offsets": args.bronze_backfill_offsets, "generate_seconds": generate_seconds,
              **result, "load_before": load_before, "load_after": load_average()}
    path = write_result(result, args.out, "cdc_backfill")
    product, hand = result["product"], result["by_hand"]
    print(f"{result['changes']} changes over {result['keys']} keys ({result['messages']} messages): "
          f"bronze_customers {product['bronze_customers']['seconds']} s, silver_customers "
          f"{product['silver_customers']['seconds']} s; by hand: naive "
          f"{'failed: ' + hand['naive']['error'][:80] if 'error' in hand['naive'] else 'ran'} "
          f"({hand['naive']['seconds']} s), last per key {hand['last_per_key']['seconds']} s; "
          f"ratio apply {result['ratio_apply']}, chain {result['ratio_chain']}; product == oracle "
          f"{result['product_vs_oracle']['equal']}, by hand == oracle {result['by_hand_last_per_key_vs_oracle']['equal']}"
          f"; result {path}")


if __name__ == "__main__":
    main()
