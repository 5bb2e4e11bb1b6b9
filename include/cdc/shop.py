"""The demo database's generator (`lakehouse generate --source shop --events N --seed S`): inserts, updates and
deletes of `public.customers` and `public.orders` in real transactions, and the record a test oracle needs.

Deterministic: :func:`plan` makes the transactions from the seed and the tables' rows as they are (read first), with
no clock and no server (its timestamps follow the latest `updated_at` of the tables, a second per transaction, a
millisecond per change); :func:`run` applies them one transaction at a time, in that order. Among them, whatever the
seed, once `--events` is at least :data:`HARD_CASES_EVENTS`: several rows in one transaction; one key (the "hot"
customer) updated many times, three times inside one transaction too; a delete then an insert of the same key in one
transaction, and across two; an update that changes nothing (`UPDATE ... SET name = name`); orders referencing
customers (inserted, their status updated, deleted). A customer who has orders is never deleted (the foreign key).

The oracle: each run writes `<local>/_cdc/shop/<run>.jsonl`, one line per committed transaction in commit order:
`{"run": ..., "seq": <n>, "txid": <PostgreSQL's transaction id, Debezium's source.txId>, "kind": ..., "changes":
[{"table": "public.customers", "op": "c" | "u" | "d", "key": {"id": 7}, "after": {<every column>} | null}]}`, the
changes in statement order, `after` the row as that statement left it (null for a delete); `updated_at` as ISO-8601
in UTC with milliseconds (`2026-01-01T00:00:01.001+00:00`), `amount` a number with two decimals.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from include.cdc import database
from include.cdc.database import CdcRefused
from include.settings import Settings

log = logging.getLogger(__name__)

START = datetime(2026, 1, 1, tzinfo=UTC)  # the first transaction's time on empty tables
COLUMNS = {"customers": ("id", "name", "email", "country", "updated_at"),
           "orders": ("id", "customer_id", "amount", "status", "updated_at")}
COUNTRIES = ("DE", "FR", "NL", "PL", "SE", "ES", "IT")
NAMES = ("Ada", "Bo", "Cy", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu")
STATUSES = ("placed", "paid", "shipped", "delivered", "cancelled")
# the hard cases, in this order, first: their changes (customers 3 + 3 + 1 + 2 + 1 + 1, orders 2 + 1 + 1)
HARD_CASES = ("customers", "hot_three_times", "noop", "delete_insert_one", "delete", "reinsert", "orders",
              "order_status", "order_delete")
HARD_CASES_EVENTS = 15


@dataclass(frozen=True)
class Change:
    table: str  # "customers" or "orders" (schema public)
    op: str  # "c", "u" or "d"
    key: int
    after: dict | None  # the row as the statement leaves it; None: deleted
    noop: bool = False  # `UPDATE ... SET name = name`: a new row version, every value unchanged


@dataclass(frozen=True)
class Transaction:
    kind: str
    changes: tuple[Change, ...]


@dataclass
class State:
    """The tables' rows by key as the planned transactions leave them, and the plan's clock."""

    customers: dict[int, dict] = field(default_factory=dict)
    orders: dict[int, dict] = field(default_factory=dict)
    clock: datetime = START
    deleted: list[int] = field(default_factory=list)  # customers deleted, for an insert of the same key later

    def tick(self, milliseconds: int = 1) -> datetime:
        self.clock += timedelta(milliseconds=milliseconds)
        return self.clock

    def next_id(self, table: str) -> int:
        rows = self.customers if table == "customers" else self.orders
        return max([*rows, *(self.deleted if table == "customers" else [])], default=0) + 1

    def apply(self, change: Change) -> Change:
        rows = self.customers if change.table == "customers" else self.orders
        if change.after is None:
            rows.pop(change.key)
            if change.table == "customers":
                self.deleted.append(change.key)
        else:
            rows[change.key] = change.after
            if change.table == "customers" and change.key in self.deleted:
                self.deleted.remove(change.key)
        return change


def _customer(rng: random.Random, state: State, key: int) -> dict:
    name = rng.choice(NAMES)
    return {"id": key, "name": name, "email": f"{name.lower()}.{key}.{rng.randrange(1000)}@example.com",
            "country": rng.choice(COUNTRIES), "updated_at": state.tick()}


def _edited(rng: random.Random, state: State, row: dict) -> dict:
    return {**row, "email": f"{row['name'].lower()}.{row['id']}.{rng.randrange(1000)}@example.com",
            "country": rng.choice(COUNTRIES), "updated_at": state.tick()}


def _order(rng: random.Random, state: State, key: int, customer: int) -> dict:
    return {"id": key, "customer_id": customer, "amount": rng.randrange(100, 100_000) / 100, "status": "placed",
            "updated_at": state.tick()}


def _deletable(state: State) -> list[int]:
    """Customers without orders (the foreign key), the hot one (the smallest key) kept."""
    ordering = {o["customer_id"] for o in state.orders.values()}
    return sorted(k for k in state.customers if k not in ordering and k != min(state.customers))


def _changes(kind: str, rng: random.Random, s: State) -> list[Change]:
    """The changes of one transaction of `kind` on state `s` (applied to it as they are made); [] when `kind` cannot
    happen on `s` (no customer to delete, none to re-insert, no order)."""
    made: list[Change] = []
    if kind == "customers":  # several rows in one transaction
        for _ in range(3):
            key = s.next_id("customers")
            made.append(s.apply(Change("customers", "c", key, _customer(rng, s, key))))
    elif kind in ("hot_three_times", "hot") and s.customers:  # one key updated many times
        hot = min(s.customers)
        for _ in range(3 if kind == "hot_three_times" else 1):
            made.append(s.apply(Change("customers", "u", hot, _edited(rng, s, s.customers[hot]))))
    elif kind == "update" and s.customers:
        key = rng.choice(sorted(s.customers))
        made.append(s.apply(Change("customers", "u", key, _edited(rng, s, s.customers[key]))))
    elif kind == "noop" and s.customers:  # an update that changes nothing
        key = rng.choice(sorted(s.customers))
        made.append(s.apply(Change("customers", "u", key, dict(s.customers[key]), noop=True)))
    elif kind in ("delete_insert_one", "delete") and _deletable(s):  # a delete, then (in it too) an insert of the key
        key = rng.choice(_deletable(s))
        made.append(s.apply(Change("customers", "d", key, None)))
        if kind == "delete_insert_one":
            made.append(s.apply(Change("customers", "c", key, _customer(rng, s, key))))
    elif kind == "reinsert" and s.deleted:  # the insert of a key an earlier transaction deleted
        key = s.deleted[-1]
        made.append(s.apply(Change("customers", "c", key, _customer(rng, s, key))))
    elif kind == "orders" and s.customers:
        for _ in range(2):
            key = s.next_id("orders")
            made.append(s.apply(Change("orders", "c", key, _order(rng, s, key, rng.choice(sorted(s.customers))))))
    elif kind == "order_status" and s.orders:
        key = rng.choice(sorted(s.orders))
        row = {**s.orders[key], "status": rng.choice(STATUSES), "updated_at": s.tick()}
        made.append(s.apply(Change("orders", "u", key, row)))
    elif kind == "order_delete" and s.orders:
        key = rng.choice(sorted(s.orders))
        made.append(s.apply(Change("orders", "d", key, None)))
    return made


KINDS = {"customers": 2, "hot": 4, "update": 4, "noop": 1, "delete_insert_one": 1, "delete": 1, "reinsert": 1,
         "orders": 3, "order_status": 3, "order_delete": 1, "hot_three_times": 1}  # the random part's weights


def plan(events: int, seed: int, state: State | None = None) -> list[Transaction]:
    """`events` changes in transactions, from `seed` and the tables' rows (`state`, changed as planned): the hard
    cases first, then kinds drawn by KINDS' weights; a kind that would pass `events` becomes a single insert."""
    rng, state = random.Random(seed), state or State()
    state.clock = state.clock.replace(microsecond=0) + timedelta(seconds=1)
    planned: list[Transaction] = []
    count = 0
    queue = list(HARD_CASES)
    while count < events:
        kind = queue.pop(0) if queue else rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        size = {"customers": 3, "hot_three_times": 3, "delete_insert_one": 2, "orders": 2}.get(kind, 1)
        if count + size > events:
            kind = "update" if state.customers else "one_customer"
        if kind == "one_customer":
            key = state.next_id("customers")
            changes = [state.apply(Change("customers", "c", key, _customer(rng, state, key)))]
        else:
            changes = _changes(kind, rng, state)
        if changes:
            planned.append(Transaction(kind, tuple(changes)))
            count += len(changes)
            state.clock = state.clock.replace(microsecond=0) + timedelta(seconds=1)
    return planned


def _sql(change: Change) -> tuple[str, tuple]:
    table, columns = f"public.{change.table}", COLUMNS[change.table]
    if change.op == "d":
        return f"DELETE FROM {table} WHERE id = %s", (change.key,)
    if change.noop:
        return f"UPDATE {table} SET name = name WHERE id = %s", (change.key,)
    values = tuple(change.after[c] for c in columns)
    if change.op == "c":
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})", values
    return (f"UPDATE {table} SET {', '.join(f'{c} = %s' for c in columns[1:])} WHERE id = %s", values[1:] + values[:1])


def _as_json(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {k: v.isoformat(timespec="milliseconds") if isinstance(v, datetime) else v for k, v in row.items()}


def read_state(cur) -> State:
    """The tables' rows as they are, and the clock after their latest `updated_at`."""
    state = State()
    for table, rows in (("customers", state.customers), ("orders", state.orders)):
        cur.execute(f"SELECT {', '.join(COLUMNS[table])} FROM public.{table} ORDER BY id")
        for values in cur.fetchall():
            row = dict(zip(COLUMNS[table], values, strict=True))
            if "amount" in row:
                row["amount"] = float(row["amount"])
            rows[row["id"]] = {**row, "updated_at": row["updated_at"].astimezone(UTC)}
    latest = [r["updated_at"] for r in [*state.customers.values(), *state.orders.values()]]
    state.clock = max(latest, default=START - timedelta(seconds=1))
    return state


@dataclass(frozen=True)
class ShopRun:
    dsn: str  # the database's, without its password
    transactions: list[dict]  # the oracle's lines
    oracle: Path

    def summary(self) -> dict:
        return {"source": "shop", "database": self.dsn, "transactions": len(self.transactions),
                "changes": sum(len(t["changes"]) for t in self.transactions), "oracle": str(self.oracle)}


def run(settings: Settings, events: int, seed: int) -> ShopRun:
    """Plan `events` changes for `seed` on the tables as they are and commit them, a transaction at a time; the local
    database is started first when it is the one (LAKEHOUSE_CDC_DATABASE_URL unset). Only a database named `shop`."""
    address = database.address(settings)
    if address.database != database.LOCAL_DATABASE:
        raise CdcRefused(f"the shop generator writes only into a database named {database.LOCAL_DATABASE!r} (the "
                         f"demo's), not {address.shown}")
    database.ensure_local(settings)
    name = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}-seed{seed}"
    oracle = settings.layout.cdc / "shop" / f"{name}.jsonl"
    oracle.parent.mkdir(parents=True, exist_ok=True)
    conn = database.connect(address)
    conn.autocommit = False
    lines = []
    try:
        with conn.cursor() as cur, oracle.open("w") as out:
            for seq, tx in enumerate(plan(events, seed, read_state(cur))):
                cur.execute("SELECT pg_current_xact_id()::text::bigint")
                txid = cur.fetchone()[0]
                for change in tx.changes:
                    cur.execute(*_sql(change))
                conn.commit()
                line = {"run": name, "seq": seq, "txid": txid, "kind": tx.kind,
                        "changes": [{"table": f"public.{c.table}", "op": c.op, "key": {"id": c.key},
                                     "after": _as_json(c.after)} for c in tx.changes]}
                out.write(json.dumps(line) + "\n")
                lines.append(line)
    finally:
        conn.close()
    log.info("shop: %d transactions committed to %s; oracle %s", len(lines), address.shown, oracle)
    return ShopRun(address.shown, lines, oracle)
