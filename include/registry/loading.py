"""Loading and validating `jobs.yaml` into typed specs (:mod:`include.registry.specs`).

Validation collects every problem and raises one :class:`RegistryError` whose lines each name the
job (or source) and the field that is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from include.registry.checks import CHECKS, SEVERITIES
from include.registry.columns import (
    BRONZE_EXTRA_COLUMNS,
    CHANGE_FEED_COLUMNS,
    COLUMN_TYPES,
    QUARANTINE_SCHEMA,
)
from include.registry.durations import Trigger, parse_duration, parse_size
from include.registry.graph import declared_tables, dependency_order
from include.registry.processors import PROCESSORS
from include.registry.specs import (
    MAX_SHUFFLE_PARTITIONS,
    Admission,
    Aggregation,
    Deduplicate,
    HealthThresholds,
    JobSpec,
    JoinColumn,
    MaintenanceSpec,
    ParseJson,
    QualitySpec,
    Registry,
    RunningAggregate,
    SessionAggregate,
    SinkSpec,
    SourceSpec,
    StatefulProcess,
    StateStoreSpec,
    StreamJoin,
    SupervisionSpec,
    TransformSpec,
    WindowAggregate,
)

TRANSFORM_KINDS = tuple(k.kind for k in (ParseJson, Deduplicate, WindowAggregate, SessionAggregate, StreamJoin,
                                             StatefulProcess, RunningAggregate))
QUALITY_KINDS = (WindowAggregate.kind, SessionAggregate.kind, StreamJoin.kind,  # kinds whose sink has a suite
                 RunningAggregate.kind, StatefulProcess.kind)  # (stateful_process: alert processors)
# kinds whose keys may be SQL expressions
EXPRESSION_KEY_KINDS = (WindowAggregate.kind, SessionAggregate.kind, RunningAggregate.kind)
UPDATE_KINDS = (WindowAggregate.kind, RunningAggregate.kind)  # kinds whose sink may be upserted (update mode)
JOIN_TYPES = ("inner", "left_outer", "right_outer", "full_outer")
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")
SINK_MODES = ("append", "update")
STATE_PROVIDERS = ("rocksdb", "hdfs")
# Delta table properties a sink may set: features that delta-rs (the quality and summary readers) supports too.
BOOLEAN_PROPERTIES = ("delta.appendOnly", "delta.enableChangeDataFeed")
TABLE_PROPERTIES = (*BOOLEAN_PROPERTIES, "delta.logRetentionDuration", "delta.deletedFileRetentionDuration",
                    "delta.checkpointInterval", "delta.dataSkippingNumIndexedCols", "delta.targetFileSize")

_JOB_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_TABLE = re.compile(r"^[a-z_][a-z0-9_]*/[a-z_][a-z0-9_]*$")


class RegistryError(ValueError):
    """The registry is invalid; ``problems`` lists every finding."""

    def __init__(self, problems: list[str], path: Path | None = None):
        self.problems = problems
        where = f" in {path}" if path else ""
        super().__init__(f"invalid job registry{where}:\n  - " + "\n  - ".join(problems))


def load_registry(path: Path) -> Registry:
    """Load and validate the registry at `path`."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError as exc:
        raise RegistryError([f"registry file not found: {path}"]) from exc
    except yaml.YAMLError as exc:
        raise RegistryError([f"not valid YAML: {exc}"], path) from exc
    return build_registry(raw, path)


def build_registry(raw: Any, path: Path | None = None) -> Registry:
    """Validate a parsed registry document."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise RegistryError(["the registry must be a mapping with 'sources' and 'jobs'"], path)
    unknown_top = set(raw) - {"defaults", "sources", "jobs"}
    if unknown_top:
        problems.append(f"unknown top-level keys: {sorted(unknown_top)}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        problems.append("defaults: must be a mapping")
        defaults = {}
    unknown_defaults = set(defaults) - {"triggers", "state_store", "supervision", "backfill"}
    if unknown_defaults:
        problems.append(f"defaults: unknown fields {sorted(unknown_defaults)}")
    if not isinstance(defaults.get("backfill") or {}, dict):
        problems.append("defaults.backfill: must be a mapping of max_files_per_trigger / max_bytes_per_trigger")
    sources = _validate_sources(raw.get("sources") or {}, problems)
    raw_jobs = raw.get("jobs") or {}
    if not isinstance(raw_jobs, dict) or not raw_jobs:
        problems.append("'jobs' must be a non-empty mapping of job id to job")
        raise RegistryError(problems, path)

    writers: dict[str, str] = {}  # table -> its (first) writer
    all_writers: dict[str, list[str]] = {}
    for job_id, job in raw_jobs.items():
        for table in declared_tables(job):
            if table in writers:
                shared = _shared_alert_table(table, [raw_jobs[w] for w in all_writers[table]], job)
                if shared is None:
                    problems.append(f"job {job_id!r}: sink table {table!r} is already written by job {writers[table]!r}")
                elif shared:
                    problems.append(f"job {job_id!r}: sink table {table!r} is already written by job "
                                    f"{writers[table]!r}: {shared}")
                all_writers[table].append(job_id)
            else:
                writers[table] = job_id
                all_writers[table] = [job_id]

    order = dependency_order(raw_jobs, all_writers, problems)
    writer_sinks = {t: raw_jobs[j]["sink"] for t, j in writers.items() if declared_tables(raw_jobs[j])[0] == t}
    jobs: dict[str, JobSpec] = {}
    table_schemas: dict[str, dict[str, str]] = {}
    event_times: dict[str, str] = {}  # table -> the event-time column it inherits from its writer
    for job_id in order:
        spec, output_schema = _validate_job(
            job_id, raw_jobs[job_id], defaults, sources, table_schemas, writers, writer_sinks, problems, event_times
        )
        if spec is not None:
            jobs[job_id] = spec
        # An invalid job's output schema still lets its downstream jobs be checked.
        table = declared_tables(raw_jobs[job_id])
        if output_schema and table and table[0] not in table_schemas:
            table_schemas[table[0]] = output_schema
        if spec is not None and spec.sink.quarantine_table:
            table_schemas[spec.sink.quarantine_table] = dict(QUARANTINE_SCHEMA)
        if spec is not None and _output_event_time(spec):
            event_times[spec.sink.table] = _output_event_time(spec)
    if problems:
        raise RegistryError(problems, path)
    return Registry(jobs=jobs, order=tuple(order), table_schemas=table_schemas)


DEFAULT_MAX_LINE_BYTES = 16 * 1024**2
MAX_LINE_BYTES_LIMIT = 1024**3


def _validate_sources(raw: Any, problems: list[str]) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        problems.append("'sources' must be a mapping of source name to source")
        return {}
    sources: dict[str, dict[str, Any]] = {}
    for name, src in raw.items():
        where = f"source {name!r}"
        if not isinstance(src, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        fmt = src.get("format", "json")
        if fmt != "json":
            problems.append(f"{where}: format: {fmt!r} is not supported (supported: json)")
        schema = _validate_schema(src.get("schema"), f"{where}: schema", problems)
        event_time = src.get("event_time")
        if event_time is not None and event_time not in schema:
            problems.append(f"{where}: event_time: unknown column {event_time!r}")
        elif event_time is not None and schema.get(event_time) != "timestamp":
            problems.append(f"{where}: event_time: column {event_time!r} must be a timestamp")
        required = src.get("required") or []
        for column in required:
            if column not in schema:
                problems.append(f"{where}: required: unknown column {column!r}")
        max_line = DEFAULT_MAX_LINE_BYTES
        try:
            max_line = parse_size(src.get("max_line_bytes", DEFAULT_MAX_LINE_BYTES))
            if not 1024 <= max_line <= MAX_LINE_BYTES_LIMIT:
                raise ValueError(f"must be between 1 KB and 1 GB, got {src.get('max_line_bytes')!r}")
        except ValueError as exc:
            problems.append(f"{where}: max_line_bytes: {exc}")
        sources[name] = {
            "max_line_bytes": max_line,
            "path": src.get("path", f"landing/{name}"),
            "format": fmt,
            "schema": schema,
            "required": tuple(required),
            "event_time": event_time,
        }
    return sources


def _validate_schema(raw: Any, where: str, problems: list[str]) -> dict[str, str]:
    if not isinstance(raw, dict) or not raw:
        problems.append(f"{where}: must be a non-empty mapping of column to type")
        return {}
    for column, ctype in raw.items():
        if ctype not in COLUMN_TYPES:
            problems.append(f"{where}: column {column!r} has unknown type {ctype!r} (known: {', '.join(COLUMN_TYPES)})")
    return {str(k): str(v) for k, v in raw.items()}


def _validate_job(
    job_id: str,
    job: Any,
    defaults: dict,
    sources: dict[str, dict[str, Any]],
    table_schemas: dict[str, dict[str, str]],
    writers: dict[str, str],
    writer_sinks: dict[str, dict],
    problems: list[str],
    event_times: dict[str, str],
) -> tuple[JobSpec | None, dict[str, str] | None]:
    """The job's spec (None when invalid) and its output schema (None when unknowable)."""
    where = f"job {job_id!r}"
    if not _JOB_ID.match(str(job_id)):
        problems.append(f"{where}: id must be lowercase letters, digits and underscores")
    if not isinstance(job, dict):
        problems.append(f"{where}: must be a mapping")
        return None, None
    unknown = set(job) - {
        "description", "source", "transform", "sink", "triggers", "state_store", "live", "supervision", "quality",
        "reset_allowed",
    }
    if unknown:
        problems.append(f"{where}: unknown fields {sorted(unknown)}")
    before = len(problems)
    backfill_defaults = defaults.get("backfill") if isinstance(defaults.get("backfill"), dict) else None
    source = _validate_source(where, job.get("source"), sources, table_schemas, writers, writer_sinks, problems,
                              defaults_backfill=backfill_defaults, event_times=event_times)
    transform = job.get("transform") if isinstance(job.get("transform"), dict) else None
    if transform is None:
        problems.append(f"{where}: transform: must be a mapping with a 'kind'")
    right = None
    if transform is not None and transform.get("kind") == "stream_join":
        right = _validate_source(where, transform.get("right"), sources, table_schemas, writers, writer_sinks,
                                 problems, field="transform.right", defaults_backfill=backfill_defaults,
                                 event_times=event_times)
        if right is None:
            return None, None
    if source is None or transform is None:
        return None, None
    output_schema = _validate_transform(where, transform, source, problems, right)
    sink = _validate_sink(where, job.get("sink"), transform, output_schema, problems)
    triggers = _validate_triggers(where, {**defaults.get("triggers", {}), **(job.get("triggers") or {})}, problems)
    state_store = _validate_state_store(
        where, {**defaults.get("state_store", {}), **(job.get("state_store") or {})}, problems
    )
    if state_store and state_store.provider != "rocksdb" and transform.get("kind") == "stateful_process":
        problems.append(f"{where}: state_store.provider: a stateful_process job keeps its state in RocksDB "
                        f"(Spark's transformWithState needs its column families), got {state_store.provider!r}")
    supervision_raw = {**defaults.get("supervision", {}), **(job.get("supervision") or {})}
    health = [(defaults.get("supervision") or {}).get("health"), (job.get("supervision") or {}).get("health")]
    if all(isinstance(h, dict) for h in health):  # a job's thresholds refine the defaults' one by one
        supervision_raw["health"] = {**health[0], **health[1]}
    supervision = _validate_supervision(where, supervision_raw, problems)
    quality = _validate_quality(where, job.get("quality"), transform, problems)
    if len(problems) > before or sink is None or state_store is None:
        return None, output_schema
    spec = JobSpec(
        id=job_id,
        description=str(job.get("description", "")).strip(),
        source=source,
        transform=_transform_spec(transform, right),
        sink=sink,
        triggers=triggers,
        state_store=state_store,
        output_schema=output_schema,
        live=bool(job.get("live", True)),
        reset_allowed=_flag(where, "reset_allowed", job.get("reset_allowed", True), problems),
        supervision=supervision,
        quality=quality,
    )
    return spec, output_schema


def _flag(where: str, name: str, value: Any, problems: list[str]) -> bool:
    if not isinstance(value, bool):
        problems.append(f"{where}: {name}: must be true or false, got {value!r}")
        return True
    return value


def _transform_spec(raw: dict, right: SourceSpec | None) -> TransformSpec:
    """The typed spec of a transform section that validated without problems."""
    kind = raw["kind"]
    if kind == ParseJson.kind:
        return ParseJson()
    if kind == StreamJoin.kind:
        assert right is not None
        columns = tuple(JoinColumn(str(name), *str(ref).split(".", 1)) for name, ref in raw["columns"].items())
        return StreamJoin(
            right=right,
            join_keys=tuple((str(a), str(b)) for a, b in raw["join_keys"].items()),
            within_seconds=_join_bounds(raw["within"])[1],
            before_seconds=_join_bounds(raw["within"])[0],
            how=raw.get("how", "inner"),
            where=raw.get("where"),
            matched_column=raw.get("matched_column"),
            columns=columns,
        )
    keys = tuple(str(k["name"]) if isinstance(k, dict) else str(k) for k in raw["keys"])
    expressions = {str(k["name"]): (str(k["expr"]), k.get("type", "string")) for k in raw["keys"] if isinstance(k, dict)}
    if kind == StatefulProcess.kind:
        info = PROCESSORS[raw["processor"]]
        given = raw.get("params") or {}
        params = {name: param.parse(given.get(name, param.default)) for name, param in info.params.items()}
        return StatefulProcess(info.name, keys, params, raw.get("initial_state"))
    if kind == Deduplicate.kind:
        return Deduplicate(keys)
    aggregations = tuple(
        Aggregation(str(name), agg["fn"], agg.get("column"),
                    (str(agg["expr"]), agg.get("type", "double")) if agg.get("expr") is not None else None)
        for name, agg in raw["aggregations"].items()
    )
    if kind == SessionAggregate.kind:
        return SessionAggregate(parse_duration(raw["gap"]), keys, aggregations, expressions)
    if kind == RunningAggregate.kind:
        return RunningAggregate(keys, aggregations, expressions)
    window = parse_duration(raw["window"])
    slide = parse_duration(raw["slide"]) if raw.get("slide") is not None else window
    offset = parse_duration(raw["offset"]) if raw.get("offset") is not None else 0
    return WindowAggregate(window, slide, keys, aggregations, offset, expressions)


def _output_event_time(job: JobSpec) -> str | None:
    """The event-time column the job's sink table carries on (inherited by the jobs reading it): the source's,
    under its output name (a join's left event time), when the output keeps it."""
    column = job.source.event_time
    if isinstance(job.transform, StreamJoin):
        column = job.transform.output_of("left").get(column)
    return column if column and job.output_schema.get(column) == "timestamp" else None


def _validate_source(where, raw, sources, table_schemas, writers, writer_sinks, problems,
                     field="source", defaults_backfill: dict | None = None,
                     event_times: dict[str, str] | None = None) -> SourceSpec | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: {field}: must be a mapping with 'landing' or 'table'")
        return None
    unknown = set(raw) - {"landing", "table", "max_files_per_trigger", "max_bytes_per_trigger", "read_change_feed",
                          "watermark", "event_time", "backfill"}
    if unknown:
        problems.append(f"{where}: {field}: unknown fields {sorted(unknown)}")
    live = _admission(f"{where}: {field}", raw, problems)
    if "landing" in raw and live.max_files and live.max_bytes:
        problems.append(f"{where}: {field}: a landing source is admitted by max_files_per_trigger or "
                        "max_bytes_per_trigger, not both (Spark's file source takes one)")
    backfill = None
    backfill_raw = (raw.get("backfill") if "backfill" in raw else defaults_backfill) or {}  # the source's own wins
    if not isinstance(raw.get("backfill") or {}, dict):
        problems.append(f"{where}: {field}.backfill: must be a mapping of max_files_per_trigger / max_bytes_per_trigger")
    elif backfill_raw:
        backfill = _admission(f"{where}: {field}.backfill", backfill_raw, problems, strict=True)
    change_feed = raw.get("read_change_feed", False)
    if not isinstance(change_feed, bool):
        problems.append(f"{where}: {field}.read_change_feed: must be true or false, got {change_feed!r}")
        change_feed = False
    watermark = _optional(raw, "watermark", parse_duration, f"{where}: {field}", problems)
    if ("landing" in raw) == ("table" in raw):
        problems.append(f"{where}: {field}: give exactly one of 'landing' (a source name) or 'table'")
        return None
    if "landing" in raw:
        name = raw["landing"]
        if name not in sources:
            problems.append(f"{where}: {field}.landing: unknown source {name!r} (known: {sorted(sources)})")
            return None
        src = sources[name]
        kind, path, fmt, schema = "landing", src["path"], src["format"], dict(src["schema"])
        max_line_bytes = src["max_line_bytes"]
        required, event_time = src["required"], raw.get("event_time", src["event_time"])
        if change_feed:
            problems.append(f"{where}: {field}.read_change_feed: only a Delta table source has a change data feed")
    else:
        name = raw["table"]
        if name not in writers:
            problems.append(f"{where}: {field}.table: {name!r} is not written by any job in the registry")
            return None
        if name not in table_schemas:
            return None  # its writer is invalid or part of a cycle; already reported
        kind, path, fmt, schema, required = "delta", name, None, dict(table_schemas[name]), ()
        max_line_bytes = None
        event_time = (raw.get("event_time") or (event_times or {}).get(name)
                      or ("event_time" if schema.get("event_time") == "timestamp" else None))
        _check_change_feed(f"{where}: {field}", name, writers.get(name), writer_sinks.get(name) or {}, change_feed,
                           problems)
        if change_feed:
            schema.update(CHANGE_FEED_COLUMNS)
    if event_time is not None and schema.get(event_time) != "timestamp":
        problems.append(f"{where}: {field}.event_time: {event_time!r} is not a timestamp column of the source")
    return SourceSpec(kind, name, path, fmt, schema, tuple(required), event_time, watermark, live.max_files,
                      live.max_bytes, change_feed, backfill, max_line_bytes)


def _admission(where: str, raw: dict, problems: list[str], strict: bool = False) -> Admission:
    """max_files_per_trigger / max_bytes_per_trigger of `raw` (with `strict`, nothing else is allowed)."""
    if strict and set(raw) - {"max_files_per_trigger", "max_bytes_per_trigger"}:
        problems.append(f"{where}: unknown fields {sorted(set(raw) - {'max_files_per_trigger', 'max_bytes_per_trigger'})}")
    max_files = raw.get("max_files_per_trigger")
    if max_files is not None and (not isinstance(max_files, int) or isinstance(max_files, bool) or max_files < 1):
        problems.append(f"{where}.max_files_per_trigger: must be a positive integer, got {max_files!r}")
        max_files = None
    return Admission(max_files, _optional(raw, "max_bytes_per_trigger", parse_size, where, problems))


def _optional(raw: dict, key: str, parse, where: str, problems: list[str]):
    """`raw[key]` parsed; None when absent, or invalid (the problem is recorded, naming `where`.`key`)."""
    if raw.get(key) is None:
        return None
    try:
        return parse(raw[key])
    except ValueError as exc:
        problems.append(f"{where}.{key}: {exc}")
        return None


def _check_change_feed(where: str, table: str, writer: str | None, sink: dict, change_feed: bool,
                       problems: list[str]) -> None:
    """An upserted table can only be streamed through its change data feed, which its writer must enable."""
    if sink.get("mode") == "update" and not change_feed:
        problems.append(f"{where}.read_change_feed: table {table!r} is upserted (update mode) by job {writer!r}: "
                        "stream its changes with read_change_feed: true")
    properties = sink.get("properties") if isinstance(sink.get("properties"), dict) else {}
    if change_feed and str(properties.get("delta.enableChangeDataFeed", "")).lower() != "true":
        problems.append(f"{where}.read_change_feed: table {table!r} has no change data feed: set "
                        f"'delta.enableChangeDataFeed: true' in job {writer!r}'s sink.properties")


def _validate_transform(where: str, transform: dict, source: SourceSpec, problems: list[str],
                        right: SourceSpec | None = None) -> dict[str, str]:
    kind = transform.get("kind")
    schema = source.schema
    if kind not in TRANSFORM_KINDS:
        problems.append(f"{where}: transform.kind: unknown kind {kind!r} (known: {', '.join(TRANSFORM_KINDS)})")
        return {}
    if kind == "parse_json":
        if source.kind != "landing":
            problems.append(f"{where}: transform.kind: parse_json needs a landing source")
        return {**schema, **BRONZE_EXTRA_COLUMNS}
    for field_name, side in (("source", source), ("transform.right", right)):
        if kind == RunningAggregate.kind:
            break  # totals over all time: no event-time watermark needed
        if side is not None and side.watermark_seconds is None:
            problems.append(f"{where}: {field_name}.watermark: the {kind} transform needs an event-time watermark")
        elif side is not None and side.event_time is None:
            timestamps = [c for c, t in side.schema.items() if t == "timestamp"]
            problems.append(f"{where}: {field_name}.event_time: the {kind} transform needs an event-time column, and "
                            f"{side.name!r} inherits none from its writer: name one of its timestamp columns "
                            f"({', '.join(timestamps) or 'it has none'})")
    if kind == "stream_join":
        return _join_schema(where, transform, source, right, problems)
    keys = transform.get("keys")
    if not isinstance(keys, list) or not keys:
        problems.append(f"{where}: transform.keys: must be a non-empty list of columns")
        keys = []
    key_types: dict[str, str] = {}
    for key in keys:
        if isinstance(key, dict) and kind in EXPRESSION_KEY_KINDS:
            key_types.update(_expression_key(where, key, problems))
        elif isinstance(key, dict):
            problems.append(f"{where}: transform.keys: {kind} keys are columns, not expressions ({key!r})")
        elif key not in schema:
            problems.append(f"{where}: transform.keys: unknown column {key!r}")
        else:
            key_types[key] = schema[key]
    if kind == "deduplicate":
        return dict(schema)
    if kind == "stateful_process":
        return _processor_schema(where, transform, schema, problems)
    if kind == "session_aggregate":
        _positive_duration(where, "transform.gap", transform.get("gap"), problems)
        output = {"session_start": "timestamp", "session_end": "timestamp"}
    elif kind == RunningAggregate.kind:
        output = {}
    else:
        output = _window_bounds(where, transform, problems)
    output.update(key_types)
    return _aggregation_columns(where, transform, schema, output, problems)


def _expression_key(where: str, key: dict, problems: list[str]) -> dict[str, str]:
    """A key given as {name, expr, type}: a SQL expression over the source's columns, cast to `type`."""
    name, expr, ctype = key.get("name"), key.get("expr"), key.get("type", "string")
    field_name = f"transform.keys.{name}" if isinstance(name, str) else "transform.keys"
    if set(key) - {"name", "expr", "type"}:
        problems.append(f"{where}: {field_name}: unknown fields {sorted(set(key) - {'name', 'expr', 'type'})} "
                        "(an expression key has name, expr and type)")
    if not isinstance(name, str) or not _JOB_ID.match(name):
        problems.append(f"{where}: {field_name}.name: {name!r} must be a column name (lowercase, digits, underscores)")
        return {}
    if not isinstance(expr, str) or not expr.strip():
        problems.append(f"{where}: {field_name}.expr: must be a SQL expression over the source's columns")
    if ctype not in COLUMN_TYPES:
        problems.append(f"{where}: {field_name}.type: unknown type {ctype!r} (known: {', '.join(COLUMN_TYPES)})")
        return {}
    return {name: ctype}


def _shared_alert_table(table: str, writers: list[Any], job: Any) -> str | None:
    """Whether `job` may also write `table`: None when not (only alert processors share a table), '' when it
    may, else why not. Alert processors (stateful_process, alert_types in the catalogue) may share their append
    sink when their alert types differ (a full refresh of one removes its types' rows) and the sinks agree."""
    def alert_types(raw: Any) -> set[str] | None:
        transform = raw.get("transform") if isinstance(raw, dict) else None
        if not isinstance(transform, dict) or transform.get("kind") != StatefulProcess.kind:
            return None
        info = PROCESSORS.get(transform.get("processor"))
        sink = raw.get("sink") if isinstance(raw.get("sink"), dict) else {}
        if sink.get("table") != table:
            return None
        if info is None:  # an unknown processor is reported by its job's checks
            return set()
        return set(info.alert_types) if info.alert_types else None

    types = alert_types(job)
    if types is None or any(alert_types(w) is None for w in writers):
        return None
    taken = set().union(*(alert_types(w) for w in writers))
    if types & taken:
        return (f"alert processors share a table only when their alert types differ ({', '.join(sorted(types & taken))} "
                "already written)")
    sink = {k: v for k, v in job["sink"].items() if k != "table"}
    for writer in writers:
        if {k: v for k, v in writer["sink"].items() if k != "table"} != sink:
            return "the sinks of the jobs sharing an alert table must agree (mode, partition_by, properties)"
    if sink.get("mode", "append") != "append":
        return "a shared alert table is written in append mode"
    return ""


def _processor_schema(where: str, transform: dict, schema: dict[str, str], problems: list[str]) -> dict[str, str]:
    """Validate a stateful_process's processor, its parameters and the input columns it reads; its output schema."""
    unknown = set(transform) - {"kind", "processor", "keys", "params", "initial_state"}
    if unknown:
        problems.append(f"{where}: transform: unknown fields {sorted(unknown)}")
    info = PROCESSORS.get(transform.get("processor"))
    if info is None:
        problems.append(f"{where}: transform.processor: unknown processor {transform.get('processor')!r} "
                        f"(known: {', '.join(PROCESSORS)})")
        return {}
    initial = transform.get("initial_state")
    if initial is not None and info.initial_state_schema is None:
        problems.append(f"{where}: transform.initial_state: {info.name} does not start from an initial state")
    elif initial is not None and not (isinstance(initial, str) and _TABLE.match(initial)):
        problems.append(f"{where}: transform.initial_state: {initial!r} must be a table like 'layer/name' under "
                        "LAKEHOUSE_ROOT")
    for column, ctype in info.input_columns.items():
        if schema.get(column) != ctype:
            problems.append(f"{where}: transform.processor: {info.name} reads a {ctype} column {column!r}, which the "
                            f"source {'has as ' + schema[column] if column in schema else 'lacks'}")
    params = transform.get("params") or {}
    if not isinstance(params, dict):
        problems.append(f"{where}: transform.params: must map parameter names to values")
        params = {}
    for name, value in params.items():
        param = info.params.get(name)
        if param is None:
            problems.append(f"{where}: transform.params.{name}: unknown parameter of {info.name} "
                            f"(known: {', '.join(info.params)})")
            continue
        try:
            param.parse(value)
        except ValueError as exc:
            problems.append(f"{where}: transform.params.{name}: {exc}")
    keys = transform.get("keys") if isinstance(transform.get("keys"), list) else []
    key_columns = {str(k): schema.get(str(k), "string") for k in keys} if info.keys_in_output else {}
    return {**key_columns, **info.output_schema}


def _positive_duration(where: str, field_name: str, value: Any, problems: list[str]) -> int | None:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        problems.append(f"{where}: {field_name}: {exc}")
        return None
    if seconds <= 0:
        problems.append(f"{where}: {field_name}: must be positive, got {value!r}")
        return None
    return seconds


def _window_bounds(where: str, transform: dict, problems: list[str]) -> dict[str, str]:
    """Validate a window_aggregate's window and slide; the window columns of its output."""
    window = _positive_duration(where, "transform.window", transform.get("window"), problems)
    if transform.get("slide") is not None:
        slide = _positive_duration(where, "transform.slide", transform["slide"], problems)
        if window and slide and (slide > window or window % slide):
            problems.append(f"{where}: transform.slide: must divide the window ({transform['slide']!r})")
    if transform.get("offset") is not None:
        step = slide if transform.get("slide") is not None else window
        try:
            offset = parse_duration(transform["offset"])
            if step and not 0 <= offset < step:
                raise ValueError(f"must be at least 0 and less than the slide ({step} s), got {transform['offset']!r}")
        except ValueError as exc:
            problems.append(f"{where}: transform.offset: {exc}")
    return {"window_start": "timestamp", "window_end": "timestamp"}


def _aggregation_columns(where: str, transform: dict, schema: dict, output: dict[str, str],
                         problems: list[str]) -> dict[str, str]:
    """`output` plus one column per aggregation (validated against the input `schema`)."""
    aggregations = transform.get("aggregations")
    if not isinstance(aggregations, dict) or not aggregations:
        problems.append(f"{where}: transform.aggregations: must map output columns to {{fn, column}}")
        return output
    for name, agg in aggregations.items():
        fn = agg.get("fn") if isinstance(agg, dict) else None
        column = agg.get("column") if isinstance(agg, dict) else None
        expr = agg.get("expr") if isinstance(agg, dict) else None
        if fn not in AGGREGATE_FUNCTIONS:
            problems.append(f"{where}: transform.aggregations.{name}.fn: unknown function {fn!r}")
            continue
        if isinstance(agg, dict) and set(agg) - {"fn", "column", "expr", "type"}:
            problems.append(f"{where}: transform.aggregations.{name}: unknown fields "
                            f"{sorted(set(agg) - {'fn', 'column', 'expr', 'type'})}")
        if expr is not None:
            input_type = agg.get("type", "double")
            if column is not None or not isinstance(expr, str) or not expr.strip():
                problems.append(f"{where}: transform.aggregations.{name}: give a column or an expr (a SQL "
                                "expression over the source's columns), not both")
                continue
            if input_type not in COLUMN_TYPES:
                problems.append(f"{where}: transform.aggregations.{name}.type: unknown type {input_type!r}")
                continue
        elif (fn != "count" or column is not None) and column not in schema:  # count without a column: rows
            problems.append(f"{where}: transform.aggregations.{name}.column: unknown column {column!r}")
            continue
        else:
            input_type = schema.get(column)
        if name in output:
            problems.append(f"{where}: transform.aggregations.{name}: clashes with another output column")
        output[name] = _aggregate_type(fn, input_type)
    return output


def _join_schema(where: str, transform: dict, left: SourceSpec, right: SourceSpec | None,
                 problems: list[str]) -> dict[str, str]:
    """Validate a stream_join (keys, bound, join type, output columns); its output schema."""
    unknown = set(transform) - {"kind", "where", "right", "how", "join_keys", "within", "matched_column", "columns"}
    if unknown:
        problems.append(f"{where}: transform: unknown fields {sorted(unknown)}")
    if right is None:
        return {}
    sides = {"left": left.schema, "right": right.schema}
    if transform.get("how", "inner") not in JOIN_TYPES:
        problems.append(f"{where}: transform.how: unknown join type {transform.get('how')!r} "
                        f"(known: {', '.join(JOIN_TYPES)})")
    if transform.get("where") is not None and not isinstance(transform["where"], str):
        problems.append(f"{where}: transform.where: must be a SQL condition on the left side, as a string")
    on = transform.get("join_keys")
    if not isinstance(on, dict) or not on:
        problems.append(f"{where}: transform.join_keys: must map left columns to right columns (equality keys)")
        on = {}
    for left_column, right_column in on.items():
        if left_column not in left.schema:
            problems.append(f"{where}: transform.join_keys: unknown left column {left_column!r}")
        if right_column not in right.schema:
            problems.append(f"{where}: transform.join_keys: unknown right column {right_column!r}")
    try:
        _join_bounds(transform.get("within"))
    except ValueError as exc:
        problems.append(f"{where}: transform.within: {exc}")
    columns = transform.get("columns")
    if not isinstance(columns, dict) or not columns:
        problems.append(f"{where}: transform.columns: must map output columns to 'left.<column>' or 'right.<column>'")
        return {}
    output: dict[str, str] = {}
    for name, ref in columns.items():
        side, _, column = str(ref).partition(".")
        if side not in sides or column not in sides[side]:
            problems.append(f"{where}: transform.columns.{name}: {ref!r} is not 'left.<column>' or 'right.<column>' "
                            "of the join's inputs")
            continue
        output[str(name)] = sides[side][column]
    for side, spec in (("left", left), ("right", right)):
        if spec.event_time and f"{side}.{spec.event_time}" not in [str(r) for r in columns.values()]:
            problems.append(f"{where}: transform.columns: must keep the {side} event time "
                            f"('{side}.{spec.event_time}'): the join bound is checked on it")
    matched = transform.get("matched_column")
    if matched is not None:
        if not isinstance(matched, str) or not _JOB_ID.match(matched) or matched in output:
            problems.append(f"{where}: transform.matched_column: {matched!r} must be a new column name")
        else:
            output[matched] = "boolean"
    return output


def _join_bounds(raw: Any) -> tuple[int, int]:
    """(before, after) seconds of a join's `within`: a duration (the right time in [left, left + within]) or
    {before, after} (the right time in [left - before, left + after])."""
    if isinstance(raw, dict):
        unknown = set(raw) - {"before", "after"}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)} (a duration, or {{before, after}})")
        before, after = (parse_duration(raw[k]) if raw.get(k) is not None else 0 for k in ("before", "after"))
    else:
        before, after = 0, parse_duration(raw)
    if before < 0 or after < 0 or before + after <= 0:
        raise ValueError(f"the bound must be a positive span, got {raw!r}")
    return before, after


def _aggregate_type(fn: str, column_type: str | None) -> str:
    if fn == "count":
        return "long"
    if fn == "avg":
        return "double"
    if fn == "sum" and column_type in ("int", "long"):
        return "long"
    return column_type or "double"


def _validate_sink(where, raw, transform, output_schema, problems) -> SinkSpec | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: sink: must be a mapping with 'table' and 'mode'")
        return None
    unknown = set(raw) - {"table", "mode", "merge_keys", "partition_by", "quarantine_table", "properties",
                          "files_per_batch", "maintenance"}
    if unknown:
        problems.append(f"{where}: sink: unknown fields {sorted(unknown)}")
    table, mode = raw.get("table"), raw.get("mode", "append")
    for field_name in ("table", "quarantine_table"):
        value = raw.get(field_name)
        if (field_name == "table" or value is not None) and not (isinstance(value, str) and _TABLE.match(value)):
            problems.append(f"{where}: sink.{field_name}: {value!r} must look like 'layer/name'")
    if mode not in SINK_MODES:
        problems.append(f"{where}: sink.mode: unknown mode {mode!r} (known: {', '.join(SINK_MODES)})")
    merge_keys = list(raw.get("merge_keys") or [])
    partition_by = list(raw.get("partition_by") or [])
    for field_name, columns in (("merge_keys", merge_keys), ("partition_by", partition_by)):
        for column in columns:
            if column not in output_schema:
                problems.append(f"{where}: sink.{field_name}: unknown column {column!r}")
    if transform.get("kind") == RunningAggregate.kind:
        if mode != "update":
            problems.append(f"{where}: sink.mode: a running_aggregate upserts its totals: mode update")
        keys = [k.get("name") if isinstance(k, dict) else k for k in transform.get("keys") or []]
        merge_keys = merge_keys or keys  # one row per key
        if sorted(map(str, merge_keys)) != sorted(map(str, keys)):
            problems.append(f"{where}: sink.merge_keys: a running_aggregate has one row per key: its keys {keys}")
    if mode == "update" and not merge_keys:
        problems.append(f"{where}: sink.merge_keys: update mode upserts and needs merge keys")
    if mode == "update" and transform.get("kind") not in UPDATE_KINDS:
        problems.append(f"{where}: sink.mode: update mode needs a {' or '.join(UPDATE_KINDS)} transform")
    quarantine = raw.get("quarantine_table")
    if transform.get("kind") == "parse_json" and not quarantine:
        problems.append(f"{where}: sink.quarantine_table: parse_json needs a table for unparseable lines")
    properties = _validate_properties(where, raw.get("properties"), mode, problems)
    files = raw.get("files_per_batch", 1)
    if not isinstance(files, int) or isinstance(files, bool) or files < 1:
        problems.append(f"{where}: sink.files_per_batch: must be a positive integer, got {files!r}")
        files = 1
    maintenance = _validate_maintenance(where, raw.get("maintenance"), problems)
    return SinkSpec(str(table), str(mode), tuple(str(k) for k in merge_keys), tuple(partition_by), quarantine, properties, files,
                    maintenance)


def _validate_properties(where: str, raw: Any, mode: str, problems: list[str]) -> dict[str, str]:
    """Delta table properties of the sink (and its quarantine table), as the strings Delta stores."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: sink.properties: must map Delta table properties to values")
        return {}
    properties = {}
    for key, value in raw.items():
        if key not in TABLE_PROPERTIES:
            problems.append(f"{where}: sink.properties.{key}: not a supported table property "
                            f"(supported: {', '.join(TABLE_PROPERTIES)})")
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key in BOOLEAN_PROPERTIES and text not in ("true", "false"):
            problems.append(f"{where}: sink.properties.{key}: must be true or false, got {value!r}")
        properties[str(key)] = text
    if mode == "update" and properties.get("delta.appendOnly") == "true":
        problems.append(f"{where}: sink.properties.delta.appendOnly: an update-mode (MERGE) sink cannot be append-only")
    return properties


def _validate_maintenance(where: str, raw: Any, problems: list[str]) -> MaintenanceSpec:
    if raw is None:
        return MaintenanceSpec()
    if not isinstance(raw, dict):
        problems.append(f"{where}: sink.maintenance: must be a mapping with 'optimize' and/or 'vacuum_retention'")
        return MaintenanceSpec()
    unknown = set(raw) - {"optimize", "vacuum_retention"}
    if unknown:
        problems.append(f"{where}: sink.maintenance: unknown fields {sorted(unknown)}")
    optimize = raw.get("optimize", True)
    if not isinstance(optimize, bool):
        problems.append(f"{where}: sink.maintenance.optimize: must be true or false, got {optimize!r}")
        optimize = True
    retention = MaintenanceSpec.vacuum_retention_hours
    if raw.get("vacuum_retention") is not None:
        try:
            seconds = parse_duration(raw["vacuum_retention"])
            if seconds % 3600:
                raise ValueError("must be whole hours")
            retention = seconds // 3600
        except ValueError as exc:
            problems.append(f"{where}: sink.maintenance.vacuum_retention: {exc}")
    return MaintenanceSpec(optimize=optimize, vacuum_retention_hours=retention)


def _validate_triggers(where: str, raw: dict, problems: list[str]) -> dict[str, Trigger]:
    triggers: dict[str, Trigger] = {}
    for name in ("backfill", "live"):
        try:
            triggers[name] = Trigger.parse(raw.get(name, "available-now" if name == "backfill" else ""))
        except ValueError as exc:
            problems.append(f"{where}: triggers.{name}: {exc}")
    return triggers


def _validate_state_store(where: str, raw: dict, problems: list[str]) -> StateStoreSpec | None:
    provider = raw.get("provider", "rocksdb")
    if provider not in STATE_PROVIDERS:
        problems.append(f"{where}: state_store.provider: unknown provider {provider!r}")
    numbers = {}
    for name, default in (("shuffle_partitions", 4), ("min_batches_to_retain", 20)):
        value = raw.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{where}: state_store.{name}: must be a positive integer, got {value!r}")
            return None
        numbers[name] = value
    changelog = raw.get("changelog_checkpointing", True)
    if not isinstance(changelog, bool):
        problems.append(f"{where}: state_store.changelog_checkpointing: must be true or false, got {changelog!r}")
        return None
    if numbers["shuffle_partitions"] > MAX_SHUFFLE_PARTITIONS:
        problems.append(f"{where}: state_store.shuffle_partitions: at most {MAX_SHUFFLE_PARTITIONS}, "
                        f"got {numbers['shuffle_partitions']}")
        return None
    return StateStoreSpec(
        provider=provider,
        changelog_checkpointing=changelog,
        shuffle_partitions=numbers["shuffle_partitions"],
        min_batches_to_retain=numbers["min_batches_to_retain"],
    )


def _validate_supervision(where: str, raw: dict, problems: list[str]) -> SupervisionSpec:
    unknown = set(raw) - set(SupervisionSpec.__dataclass_fields__)
    if unknown:
        problems.append(f"{where}: supervision: unknown fields {sorted(unknown)}")
    on_down = raw.get("on_down", "restart")
    if on_down not in ("restart", "alert"):
        problems.append(f"{where}: supervision.on_down: must be 'restart' or 'alert', got {on_down!r}")
    numbers = {}
    for name in ("max_restarts", "backoff_seconds", "stall_after_seconds", "health_window_batches"):
        value = raw.get(name, getattr(SupervisionSpec, name))
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{where}: supervision.{name}: must be a non-negative integer, got {value!r}")
            value = getattr(SupervisionSpec, name)
        numbers[name] = value
    return SupervisionSpec(on_down=on_down, health=_validate_health(where, raw.get("health") or {}, problems),
                           **numbers)


def _validate_health(where: str, raw: Any, problems: list[str]) -> HealthThresholds:
    """`supervision.health`: the state-health thresholds (fractions in (0, 1], a skew ratio >= 1, a key count)."""
    if not isinstance(raw, dict):
        problems.append(f"{where}: supervision.health: must map thresholds to numbers")
        return HealthThresholds()
    unknown = set(raw) - set(HealthThresholds.__dataclass_fields__)
    if unknown:
        problems.append(f"{where}: supervision.health: unknown fields {sorted(unknown)} "
                        f"(known: {', '.join(HealthThresholds.__dataclass_fields__)})")
    values: dict[str, Any] = {}
    for name, low, high in (("max_dropped_fraction", 0, 1), ("state_memory_fraction", 0, 1),
                            ("max_partition_skew", 1, None), ("skew_min_keys", 0, None)):
        value = raw.get(name, getattr(HealthThresholds, name))
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or value < low or (high is not None and value > high) or (name == "skew_min_keys"
                                                                               and not isinstance(value, int)):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            kind = "an integer" if name == "skew_min_keys" else "a number"
            problems.append(f"{where}: supervision.health.{name}: must be {kind} {bound}, got {value!r}")
            value = getattr(HealthThresholds, name)
        values[name] = value
    return HealthThresholds(**values)


def _validate_quality(where: str, raw: Any, transform: dict, problems: list[str]) -> QualitySpec:
    """The job's `quality:` section: `freshness_lag` (a duration) and `severity` overrides."""
    if raw is None:
        return QualitySpec()
    if not isinstance(raw, dict):
        problems.append(f"{where}: quality: must be a mapping with 'freshness_lag' and/or 'severity'")
        return QualitySpec()
    info = PROCESSORS.get(transform.get("processor")) if transform.get("kind") == StatefulProcess.kind else None
    if transform.get("kind") not in QUALITY_KINDS or (info is not None and not info.suite):
        problems.append(f"{where}: quality: only {', '.join(QUALITY_KINDS[:-1])} jobs and stateful_process jobs "
                        "of a processor with a suite have quality suites")
    unknown = set(raw) - {"freshness_lag", "severity"}
    if unknown:
        problems.append(f"{where}: quality: unknown fields {sorted(unknown)}")
    lag = None
    if raw.get("freshness_lag") is not None:
        try:
            lag = parse_duration(raw["freshness_lag"])
            if lag <= 0:
                raise ValueError("must be positive")
        except ValueError as exc:
            problems.append(f"{where}: quality.freshness_lag: {exc}")
    severity = raw.get("severity") or {}
    if not isinstance(severity, dict):
        problems.append(f"{where}: quality.severity: must map expectation names to {' or '.join(SEVERITIES)}")
        severity = {}
    for name, level in severity.items():
        if name not in CHECKS:
            problems.append(f"{where}: quality.severity.{name}: unknown expectation (known: {', '.join(CHECKS)})")
        elif level not in SEVERITIES:
            problems.append(f"{where}: quality.severity.{name}: must be {' or '.join(SEVERITIES)}, got {level!r}")
    return QualitySpec(freshness_lag_seconds=lag, severity={str(k): str(v) for k, v in severity.items()})
