"""Deterministic test data: clickstream events, their payments, login attempts and service logs, as JSON lines.

Clickstream: JSON lines with duplicates, disorder, late and malformed lines.

Each of the `events` records is an event or (with `malformed_fraction`) a malformed line; re-sent
duplicates (an identical copy of an event, a few minutes of arrivals later) are extra lines.
Arrival order is file order; event time runs at `events_per_minute` from `start`, except
out-of-order events (up to 8 minutes behind, within the watermark) and late events (20 to 60
minutes behind, beyond a 10-minute watermark).

Payments (:func:`generate_payment_lines`) belong to the purchases of the clickstream generated with
the same configuration: 75 % are paid 0 to 25 minutes after the purchase, 10 % 35 to 90 minutes after
(outside a 30-minute join bound), 15 % never. They arrive in payment-time order, with re-sent
duplicates and malformed lines at the configured fractions.

Logins (:func:`generate_login_lines`) follow the clickstream's timeline rules (disorder, late, duplicate and
malformed lines); a tenth of the users are under attack (bursts of failed logins).

Service logs (:func:`generate_service_log_lines`) follow the same rules; one service in five goes silent for
the middle third of the timeline and comes back.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

from include.kafka.produce import ensure_topic, produce_lines
from include.storage.paths import StoragePath, as_storage

log = logging.getLogger(__name__)

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase")
OFFSETS = (timedelta(0), timedelta(hours=2), timedelta(hours=-5), timedelta(hours=5, minutes=30))
# Named as the quarantine reasons these lines get (spark_jobs/transforms.py).
MALFORMED_KINDS = ("malformed_json", "missing_event_time", "unparseable_event_time", "wrong_type", "missing_event_id")
PAYMENT_MALFORMED_KINDS = ("malformed_json", "missing_payment_time", "unparseable_payment_time", "wrong_type",
                           "missing_payment_id")
LOGIN_MALFORMED_KINDS = ("malformed_json", "missing_event_time", "unparseable_event_time", "missing_user_id",
                         "missing_outcome")
SERVICE_LOG_MALFORMED_KINDS = ("malformed_json", "missing_event_time", "unparseable_event_time", "missing_service",
                               "missing_level")
LOG_LEVELS = (("INFO", 0.8), ("WARN", 0.15), ("ERROR", 0.05))
LOGIN_FAILURE, LOGIN_ATTACK_FAILURE = 0.2, 0.9  # failure rates of ordinary users and of users under attack
PAID_WITHIN = (0, 25 * 60)  # seconds after the purchase
PAID_AFTER = (35 * 60, 90 * 60)
PAID_FRACTION, PAID_AFTER_FRACTION = 0.75, 0.10


@dataclass(frozen=True)
class GeneratorConfig:
    events: int
    seed: int
    files: int = 10
    start: datetime = DEFAULT_START
    events_per_minute: float = 20.0
    users: int | None = None
    duplicate_fraction: float = 0.02
    out_of_order_fraction: float = 0.05
    late_fraction: float = 0.01
    malformed_fraction: float = 0.01

    def validate(self) -> None:
        if self.events < 1:
            raise ValueError("--events must be at least 1")
        if self.files < 1:
            raise ValueError("--files must be at least 1")
        if self.events_per_minute <= 0:
            raise ValueError("--events-per-minute must be positive")
        for name in ("duplicate_fraction", "out_of_order_fraction", "late_fraction", "malformed_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be between 0 and 1, got {value}")
        if self.out_of_order_fraction + self.late_fraction + self.malformed_fraction > 1.0:
            raise ValueError("out-of-order, late and malformed fractions add up to more than 1")
        if self.start.tzinfo is None:
            raise ValueError("--start needs a UTC offset, e.g. 2026-01-01T00:00:00+00:00")


@dataclass
class GenerationResult:
    files: list[StoragePath]
    lines: int
    kinds: Counter = field(default_factory=Counter)
    topic: str | None = None  # produced to this Kafka topic instead of files

    def summary(self) -> dict:
        where = {"topic": self.topic} if self.topic else {"files": [str(f) for f in self.files]}
        return {**where, "lines": self.lines, "kinds": dict(self.kinds)}


def _iso(moment: datetime, rng: random.Random) -> str:
    offset = rng.choice(OFFSETS)
    local = moment.astimezone(timezone(offset))
    text = local.isoformat()
    return text.replace("+00:00", "Z") if offset == timedelta(0) and rng.random() < 0.5 else text


def _malformed(record: dict, kind: str, number_field: str = "value") -> str:
    if kind == "malformed_json":
        text = json.dumps(record)
        return text[: max(1, len(text) // 2)]
    bad = dict(record)
    if kind.startswith("missing_"):
        del bad[kind.removeprefix("missing_")]
    elif kind.startswith("unparseable_"):
        bad[kind.removeprefix("unparseable_")] = "not-a-timestamp"
    elif kind == "wrong_type":
        bad[number_field] = "twelve"
    return json.dumps(bad)


def generate_lines(config: GeneratorConfig) -> tuple[list[str], Counter]:
    """The clickstream lines in arrival order and how many of each kind were produced."""
    users = config.users or max(5, config.events // 100)

    def event(rng: random.Random, event_time: datetime) -> dict:
        return {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "user_id": f"user_{rng.randrange(users):05d}",
            "event_type": rng.choice(EVENT_TYPES),
            "value": rng.randrange(0, 400) / 4,  # quarter units: sums are exact in binary floating point
            "event_time": _iso(event_time, rng),
        }

    return _timeline(config, random.Random(config.seed), event, MALFORMED_KINDS)


def generate_login_lines(config: GeneratorConfig) -> tuple[list[str], Counter]:
    """Login attempts (user_id, outcome, event_time) in arrival order. One user in ten is under attack and
    fails nine attempts in ten (bursts of failures that `fraud_alerts` catches); the others fail one in five."""
    users = config.users or max(5, config.events // 100)
    attacked = {f"user_{u:05d}" for u in range(0, users, 10)}

    def login(rng: random.Random, event_time: datetime) -> dict:
        user = f"user_{rng.randrange(users):05d}"
        failing = LOGIN_ATTACK_FAILURE if user in attacked else LOGIN_FAILURE
        outcome = "failure" if rng.random() < failing else "success"
        return {"user_id": user, "outcome": outcome, "event_time": _iso(event_time, rng)}

    return _timeline(config, random.Random(f"logins:{config.seed}"), login, LOGIN_MALFORMED_KINDS)


def generate_service_log_lines(config: GeneratorConfig) -> tuple[list[str], Counter]:
    """Log lines (service, level, event_time) in arrival order, from `config.users` services (default: one per
    200 records, at least 5). Services 0, 5, 10, ... are silent during the middle third of the timeline (their
    records there go to the other services) and log again afterwards: what `stale_services` reports."""
    services = [f"svc_{s:03d}" for s in range(config.users or max(5, config.events // 200))]
    span = timedelta(seconds=config.events * 60.0 / config.events_per_minute)
    quiet_from, quiet_until = config.start + span / 3, config.start + span * 2 / 3
    silent = set(services[::5])

    def log_line(rng: random.Random, event_time: datetime) -> dict:
        service = rng.choice(services)
        if service in silent and quiet_from <= event_time < quiet_until:
            service = rng.choice([s for s in services if s not in silent] or services)
        level = rng.choices([name for name, _ in LOG_LEVELS], [weight for _, weight in LOG_LEVELS])[0]
        return {"service": service, "level": level, "event_time": _iso(event_time, rng)}

    return _timeline(config, random.Random(f"service_logs:{config.seed}"), log_line, SERVICE_LOG_MALFORMED_KINDS)


def _timeline(config: GeneratorConfig, rng: random.Random, make_record, malformed_kinds: tuple[str, ...],
              number_field: str = "value") -> tuple[list[str], Counter]:
    """`config.events` records made by `make_record(rng, event_time)`, as lines in arrival order: on time,
    out of order, late or malformed at the configured fractions, with re-sent duplicates a few minutes of
    arrivals later."""
    config.validate()
    seconds_per_event = 60.0 / config.events_per_minute
    kinds: Counter = Counter()
    lines: list[str] = []
    resend: dict[int, list[str]] = {}
    for i in range(config.events):
        arrival = config.start + timedelta(seconds=int(i * seconds_per_event))
        roll = rng.random()
        if roll < config.late_fraction:
            kind, event_time = "late", arrival - timedelta(seconds=rng.randint(20 * 60, 60 * 60))
        elif roll < config.late_fraction + config.out_of_order_fraction:
            kind, event_time = "out_of_order", arrival - timedelta(seconds=rng.randint(30, 8 * 60))
        else:
            kind, event_time = "on_time", arrival
        record = make_record(rng, event_time)
        if rng.random() < config.malformed_fraction:
            malformed_kind = rng.choice(malformed_kinds)
            kinds[f"malformed:{malformed_kind}"] += 1
            lines.append(_malformed(record, malformed_kind, number_field))
        else:
            kinds[kind] += 1
            line = json.dumps(record)
            lines.append(line)
            if rng.random() < config.duplicate_fraction:
                due = i + rng.randint(1, max(1, int(5 * config.events_per_minute)))
                resend.setdefault(due, []).append(line)
        for duplicate in resend.pop(i, []):
            kinds["duplicate"] += 1
            lines.append(duplicate)
    for due in sorted(resend):
        for duplicate in resend[due]:
            kinds["duplicate"] += 1
            lines.append(duplicate)
    return lines, kinds


def _purchases(lines: list[str]) -> dict[str, tuple[datetime, float]]:
    """Event time and value of each distinct, well-formed purchase event, in arrival order."""
    purchases: dict[str, tuple[datetime, float]] = {}
    for line in lines:
        try:
            event = json.loads(line)
            moment = datetime.fromisoformat(event["event_time"])
        except (ValueError, KeyError, TypeError):
            continue
        if event.get("event_type") == "purchase" and isinstance(event.get("value"), float | int) and "event_id" in event:
            purchases.setdefault(event["event_id"], (moment, float(event["value"])))
    return purchases


def generate_payment_lines(config: GeneratorConfig) -> tuple[list[str], Counter]:
    """Payment lines, in arrival (payment-time) order, for the purchases of ``generate_lines(config)``."""
    clicks, _ = generate_lines(config)
    rng = random.Random(f"payments:{config.seed}")
    kinds: Counter = Counter()
    payments: list[tuple[datetime, str, dict]] = []
    for order_id, (ordered_at, value) in _purchases(clicks).items():
        roll = rng.random()
        if roll >= PAID_FRACTION + PAID_AFTER_FRACTION:
            kinds["unpaid"] += 1
            continue
        kind, (low, high) = ("paid", PAID_WITHIN) if roll < PAID_FRACTION else ("paid_late", PAID_AFTER)
        paid_at = ordered_at + timedelta(seconds=rng.randint(low, high))
        payment = {"payment_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)), "order_id": order_id,
                   "amount": value, "payment_time": _iso(paid_at, rng)}
        payments.append((paid_at, kind, payment))
    payments.sort(key=lambda p: p[0])
    lines: list[str] = []
    resend: dict[int, list[str]] = {}
    for index, (_, kind, payment) in enumerate(payments):
        if rng.random() < config.malformed_fraction:
            malformed = rng.choice(PAYMENT_MALFORMED_KINDS)
            kinds[f"malformed:{malformed}"] += 1
            lines.append(_malformed(payment, malformed, number_field="amount"))
        else:
            kinds[kind] += 1
            lines.append(json.dumps(payment))
            if rng.random() < config.duplicate_fraction:  # re-sent a few payments later
                kinds["duplicate"] += 1
                resend.setdefault(index + rng.randint(0, 3), []).append(lines[-1])
        lines += resend.pop(index, [])
    for due in sorted(resend):
        lines += resend[due]
    return lines, kinds


LINE_GENERATORS = {"clickstream": generate_lines, "payments": generate_payment_lines, "logins": generate_login_lines,
                   "service_logs": generate_service_log_lines}
MESSAGE_KEYS = {"clickstream": "user_id", "payments": "order_id", "logins": "user_id", "service_logs": "service"}


def generated_sources(registry) -> dict:
    """{name: SourceSpec} of the registry's jobs' landing and Kafka sources this generator feeds (not a database's
    changes, nor the lineage the drivers send themselves), by name."""
    return {j.source.name: j.source for j in registry.jobs.values()
            if j.source.kind in ("landing", "kafka") and j.source.cdc is None and j.source.name in LINE_GENERATORS}


def generate(source: str, config: GeneratorConfig) -> tuple[list[str], Counter]:
    """The lines of `source` in arrival order, and how many of each kind."""
    if source not in LINE_GENERATORS:
        raise ValueError(f"no test-data generator for source {source!r} (generators: {', '.join(LINE_GENERATORS)})")
    return LINE_GENERATORS[source](config)


def produce_to_topic(bootstrap: str, topic: str, source: str, config: GeneratorConfig,
                     partitions: int = 3) -> GenerationResult:
    """The same lines as :func:`write_landing` writes, as messages on `topic` (created with `partitions` if missing),
    keyed by the source's key field (payments: `order_id`) so that one key's messages keep their order."""
    lines, kinds = generate(source, config)
    ensure_topic(bootstrap, topic, partitions)
    produce_lines(bootstrap, topic, lines, MESSAGE_KEYS.get(source))
    log.info("produced %d messages to topic %s at %s", len(lines), topic, bootstrap)
    return GenerationResult(files=[], lines=len(lines), kinds=kinds, topic=topic)


def write_landing(directory: StoragePath, source: str, config: GeneratorConfig) -> GenerationResult:
    """Write the lines into `files` JSON-lines files, each whole, in order: locally with increasing modification
    times; on S3 one after another (an object's time is its upload; its name breaks a tie)."""
    lines, kinds = generate(source, config)
    directory = as_storage(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if directory.is_local:
        existing = [p.stat().st_mtime for p in directory.iterdir() if p.is_file()]
        first_mtime = max([time.time() - config.files, *[m + 1 for m in existing]])
    per_file = -(-len(lines) // config.files)
    written: list[StoragePath] = []
    for index in range(config.files):
        chunk = lines[index * per_file : (index + 1) * per_file]
        if not chunk:
            break
        target = directory / f"{source}-s{config.seed}-{config.start:%Y%m%dT%H%M%S}-part{index:04d}.jsonl"
        if not directory.is_local:
            target.write_text("\n".join(chunk) + "\n")  # one PUT: the file source never sees part of it
            written.append(target)
            continue
        hidden = directory / f".{target.name}.tmp"  # Spark's file source ignores dot-files
        hidden.write_text("\n".join(chunk) + "\n")
        mtime = first_mtime + index
        os.utime(hidden, (mtime, mtime))
        hidden.replace(target)
        written.append(target)
    log.info("generated %d lines into %d files under %s", len(lines), len(written), directory)
    return GenerationResult(files=written, lines=len(lines), kinds=kinds)
