"""A job's `transform:` section: one parser per kind, each validating the raw mapping and returning its spec
and its output schema (:data:`TRANSFORM_PARSERS`, a kind -> its parser).

A parser records every problem it finds and still returns the output schema it can infer, so that the
jobs downstream of an invalid job are checked too; its spec counts only when it recorded no problem.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from include.registry.cdc import (
    CHANGE_INPUTS,
    DEFAULT_DELETE_WHEN,
    SEQUENCE,
    TYPE1_COLUMNS,
    TYPE2_COLUMNS,
    ApplyChanges,
)
from include.registry.columns import (
    BRONZE_EXTRA_COLUMNS,
    CDC_BRONZE_COLUMNS,
    KAFKA_BRONZE_COLUMNS,
    MAX_DECIMAL_PRECISION,
    column_type,
)
from include.registry.context import LoadContext
from include.registry.durations import parse_duration
from include.registry.processors import PROCESSORS
from include.registry.specs import (
    Aggregation,
    Deduplicate,
    JoinColumn,
    ParseJson,
    RunningAggregate,
    SessionAggregate,
    SourceSpec,
    StatefulProcess,
    StreamJoin,
    TransformSpec,
    WindowAggregate,
)
from include.registry.vocabulary import AGGREGATE_FUNCTIONS, IDENTIFIER, JOIN_TYPES, TABLE_NAME

Parsed = tuple[TransformSpec | None, dict[str, str]]  # the spec (None when invalid) and the output schema
# (ctx, "job 'x'", the raw transform, the source, a join's right source) -> what the transform makes
TransformParser = Callable[[LoadContext, str, dict, SourceSpec, SourceSpec | None], Parsed]


def _needs_event_time(ctx: LoadContext, where: str, kind: str, source: SourceSpec, right: SourceSpec | None) -> None:
    """A stateful kind's inputs need a watermark on an event-time column."""
    for field_name, side in (("source", source), ("transform.right", right)):
        if side is not None and side.watermark_seconds is None:
            ctx.problem(where, f"{field_name}.watermark: the {kind} transform needs an event-time watermark")
        elif side is not None and side.event_time is None:
            timestamps = [c for c, t in side.schema.items() if t == "timestamp"]
            ctx.problem(where, f"{field_name}.event_time: the {kind} transform needs an event-time column, and "
                        f"{side.name!r} inherits none from its writer: name one of its timestamp columns "
                        f"({', '.join(timestamps) or 'it has none'})")


@dataclass(frozen=True)
class _Keys:
    """A transform's `keys`: columns of the source, or (where the kind allows) named SQL expressions."""

    names: tuple[str, ...]
    expressions: dict[str, tuple[str, str]]  # name -> (SQL, type), of the expression keys
    types: dict[str, str]  # output column -> type, of the valid keys


def _grouping_keys(ctx: LoadContext, where: str, kind: str, raw: dict, schema: dict[str, str],
                   expressions: bool) -> _Keys:
    """The `keys` of `raw`, checked against the source's `schema`."""
    keys = raw.get("keys")
    if not isinstance(keys, list) or not keys:
        ctx.problem(where, "transform.keys: must be a non-empty list of columns")
        keys = []
    types: dict[str, str] = {}
    for key in keys:
        if isinstance(key, dict) and expressions:
            types.update(_expression_key(ctx, where, key))
        elif isinstance(key, dict):
            ctx.problem(where, f"transform.keys: {kind} keys are columns, not expressions ({key!r})")
        elif key not in schema:
            ctx.problem(where, f"transform.keys: unknown column {key!r}")
        else:
            types[key] = schema[key]
    names = tuple(str(k.get("name")) if isinstance(k, dict) else str(k) for k in keys)
    sql = {str(k.get("name")): (str(k.get("expr")), k.get("type", "string")) for k in keys if isinstance(k, dict)}
    return _Keys(names, sql, types)


def _expression_key(ctx: LoadContext, where: str, key: dict) -> dict[str, str]:
    """A key given as {name, expr, type}: a SQL expression over the source's columns, cast to `type`."""
    name, expr, ctype = key.get("name"), key.get("expr"), key.get("type", "string")
    at = f"{where}: " + (f"transform.keys.{name}" if isinstance(name, str) else "transform.keys")
    ctx.unknown_fields(at, key, ("name", "expr", "type"), "(an expression key has name, expr and type)")
    if not isinstance(name, str) or not IDENTIFIER.match(name):
        ctx.problem(f"{at}.name", f"{name!r} must be a column name (lowercase, digits, underscores)")
        return {}
    if not isinstance(expr, str) or not expr.strip():
        ctx.problem(f"{at}.expr", "must be a SQL expression over the source's columns")
    try:
        return {name: column_type(ctype).name}
    except ValueError as exc:
        ctx.problem(f"{at}.type", str(exc))
        return {}


def _parse_window_aggregate(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                            right: SourceSpec | None) -> Parsed:
    _needs_event_time(ctx, where, WindowAggregate.kind, source, right)
    keys = _grouping_keys(ctx, where, WindowAggregate.kind, raw, source.schema, expressions=True)
    window = slide = ctx.positive_duration(f"{where}: transform.window", raw.get("window"))
    if raw.get("slide") is not None:
        slide = ctx.positive_duration(f"{where}: transform.slide", raw["slide"])
        if window and slide and (slide > window or window % slide):
            ctx.problem(where, f"transform.slide: must divide the window ({raw['slide']!r})")
    offset = 0
    if raw.get("offset") is not None:
        try:
            offset = parse_duration(raw["offset"])
            if slide and not 0 <= offset < slide:
                raise ValueError(f"must be at least 0 and less than the slide ({slide} s), got {raw['offset']!r}")
        except ValueError as exc:
            ctx.problem(where, f"transform.offset: {exc}")
    output = {"window_start": "timestamp", "window_end": "timestamp", **keys.types}
    aggregations = _aggregations(ctx, where, raw, source.schema, output)
    return WindowAggregate(window, slide, keys.names, aggregations, offset, keys.expressions), output


def _parse_session_aggregate(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                             right: SourceSpec | None) -> Parsed:
    _needs_event_time(ctx, where, SessionAggregate.kind, source, right)
    keys = _grouping_keys(ctx, where, SessionAggregate.kind, raw, source.schema, expressions=True)
    gap = ctx.positive_duration(f"{where}: transform.gap", raw.get("gap"))
    output = {"session_start": "timestamp", "session_end": "timestamp", **keys.types}
    aggregations = _aggregations(ctx, where, raw, source.schema, output)
    return SessionAggregate(gap, keys.names, aggregations, keys.expressions), output


def _parse_running_aggregate(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                             right: SourceSpec | None) -> Parsed:
    # Totals over all time: no event-time watermark needed.
    keys = _grouping_keys(ctx, where, RunningAggregate.kind, raw, source.schema, expressions=True)
    output = dict(keys.types)
    aggregations = _aggregations(ctx, where, raw, source.schema, output)
    return RunningAggregate(keys.names, aggregations, keys.expressions), output


def _aggregations(ctx: LoadContext, where: str, raw: dict, schema: dict[str, str],
                  output: dict[str, str]) -> tuple[Aggregation, ...]:
    """The `aggregations` of `raw` (validated against the input `schema`); their columns added to `output`."""
    aggregations = raw.get("aggregations")
    if not isinstance(aggregations, dict) or not aggregations:
        ctx.problem(where, "transform.aggregations: must map output columns to {fn, column}")
        return ()
    parsed: list[Aggregation] = []
    for name, agg in aggregations.items():
        at = f"{where}: transform.aggregations.{name}"
        fn, column, expr = (agg.get("fn"), agg.get("column"), agg.get("expr")) if isinstance(agg, dict) else [None] * 3
        if fn not in AGGREGATE_FUNCTIONS:
            ctx.problem(f"{at}.fn", f"unknown function {fn!r}")
            continue
        ctx.unknown_fields(at, agg, ("fn", "column", "expr", "type"))
        if expr is not None:
            input_type = agg.get("type", "double")
            if column is not None or not isinstance(expr, str) or not expr.strip():
                ctx.problem(at, "give a column or an expr (a SQL expression over the source's columns), not both")
                continue
            try:
                input_type = column_type(input_type).name
            except ValueError as exc:
                ctx.problem(f"{at}.type", str(exc))
                continue
        elif (fn != "count" or column is not None) and column not in schema:  # count without a column: rows
            ctx.problem(f"{at}.column", f"unknown column {column!r}")
            continue
        else:
            input_type = schema.get(column)
        if name in output:
            ctx.problem(at, "clashes with another output column")
        output[name] = _aggregate_type(fn, input_type)
        parsed.append(Aggregation(str(name), fn, column, (str(expr), input_type) if expr is not None else None))
    return tuple(parsed)


def _aggregate_type(fn: str, input_type: str | None) -> str:
    if fn == "count":
        return "long"
    try:
        decimal = column_type(input_type).params
    except ValueError:  # not a type: named where it was declared
        decimal = ()
    if decimal and fn in ("sum", "avg"):  # Spark's result types: sum adds 10 integer digits, avg 4 of each
        precision, scale = decimal[0] + (10 if fn == "sum" else 4), decimal[1] + (0 if fn == "sum" else 4)
        return f"decimal({min(precision, MAX_DECIMAL_PRECISION)},{min(scale, MAX_DECIMAL_PRECISION)})"
    if fn == "avg":
        return "double"
    if fn == "sum" and input_type in ("int", "long"):
        return "long"
    if fn == "sum" and input_type == "float":  # Spark sums floats as doubles
        return "double"
    return input_type or "double"


def _parse_json(ctx: LoadContext, where: str, raw: dict, source: SourceSpec, right: SourceSpec | None) -> Parsed:
    if source.kind not in ("landing", "kafka"):
        ctx.problem(where, "transform.kind: parse_json needs a landing, Kafka or CDC source")
    extra = CDC_BRONZE_COLUMNS if source.cdc else KAFKA_BRONZE_COLUMNS if source.kind == "kafka" else BRONZE_EXTRA_COLUMNS
    return ParseJson(), {**source.schema, **extra}


APPLY_CHANGES_FIELDS = ("kind", "keys", "scd", "sequence_by", "track_history", "delete_when", "ignore_null_updates")
# The columns of a CDC bronze table that are not the data: what an apply_changes job does not copy as data.
NOT_DATA = {*CDC_BRONZE_COLUMNS, *BRONZE_EXTRA_COLUMNS}


def _parse_apply_changes(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                         right: SourceSpec | None) -> Parsed:
    """A CDC bronze table's changes applied by key in sequence order: SCD type 1 (the rows now) or 2 (history)."""
    ctx.unknown_fields(f"{where}: transform", raw, APPLY_CHANGES_FIELDS)
    if source.kind != "delta":
        ctx.problem(where, "transform.kind: apply_changes reads a table of changes (a CDC source's bronze table)")
    keys = _grouping_keys(ctx, where, ApplyChanges.kind, raw, source.schema, expressions=False).names
    data = [c for c in source.schema if c not in NOT_DATA and c not in keys]
    scd = raw.get("scd", 1)
    if scd not in (1, 2):
        ctx.problem(where, f"transform.scd: 1 (the rows as they are now) or 2 (their history), got {scd!r}")
        scd = 1
    sequence = raw.get("sequence_by", SEQUENCE)
    if sequence not in source.schema:
        ctx.problem(where, f"transform.sequence_by: unknown column {sequence!r} (the changes' order; default {SEQUENCE})")
    elif source.schema[sequence] not in ("string", "long", "int", "timestamp"):
        ctx.problem(where, f"transform.sequence_by: {sequence!r} is a {source.schema[sequence]}: the order needs a "
                    "string, long, int or timestamp column")
    needed = [c for c in CHANGE_INPUTS if c not in source.schema and (scd == 2 or c != "_cdc_tx_id")]
    if source.kind == "delta" and needed:
        ctx.problem(where, f"source: {source.name!r} lacks {', '.join(needed)}: apply_changes reads a CDC source's "
                    "bronze table")
    tracked = _tracked(ctx, where, raw.get("track_history"), data) if scd == 2 else ()
    if scd == 1 and raw.get("track_history") is not None:
        ctx.problem(where, "transform.track_history: a type 1 table keeps no history (scd: 2 does)")
    delete_when = raw.get("delete_when", DEFAULT_DELETE_WHEN)
    if not isinstance(delete_when, str) or not delete_when.strip():
        ctx.problem(where, f"transform.delete_when: a SQL condition over the changes, got {delete_when!r}")
    ignore_nulls = ctx.flag(f"{where}: transform.ignore_null_updates", raw.get("ignore_null_updates", False), False)
    output = {c: source.schema[c] for c in (*keys, *data) if c in source.schema}
    output.update(TYPE1_COLUMNS if scd == 1 else TYPE2_COLUMNS)
    spec = ApplyChanges(keys, scd, (*keys, *data), tracked, str(sequence), str(delete_when), ignore_nulls)
    return spec, output


def _tracked(ctx: LoadContext, where: str, raw: object, data: list[str]) -> tuple[str, ...]:
    """`track_history`: the columns whose change starts a version: a list, or {except: [...]} (every data column
    but those); default every data column."""
    if raw is None:
        return tuple(data)
    names = raw.get("except") if isinstance(raw, dict) and set(raw) == {"except"} else raw
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        ctx.problem(where, "transform.track_history: a list of columns, or {except: [columns]}")
        return tuple(data)
    for name in names:
        if name not in data:
            ctx.problem(where, f"transform.track_history: {name!r} is not a data column of the source "
                        f"({', '.join(data)})")
    return tuple(c for c in data if c not in names) if isinstance(raw, dict) else tuple(n for n in data if n in names)


def _parse_deduplicate(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                       right: SourceSpec | None) -> Parsed:
    _needs_event_time(ctx, where, Deduplicate.kind, source, right)
    keys = _grouping_keys(ctx, where, Deduplicate.kind, raw, source.schema, expressions=False)
    return Deduplicate(keys.names), dict(source.schema)


def _parse_stateful_process(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                            right: SourceSpec | None) -> Parsed:
    """A processor of the catalogue: its parameters and the input columns it reads; its output schema from it."""
    _needs_event_time(ctx, where, StatefulProcess.kind, source, right)
    keys = _grouping_keys(ctx, where, StatefulProcess.kind, raw, source.schema, expressions=False)
    schema = source.schema
    ctx.unknown_fields(f"{where}: transform", raw, ("kind", "processor", "keys", "params", "initial_state"))
    info = PROCESSORS.get(raw.get("processor")) if isinstance(raw.get("processor"), str) else None
    if info is None:
        ctx.problem(where, f"transform.processor: unknown processor {raw.get('processor')!r} "
                    f"(known: {', '.join(PROCESSORS)})")
        return None, {}
    initial = raw.get("initial_state")
    if initial is not None and info.initial_state_schema is None:
        ctx.problem(where, f"transform.initial_state: {info.name} does not start from an initial state")
    elif initial is not None and not (isinstance(initial, str) and TABLE_NAME.match(initial)):
        ctx.problem(where, f"transform.initial_state: {initial!r} must be a table like 'layer/name' under "
                    "LAKEHOUSE_ROOT")
    for column, ctype in info.input_columns.items():
        if schema.get(column) != ctype:
            ctx.problem(where, f"transform.processor: {info.name} reads a {ctype} column {column!r}, which the "
                        f"source {'has as ' + schema[column] if column in schema else 'lacks'}")
    given = raw.get("params") or {}
    if not isinstance(given, dict):
        ctx.problem(where, "transform.params: must map parameter names to values")
        given = {}
    params = {name: param.parse(param.default) for name, param in info.params.items()}
    for name, value in given.items():
        param = info.params.get(name)
        if param is None:
            ctx.problem(where, f"transform.params.{name}: unknown parameter of {info.name} "
                        f"(known: {', '.join(info.params)})")
            continue
        try:
            params[name] = param.parse(value)
        except ValueError as exc:
            ctx.problem(where, f"transform.params.{name}: {exc}")
    # The key columns as given (even unknown ones), so that the jobs downstream are checked against them.
    raw_keys = raw.get("keys") if isinstance(raw.get("keys"), list) else []
    key_columns = {str(k): schema.get(str(k), "string") for k in raw_keys} if info.keys_in_output else {}
    return StatefulProcess(info.name, keys.names, params, initial), {**key_columns, **info.output_schema}


def _parse_stream_join(ctx: LoadContext, where: str, raw: dict, left: SourceSpec, right: SourceSpec | None) -> Parsed:
    """The join of the source (left) with `right`: keys, bound, join type, output columns."""
    _needs_event_time(ctx, where, StreamJoin.kind, left, right)
    ctx.unknown_fields(f"{where}: transform", raw,
                       ("kind", "where", "right", "how", "join_keys", "within", "matched_column", "columns"))
    if right is None:
        return None, {}
    sides = {"left": left.schema, "right": right.schema}
    how = raw.get("how", "inner")
    if how not in JOIN_TYPES:
        ctx.problem(where, f"transform.how: unknown join type {how!r} (known: {', '.join(JOIN_TYPES)})")
    condition = raw.get("where")
    if condition is not None and not isinstance(condition, str):
        ctx.problem(where, "transform.where: must be a SQL condition on the left side, as a string")
    on = raw.get("join_keys")
    if not isinstance(on, dict) or not on:
        ctx.problem(where, "transform.join_keys: must map left columns to right columns (equality keys)")
        on = {}
    for left_column, right_column in on.items():
        if left_column not in left.schema:
            ctx.problem(where, f"transform.join_keys: unknown left column {left_column!r}")
        if right_column not in right.schema:
            ctx.problem(where, f"transform.join_keys: unknown right column {right_column!r}")
    before, after = 0, 0
    try:
        before, after = _join_bounds(raw.get("within"))
    except ValueError as exc:
        ctx.problem(where, f"transform.within: {exc}")
    columns = raw.get("columns")
    if not isinstance(columns, dict) or not columns:
        ctx.problem(where, "transform.columns: must map output columns to 'left.<column>' or 'right.<column>'")
        return None, {}
    output: dict[str, str] = {}
    picked: list[JoinColumn] = []
    for name, ref in columns.items():
        side, _, column = str(ref).partition(".")
        if side not in sides or column not in sides[side]:
            ctx.problem(where, f"transform.columns.{name}: {ref!r} is not 'left.<column>' or 'right.<column>' "
                        "of the join's inputs")
            continue
        output[str(name)] = sides[side][column]
        picked.append(JoinColumn(str(name), side, column))
    for side, spec in (("left", left), ("right", right)):
        if spec.event_time and f"{side}.{spec.event_time}" not in [str(r) for r in columns.values()]:
            ctx.problem(where, f"transform.columns: must keep the {side} event time "
                        f"('{side}.{spec.event_time}'): the join bound is checked on it")
    matched = raw.get("matched_column")
    if matched is not None:
        if not isinstance(matched, str) or not IDENTIFIER.match(matched) or matched in output:
            ctx.problem(where, f"transform.matched_column: {matched!r} must be a new column name")
        else:
            output[matched] = "boolean"
    join = StreamJoin(right=right, join_keys=tuple((str(a), str(b)) for a, b in on.items()), within_seconds=after,
                      how=how, where=condition, matched_column=matched, columns=tuple(picked),
                      before_seconds=before)
    return join, output


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


TRANSFORM_PARSERS: dict[str, TransformParser] = {  # in the order the "unknown kind" message lists them
    ParseJson.kind: _parse_json,
    Deduplicate.kind: _parse_deduplicate,
    WindowAggregate.kind: _parse_window_aggregate,
    SessionAggregate.kind: _parse_session_aggregate,
    StreamJoin.kind: _parse_stream_join,
    StatefulProcess.kind: _parse_stateful_process,
    RunningAggregate.kind: _parse_running_aggregate,
    ApplyChanges.kind: _parse_apply_changes,
}
TRANSFORM_KINDS = tuple(TRANSFORM_PARSERS)
RIGHT_INPUT_KINDS = (StreamJoin.kind,)  # kinds with a second input, `transform.right`, parsed like the source


def parse_transform(ctx: LoadContext, where: str, raw: dict, source: SourceSpec,
                    right: SourceSpec | None = None) -> Parsed:
    """The transform's spec (None when it has problems) and its output schema ({} when unknowable)."""
    kind = raw.get("kind")
    parser = TRANSFORM_PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        ctx.problem(where, f"transform.kind: unknown kind {kind!r} (known: {', '.join(TRANSFORM_KINDS)})")
        return None, {}
    start = len(ctx.problems)
    spec, output = parser(ctx, where, raw, source, right)
    return (spec if len(ctx.problems) == start else None), output

