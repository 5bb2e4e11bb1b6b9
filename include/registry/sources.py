"""The inputs of jobs: the `sources:` section (landing files, Kafka topics, a database table's changes) and each job's
`source:` (and a join's `right:`).

A job's source names exactly one kind of input (:data:`SOURCE_KINDS`: a landing source, a Kafka source, or a
Delta table another job writes); the fields common to every kind (admission limits, backfill limits,
watermark, event time, change feed) are parsed here once. Adding an input kind is one entry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from include.registry.columns import CHANGE_FEED_COLUMNS, column_type
from include.registry.context import LoadContext
from include.registry.durations import parse_duration, parse_size
from include.registry.specs import Admission, CdcTable, KafkaTopics, SourceSpec
from include.registry.vocabulary import IDENTIFIER

COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

DEFAULT_MAX_LINE_BYTES = 16 * 1024**2
MAX_LINE_BYTES_LIMIT = 1024**3
ADMISSION_FIELDS = ("max_files_per_trigger", "max_bytes_per_trigger", "max_offsets_per_trigger")
KAFKA_FIELDS = ("topic", "topics", "connection", "starting_offsets", "fail_on_data_loss")
CDC_FIELDS = ("database", "table", "keys", "connection")
SOURCE_FIELDS = ("path", "kafka", "cdc", "format", "schema", "required", "event_time", "max_line_bytes")
_COMMON_FIELDS = (*ADMISSION_FIELDS, "read_change_feed", "watermark", "event_time", "backfill")


def parse_sources(ctx: LoadContext, raw: Any) -> dict[str, SourceSpec]:
    """The `sources:` section: each landing or Kafka source as the spec its jobs start from (no job's limits yet)."""
    if not isinstance(raw, dict):
        ctx.problems.append("'sources' must be a mapping of source name to source")
        return {}
    sources: dict[str, SourceSpec] = {}
    for name, src in raw.items():
        where = f"source {name!r}"
        if not isinstance(src, dict):
            ctx.problem(where, "must be a mapping")
            continue
        ctx.unknown_fields(where, src, SOURCE_FIELDS)
        schema, renamed = _schema(ctx, f"{where}: schema", src.get("schema"))
        cdc = _cdc_table(ctx, where, src["cdc"], schema) if "cdc" in src else None
        kafka = _kafka_topics(ctx, where, src["kafka"]) if "kafka" in src else None
        if cdc is not None:
            kafka = KafkaTopics((cdc.topic,), _connection(ctx, f"{where}: cdc", src["cdc"]))
        if "kafka" in src and "path" in src:
            ctx.problem(where, "a Kafka source has topics, not a path")
        if "cdc" in src and ("path" in src or "kafka" in src):
            ctx.problem(where, "a CDC source reads its table's topic (<database>.<schema>.<table>): no 'path', no 'kafka'")
        fmt = src.get("format", "json")
        if fmt != "json":
            ctx.problem(where, f"format: {fmt!r} is not supported (supported: json)")
        event_time = src.get("event_time")
        if event_time is not None and not isinstance(event_time, str):
            ctx.problem(where, f"event_time: must be a column name, got {event_time!r}")
            event_time = None
        elif event_time is not None and event_time not in schema:
            ctx.problem(where, f"event_time: unknown column {event_time!r}")
        elif event_time is not None and schema.get(event_time) != "timestamp":
            ctx.problem(where, f"event_time: column {event_time!r} must be a timestamp")
        required = list(dict.fromkeys([*(src.get("required") or []), *(cdc.keys if cdc else ())]))
        for column in required:
            if column not in schema:
                ctx.problem(where, f"required: unknown column {column!r}")
        max_line = DEFAULT_MAX_LINE_BYTES
        try:
            max_line = parse_size(src.get("max_line_bytes", DEFAULT_MAX_LINE_BYTES))
            if not 1024 <= max_line <= MAX_LINE_BYTES_LIMIT:
                raise ValueError(f"must be between 1 KB and 1 GB, got {src.get('max_line_bytes')!r}")
        except ValueError as exc:
            ctx.problem(where, f"max_line_bytes: {exc}")
        sources[name] = SourceSpec(
            kind="kafka" if kafka else "landing", name=name,
            path=",".join(kafka.topics) if kafka else src.get("path", f"landing/{name}"), format=fmt, schema=schema,
            required=tuple(required), event_time=event_time, watermark_seconds=None, max_files_per_trigger=None,
            max_line_bytes=None if kafka else max_line, kafka=kafka, renamed_from=renamed, cdc=cdc,
        )
    return sources


def _kafka_topics(ctx: LoadContext, where: str, raw: Any) -> KafkaTopics | None:
    """A source's `kafka:` mapping: `topic` or `topics`, `connection`, `starting_offsets`, `fail_on_data_loss`."""
    at = f"{where}: kafka"
    if not isinstance(raw, dict):
        ctx.problem(at, "must be a mapping with 'topic' (or 'topics'), and optionally 'connection', "
                    "'starting_offsets', 'fail_on_data_loss'")
        return None
    ctx.unknown_fields(at, raw, KAFKA_FIELDS)
    if ("topic" in raw) == ("topics" in raw):
        ctx.problem(at, "give exactly one of 'topic' (a name) or 'topics' (a list of names)")
        return None
    topics = [raw["topic"]] if "topic" in raw else raw["topics"]
    if not isinstance(topics, list) or not topics or not all(_topic_name(t) for t in topics):
        ctx.problem(f"{at}.{'topic' if 'topic' in raw else 'topics'}", "topic names are 1-249 characters of "
                    f"letters, digits, '.', '_' and '-', got {raw.get('topic', raw.get('topics'))!r}")
        return None
    connection = _connection(ctx, at, raw)
    starting = raw.get("starting_offsets", "earliest")
    if starting not in ("earliest", "latest"):
        try:
            parse_timestamp(starting)
        except ValueError:
            ctx.problem(f"{at}.starting_offsets", f"must be earliest, latest or an ISO-8601 timestamp, got {starting!r}")
            starting = "earliest"
    fail = ctx.flag(f"{at}.fail_on_data_loss", raw.get("fail_on_data_loss", True), True)
    return KafkaTopics(tuple(topics), connection, str(starting), fail)


def _cdc_table(ctx: LoadContext, where: str, raw: Any, schema: dict[str, str]) -> CdcTable | None:
    """A source's `cdc:` mapping: the logical `database` (its connector and topics' prefix), the `table`
    (`schema.table`) and its primary `keys` (columns of the source's schema); `connection`, the broker's."""
    at = f"{where}: cdc"
    if not isinstance(raw, dict):
        ctx.problem(at, "must be a mapping with 'database', 'table' (schema.table) and 'keys'")
        return None
    ctx.unknown_fields(at, raw, CDC_FIELDS)
    database, table, keys = raw.get("database"), raw.get("table"), raw.get("keys")
    problems = len(ctx.problems)
    if not (isinstance(database, str) and IDENTIFIER.match(database)):
        ctx.problem(f"{at}.database", f"must be a lower-case name (its connector's and topics' prefix), got {database!r}")
    parts = table.split(".") if isinstance(table, str) else []
    if len(parts) != 2 or not all(IDENTIFIER.match(p) for p in parts):
        ctx.problem(f"{at}.table", f"must be `schema.table` in lower case (public.customers), got {table!r}")
    if not (isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys)):
        ctx.problem(f"{at}.keys", f"must be the table's primary key columns, a non-empty list, got {keys!r}")
    else:
        for key in keys:
            if key not in schema:
                ctx.problem(f"{at}.keys", f"{key!r} is not a column of the source's schema")
    if len(ctx.problems) > problems:
        return None
    return CdcTable(database, table, tuple(keys))


def _connection(ctx: LoadContext, at: str, raw: Any) -> str:
    connection = raw.get("connection", "kafka_default") if isinstance(raw, dict) else "kafka_default"
    if not isinstance(connection, str) or not connection:
        ctx.problem(f"{at}.connection", f"must be an Airflow connection id, got {connection!r}")
        return "kafka_default"
    return connection


def _topic_name(name: Any) -> bool:
    return (isinstance(name, str) and 0 < len(name) < 250 and name not in (".", "..")
            and all(c.isascii() and (c.isalnum() or c in "._-") for c in name))


def parse_timestamp(value: Any) -> datetime:
    """An ISO-8601 timestamp (a naive one is UTC); ValueError otherwise."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _schema(ctx: LoadContext, where: str, raw: Any) -> tuple[dict[str, str], dict[str, str]]:
    """A source's `schema:` (column -> type, or column -> {type, renamed_from}): its columns and types, and the
    columns the producer renamed (new name -> the name it had)."""
    if not isinstance(raw, dict) or not raw:
        ctx.problem(where, "must be a non-empty mapping of column to type")
        return {}, {}
    schema: dict[str, str] = {}
    renamed: dict[str, str] = {}
    for column, declared in raw.items():
        ctype = declared
        if isinstance(declared, dict):
            ctx.unknown_fields(f"{where}.{column}", declared, ("type", "renamed_from"))
            ctype = declared.get("type")
            old = declared.get("renamed_from")
            if old is not None and not (isinstance(old, str) and COLUMN_NAME.match(old)):
                ctx.problem(f"{where}.{column}", f"renamed_from: must be the column's former name, got {old!r}")
            elif old is not None and (old in raw or old in renamed.values()):
                ctx.problem(f"{where}.{column}", f"renamed_from: {old!r} is "
                            + ("a column of the schema" if old in raw else "already renamed by another column"))
            elif old is not None:
                renamed[str(column)] = old
        try:
            ctype = column_type(ctype).name
        except ValueError as exc:
            ctx.problem(where, f"column {column!r}: {exc}")
        schema[str(column)] = str(ctype)
    return schema, renamed


def _named_source(kind: str) -> Callable[[LoadContext, str, dict, bool], SourceSpec | None]:
    """The resolver of `source: {<kind>: <name>}`: a source of that kind in the `sources:` section."""
    def resolve(ctx: LoadContext, at: str, raw: dict, change_feed: bool) -> SourceSpec | None:
        name = raw[kind]
        known = sorted(n for n, s in ctx.sources.items() if (s.cdc is not None if kind == "cdc" else s.kind == kind))
        if name not in ctx.sources:
            ctx.problem(f"{at}.{kind}", f"unknown source {name!r} (known: {known})")
            return None
        src = ctx.sources[name]
        if (src.cdc is not None) != (kind == "cdc"):
            ctx.problem(f"{at}.{kind}", f"source {name!r} is "
                        + (f"a CDC source: name it with `cdc: {name}`" if src.cdc else f"not a CDC source: name it "
                           f"with `{src.kind}: {name}`"))
            return None
        if kind != "cdc" and src.kind != kind:
            ctx.problem(f"{at}.{kind}", f"source {name!r} is a {src.kind} source: name it with `{src.kind}: {name}`")
            return None
        if change_feed:
            ctx.problem(f"{at}.read_change_feed", "only a Delta table source has a change data feed")
        return replace(src, schema=dict(src.schema), event_time=raw.get("event_time", src.event_time))
    return resolve


def _table(ctx: LoadContext, at: str, raw: dict, change_feed: bool) -> SourceSpec | None:
    name = raw["table"]
    if name not in ctx.writers:
        ctx.problem(f"{at}.table", f"{name!r} is not written by any job in the registry")
        return None
    if name not in ctx.table_schemas:
        return None  # its writer is invalid or part of a cycle; already reported
    schema = dict(ctx.table_schemas[name])
    event_time = (raw.get("event_time") or ctx.event_times.get(name)
                  or ("event_time" if schema.get("event_time") == "timestamp" else None))
    _check_change_feed(ctx, at, name, change_feed)
    if change_feed:
        schema.update(CHANGE_FEED_COLUMNS)
    renamed = {new: old for new, old in ctx.table_renames.get(name, {}).items() if new in schema}
    return SourceSpec(kind="delta", name=name, path=name, format=None, schema=schema, required=(),
                      event_time=event_time, watermark_seconds=None, max_files_per_trigger=None, renamed_from=renamed)


def _check_change_feed(ctx: LoadContext, at: str, table: str, change_feed: bool) -> None:
    """An upserted table can only be streamed through its change data feed, which its writer must enable."""
    writer, sink = ctx.writers.get(table), ctx.writer_sinks.get(table) or {}
    if sink.get("mode") == "update" and not change_feed:
        ctx.problem(f"{at}.read_change_feed", f"table {table!r} is upserted (update mode) by job {writer!r}: "
                    "stream its changes with read_change_feed: true")
    properties = sink.get("properties") if isinstance(sink.get("properties"), dict) else {}
    if change_feed and str(properties.get("delta.enableChangeDataFeed", "")).lower() != "true":
        ctx.problem(f"{at}.read_change_feed", f"table {table!r} has no change data feed: set "
                    f"'delta.enableChangeDataFeed: true' in job {writer!r}'s sink.properties")


@dataclass(frozen=True)
class SourceKind:
    """One kind of job input: the field naming it in `source:` and how that name resolves to a spec."""

    label: str  # how "give exactly one of ..." names the field
    # (ctx, "job 'x': source", the raw source, read_change_feed) -> the input's spec, without the job's limits
    resolve: Callable[[LoadContext, str, dict, bool], SourceSpec | None]
    one_limit: bool = False  # admitted by files or by bytes, not both (Spark's file source takes one)


SOURCE_KINDS: dict[str, SourceKind] = {  # the field that names the input -> its kind
    "landing": SourceKind("'landing' (a source name)", _named_source("landing"), one_limit=True),
    "kafka": SourceKind("'kafka' (a source name)", _named_source("kafka")),
    "cdc": SourceKind("'cdc' (a source name)", _named_source("cdc")),
    "table": SourceKind("'table'", _table),
}
_LIMITS_OF = {"kafka": ("max_offsets_per_trigger",), "cdc": ("max_offsets_per_trigger",)}  # the admission fields of a kind (others: files and bytes)


def parse_source(ctx: LoadContext, where: str, raw: Any, field: str = "source") -> SourceSpec | None:
    """A job's `source:` (or a join's `transform.right`); None when it cannot be resolved."""
    at = f"{where}: {field}"
    if not isinstance(raw, dict):
        ctx.problem(at, f"must be a mapping with {' or '.join(repr(k) for k in SOURCE_KINDS)}")
        return None
    ctx.unknown_fields(at, raw, (*SOURCE_KINDS, *_COMMON_FIELDS))
    given = [k for k in SOURCE_KINDS if k in raw]
    live = _admission(ctx, at, raw)
    for kind in given:
        _check_limits(ctx, at, kind, raw)
        if SOURCE_KINDS[kind].one_limit and live.max_files and live.max_bytes:
            ctx.problem(at, f"a {kind} source is admitted by max_files_per_trigger or max_bytes_per_trigger, not "
                        "both (Spark's file source takes one)")
    backfill = None
    if not isinstance(raw.get("backfill") or {}, dict):
        ctx.problem(f"{at}.backfill", "must be a mapping of max_files_per_trigger / max_bytes_per_trigger")
    else:
        defaults = ctx.defaults.get("backfill") if isinstance(ctx.defaults.get("backfill"), dict) else None
        backfill_raw = (raw["backfill"] if "backfill" in raw else defaults) or {}  # the source's own wins
        if backfill_raw:
            backfill = _admission(ctx, f"{at}.backfill", backfill_raw, strict=True)
            if "backfill" in raw:
                for kind in given:
                    _check_limits(ctx, f"{at}.backfill", kind, backfill_raw)
            elif given and given[0] in ("kafka", "cdc"):  # the defaults' file and byte limits mean nothing to a topic
                backfill = Admission(max_offsets=backfill.max_offsets) if backfill.max_offsets else None
    change_feed = ctx.flag(f"{at}.read_change_feed", raw.get("read_change_feed", False), False)
    watermark = ctx.optional(at, raw, "watermark", parse_duration)
    if len(given) != 1:
        ctx.problem(at, f"give exactly one of {' or '.join(k.label for k in SOURCE_KINDS.values())}")
        return None
    spec = SOURCE_KINDS[given[0]].resolve(ctx, at, raw, change_feed)
    if spec is None:
        return None
    if spec.event_time is not None and not isinstance(spec.event_time, str):
        ctx.problem(f"{at}.event_time", f"must be a column name, got {spec.event_time!r}")
        return None
    if spec.event_time is not None and spec.schema.get(spec.event_time) != "timestamp":
        ctx.problem(f"{at}.event_time", f"{spec.event_time!r} is not a timestamp column of the source")
    return replace(spec, watermark_seconds=watermark, max_files_per_trigger=live.max_files,
                   max_bytes_per_trigger=live.max_bytes, max_offsets_per_trigger=live.max_offsets,
                   read_change_feed=change_feed, backfill=backfill)


def _check_limits(ctx: LoadContext, at: str, kind: str, raw: dict) -> None:
    """Admission fields that mean nothing to the source kind (a topic has no files; a landing source no offsets)."""
    allowed = _LIMITS_OF.get(kind, ("max_files_per_trigger", "max_bytes_per_trigger"))
    for name in ADMISSION_FIELDS:
        if name in raw and name not in allowed:
            ctx.problem(f"{at}.{name}", f"a {kind} source is admitted by {' or '.join(allowed)}")


def _admission(ctx: LoadContext, where: str, raw: dict, strict: bool = False) -> Admission:
    """max_files_per_trigger / max_bytes_per_trigger of `raw` (with `strict`, nothing else is allowed)."""
    if strict:
        ctx.unknown_fields(where, raw, ADMISSION_FIELDS)
    max_files = raw.get("max_files_per_trigger")
    if max_files is not None:
        max_files = ctx.positive_int(f"{where}.max_files_per_trigger", max_files)
    max_offsets = raw.get("max_offsets_per_trigger")
    if max_offsets is not None:
        max_offsets = ctx.positive_int(f"{where}.max_offsets_per_trigger", max_offsets)
    return Admission(max_files, ctx.optional(where, raw, "max_bytes_per_trigger", parse_size), max_offsets)
