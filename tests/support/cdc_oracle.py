"""The oracle of the shop's CDC chain end to end (tests/test_cdc_oracle.py): what the shipped registry's CDC tables
must hold, taken from the database itself and from the generator's record of its committed transactions, never from
the engine.

- Type 1 (silver/customers, silver/orders): the rows `SELECT ... FROM public.<table>` returns now.
- Type 2 (silver/customers_history): the history the committed transactions imply, in commit order. The chain's
  first snapshot (`cdc up` after the session's first generator run, tests/support/cdc.py) is where it begins: a
  version per row it holds, from the snapshot's time (its messages' `source.ts_us`, read from the topic); then, per
  transaction and per key, the transaction's last change (a reader of the database never saw the others): a delete
  ends the key's version at the transaction's commit time; an insert or update starts a version when the key has
  none or its tracked columns (name, email, country) differ, and otherwise updates the current one in place (its
  `updated_at`, a noop update); a new version ends the one before at the same commit time. The commit times are
  PostgreSQL's own (`pg_xact_commit_timestamp`: the chain's database keeps them, `track_commit_timestamp`).
- gold/customer_order_totals: `SELECT customer_id, count(*), sum(amount) FROM public.orders GROUP BY customer_id`.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from include.settings import Settings
from include.storage import reader
from tests.support.cdc import TOPICS, messages, query
from tests.support.helpers import wait_for

CUSTOMERS = ("id", "name", "email", "country", "updated_at")
ORDERS = ("id", "customer_id", "amount", "status", "updated_at")
COLUMNS = {"customers": CUSTOMERS, "orders": ORDERS}
TRACKED = ("name", "email", "country")  # silver_customers_history: every column but updated_at (and the key)
HISTORY = (*CUSTOMERS, "__start_at", "__end_at")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant(value) -> datetime | None:
    """A timestamp as an aware instant in UTC (a naive one is UTC already); ISO-8601 text parsed."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def normalized(row: dict, columns: tuple[str, ...]) -> dict:
    """A row's data columns, its times as instants in UTC, an amount as a float (numeric(12,2) and a double agree on
    two decimals)."""
    out = {c: row[c] for c in columns}
    for c in columns:
        if c in ("updated_at", "__start_at", "__end_at"):
            out[c] = instant(out[c])
        elif c == "amount" and out[c] is not None:
            out[c] = float(out[c])
    return out


def database_rows(settings: Settings, table: str) -> dict[int, dict]:
    """`SELECT <the data columns> FROM public.<table>` of the captured database, by id."""
    columns = COLUMNS[table]
    found = query(settings, f"SELECT {', '.join(columns)} FROM public.{table}")
    return {r[0]: normalized(dict(zip(columns, r, strict=True)), columns) for r in found}


def database_totals(settings: Settings) -> dict[int, tuple[int, Decimal]]:
    """`SELECT customer_id, count(*), sum(amount) FROM public.orders GROUP BY customer_id`."""
    found = query(settings, "SELECT customer_id, count(*), sum(amount) FROM public.orders GROUP BY customer_id")
    return {customer: (count, total) for customer, count, total in found}


def table_rows(settings: Settings, table: str) -> list[dict]:
    """Every row of a Delta table of the lakehouse, by the Python reader (DuckDB's Delta kernel)."""
    return reader.query(settings.layout.table(table), "SELECT * FROM t").to_pylist()


def keyed(rows: list[dict], columns: tuple[str, ...], key: str = "id") -> dict:
    """Rows by key; an AssertionError naming the keys a table holds more than once."""
    counted = Counter(r[key] for r in rows)
    twice = sorted(k for k, n in counted.items() if n > 1)
    assert not twice, f"keys held more than once: {twice[:20]}"
    return {r[key]: normalized(r, columns) for r in rows}


def differences(found: dict, expected: dict) -> dict:
    """What differs between two keyed tables: the keys only one holds, and per key held by both its two rows."""
    return {"missing": sorted(set(expected) - set(found))[:20], "unexpected": sorted(set(found) - set(expected))[:20],
            "changed": {k: {"table": found[k], "expected": expected[k]} for k in sorted(set(found) & set(expected))
                        if found[k] != expected[k]}}


def oracle_runs(settings: Settings) -> dict[str, list[dict]]:
    """Each generator run's committed transactions (its oracle file's lines), by run, the runs in the order they ran
    (their names begin with their start time)."""
    runs = {}
    for path in sorted((settings.layout.cdc / "shop").glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [tx["seq"] for tx in lines] == list(range(len(lines))), path
        runs[path.stem] = lines
    return runs


def replayed(transactions: list[dict]) -> dict[str, dict[int, dict]]:
    """The tables' rows after `transactions` on empty tables (the rows as the statements left them)."""
    rows: dict[str, dict[int, dict]] = {"customers": {}, "orders": {}}
    for tx in transactions:
        for change in tx["changes"]:
            table = change["table"].removeprefix("public.")
            rows[table].pop(change["key"]["id"], None)
            if change["after"] is not None:
                rows[table][change["key"]["id"]] = normalized(change["after"], COLUMNS[table])
    return rows


def commit_times(settings: Settings, txids: list[int]) -> dict[int, datetime]:
    """Each transaction's commit time as PostgreSQL recorded it (`pg_xact_commit_timestamp`, in microseconds); an
    AssertionError naming the transactions it has none for."""
    found = query(settings, "SELECT t, pg_xact_commit_timestamp(mod(t, 4294967296)::text::xid) "
                            "FROM unnest(%s::bigint[]) AS t", (list(txids),))
    times = {t: instant(at) for t, at in found if at is not None}
    assert set(times) == set(txids), f"no commit time for transactions {sorted(set(txids) - set(times))[:20]}"
    return times


def first_snapshot(bootstrap: str, table: str) -> tuple[dict[int, dict], datetime | None]:
    """The rows of the first snapshot on the table's topic (its first messages: `r`, one LSN) and its time
    (`source.ts_us`); ({}, None) when it held no row."""
    found = messages(bootstrap, TOPICS[table])
    first = [v for _, v in found if v is not None and v["op"] == "r"][:1]
    if not first or found[0][1] is None or found[0][1]["op"] != "r":
        return {}, None
    lsn, at = first[0]["source"]["lsn"], first[0]["source"]["ts_us"]
    rows = {}
    for _, value in found:
        if value is None or value["op"] != "r" or value["source"]["lsn"] != lsn:
            break
        assert value["source"]["ts_us"] == at, value
        rows[value["after"]["id"]] = normalized(value["after"], COLUMNS[table])
    return rows, EPOCH + timedelta(microseconds=at)


def expected_history(snapshot: dict[int, dict], snapshot_at: datetime | None, transactions: list[dict],
                     times: dict[int, datetime]) -> list[dict]:
    """silver/customers_history as the module's docstring says it must be: each version's data columns,
    `__start_at` and `__end_at` (None while current)."""
    current = {key: {**row, "__start_at": snapshot_at, "__end_at": None} for key, row in snapshot.items()}
    ended: list[dict] = []
    for tx in transactions:
        at = times[tx["txid"]]
        last = {c["key"]["id"]: c for c in tx["changes"] if c["table"] == "public.customers"}
        for key, change in last.items():
            version = current.get(key)
            if change["op"] == "d":
                assert version is not None, (tx, key)  # the database deletes only a row it holds
                ended.append({**current.pop(key), "__end_at": at})
                continue
            row = normalized(change["after"], CUSTOMERS)
            if version is not None and all(version[c] == row[c] for c in TRACKED):
                version.update(row)  # an untracked column only (updated_at), or nothing at all
                continue
            if version is not None:
                ended.append({**current.pop(key), "__end_at": at})
            current[key] = {**row, "__start_at": at, "__end_at": None}
    return sorted([*ended, *current.values()], key=version_order)


def version_order(version: dict) -> tuple:
    return version["id"], version["__start_at"]


def history_rows(settings: Settings) -> list[dict]:
    """silver/customers_history's versions (data columns, `__start_at`, `__end_at`), by key then start."""
    return sorted((normalized(r, HISTORY) for r in table_rows(settings, "silver/customers_history")), key=version_order)


def history_differences(found: list[dict], expected: list[dict]) -> dict:
    """Per key whose versions differ: the table's and the oracle's."""
    by_key: dict[int, dict] = {}
    for name, versions in (("table", found), ("expected", expected)):
        for v in versions:
            by_key.setdefault(v["id"], {"table": [], "expected": []})[name].append(v)
    return {k: v for k, v in sorted(by_key.items()) if v["table"] != v["expected"]}


def wait_delivered(bootstrap: str, transactions: list[dict], timeout: float = 180.0) -> dict[str, list]:
    """Wait until every change of `transactions` is on its table's topic (its transaction id, key and operation),
    however many times (a Connect worker killed replays what it had not committed); each topic's messages then."""
    wanted = {table: Counter() for table in TOPICS}
    for tx in transactions:
        for c in tx["changes"]:
            wanted[c["table"].removeprefix("public.")][(tx["txid"], c["key"]["id"], c["op"])] += 1

    def missing(found: dict[str, list]) -> dict[str, list]:
        short = {}
        for table, messages_ in found.items():
            seen = Counter((v["source"]["txId"], k["id"], v["op"]) for k, v in messages_ if v is not None)
            changes = sorted(change for change, n in wanted[table].items() if seen[change] < n)
            if changes:
                short[table] = changes
        return short

    def all_there() -> dict[str, list] | None:
        found = {table: messages(bootstrap, topic, timeout=0) for table, topic in TOPICS.items()}
        return None if missing(found) else found

    def what() -> str:
        found = {table: messages(bootstrap, topic, timeout=0) for table, topic in TOPICS.items()}
        return "every change on its topic; missing (txid, key, op): " + str(
            {table: changes[:10] for table, changes in missing(found).items()})

    return wait_for(all_there, timeout, what)


def wait_inserted(bootstrap: str, table: str, offset: int, keys: set[int], timeout: float = 180.0) -> None:
    """Return as soon as the inserts of `keys` are on the table's topic from `offset` on (a consumer that the broker
    answers the moment a message arrives: a test kills the Connect worker then, before its next offset flush, a
    second later); an AssertionError naming the keys still missing after `timeout`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-oracle-tests", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 20})
    try:
        consumer.assign([TopicPartition(TOPICS[table], 0, offset)])
        seen: set[int] = set()
        deadline = time.monotonic() + timeout
        while not keys <= seen:
            assert time.monotonic() < deadline, f"inserts of {sorted(keys - seen)} not on {TOPICS[table]} in {timeout} s"
            message = consumer.poll(0.5)
            if message is None or message.error() or message.value() is None:
                continue
            value = json.loads(message.value())
            if value["op"] == "c":
                seen.add(value["after"]["id"])
    finally:
        consumer.close()


def replays(found: dict[str, list]) -> dict[str, int]:
    """Per topic, the change messages it holds more than once (the same position, operation and key)."""
    changes = {table: [(v["source"]["lsn"], v["op"], k["id"]) for k, v in messages_ if v is not None]
               for table, messages_ in found.items()}
    return {table: len(each) - len(set(each)) for table, each in changes.items()}
