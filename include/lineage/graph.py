"""Lineage from the registry: what each job reads and writes, and where each column of what it writes comes from.

A dataset is a table as the registry names it (`silver/clickstream`), a landing directory (`landing/clickstream`) or
a Kafka topic (`kafka:payments`); the JSON gives each table's catalog name too (`silver.clickstream`). A column's sources follow from the job's transform: a parsed line's fields and a
deduplicated row's columns are themselves (`identity`); a window's bounds come from the event time and its
aggregates from the columns (or the columns an expression names) they aggregate (`aggregation`); a join's columns
from the side that carries them (`identity`, the matched flag from the right side's keys: `join`); an SCD table's
columns from the changes (`identity`, its validity from their order: `scd`); a stateful processor's outputs from its
keys and events (`processor`). Technical columns the product adds (`_ingested_at`, ...) have none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from include.catalog_client.tables import catalog_name
from include.registry import Registry
from include.registry.cdc import ApplyChanges
from include.registry.specs import (
    AGGREGATE_KINDS,
    Aggregation,
    Deduplicate,
    JobSpec,
    ParseJson,
    RunningAggregate,
    SourceSpec,
    StatefulProcess,
    StreamJoin,
)

WINDOW_BOUNDS = ("window_start", "window_end", "session_start", "session_end")
SCD_VALIDITY = ("__start_at", "__end_at", "__is_current")
ROWS = "*"  # the column of a count of rows: the dataset's rows themselves


@dataclass(frozen=True)
class ColumnSource:
    dataset: str
    column: str


@dataclass(frozen=True)
class ColumnLineage:
    sources: tuple[ColumnSource, ...]
    transformation: str  # identity | aggregation | window | join | scd | processor


@dataclass(frozen=True)
class JobLineage:
    """One job: the datasets it reads, the tables it writes, and per written table its columns' sources."""

    job: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    columns: dict[str, dict[str, ColumnLineage]] = field(default_factory=dict)


def dataset_of(source: SourceSpec) -> str:
    """The dataset a source reads: its table, landing directory or Kafka topic(s)."""
    if source.kind == "kafka" and source.kafka is not None:
        return "kafka:" + ",".join(source.kafka.topics)
    return source.name if source.kind == "delta" else source.path


def _columns_of(registry: Registry, source: SourceSpec) -> dict[str, str]:
    return registry.table_schemas.get(source.name, {}) if source.kind == "delta" else source.schema


def _named(sql: str, columns: dict[str, str]) -> list[str]:
    """The input columns a SQL expression names."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql))
    return [c for c in columns if c in words]


def _aggregated(registry: Registry, job: JobSpec, column: str) -> ColumnLineage | None:
    transform, source = job.transform, job.source
    dataset, columns = dataset_of(source), _columns_of(registry, source)
    if column in WINDOW_BOUNDS and source.event_time:
        return ColumnLineage((ColumnSource(dataset, source.event_time),), "window")
    expressions = transform.key_expressions
    if column in transform.keys:
        named = _named(expressions[column][0], columns) if column in expressions else [column]
        return ColumnLineage(tuple(ColumnSource(dataset, c) for c in named if c in columns), "identity")
    aggregation: Aggregation | None = next((a for a in transform.aggregations if a.name == column), None)
    if aggregation is None:
        return None
    if not aggregation.column and not aggregation.expr:  # a count of rows
        return ColumnLineage((ColumnSource(dataset, ROWS),), "aggregation")
    named = [aggregation.column] if aggregation.column else _named(aggregation.expr[0], columns)
    return ColumnLineage(tuple(ColumnSource(dataset, c) for c in named if c in columns), "aggregation")


def _joined(registry: Registry, job: JobSpec, column: str) -> ColumnLineage | None:
    transform: StreamJoin = job.transform
    sides = {"left": job.source, "right": transform.right}
    picked = next((c for c in transform.columns if c.name == column), None)
    if picked is not None:
        return ColumnLineage((ColumnSource(dataset_of(sides[picked.side]), picked.column),), "identity")
    if column == transform.matched_column:
        right = dataset_of(transform.right)
        return ColumnLineage(tuple(ColumnSource(right, r) for _, r in transform.join_keys), "join")
    return None


def column_lineage(registry: Registry, job: JobSpec, column: str) -> ColumnLineage | None:
    """Where the job's sink column `column` comes from (None: a column the product adds, or one it derives from
    nothing it reads)."""
    transform, source = job.transform, job.source
    dataset, columns = dataset_of(source), _columns_of(registry, source)
    if isinstance(transform, AGGREGATE_KINDS + (RunningAggregate,)):
        return _aggregated(registry, job, column)
    if isinstance(transform, StreamJoin):
        return _joined(registry, job, column)
    if isinstance(transform, ApplyChanges) and column in SCD_VALIDITY:
        return ColumnLineage((ColumnSource(dataset, transform.sequence_by),), "scd")
    if isinstance(transform, StatefulProcess) and column not in columns:
        used = [*transform.keys, *([source.event_time] if source.event_time else [])]
        return ColumnLineage(tuple(ColumnSource(dataset, c) for c in dict.fromkeys(used)), "processor")
    if isinstance(transform, ParseJson | Deduplicate | ApplyChanges | StatefulProcess) and column in columns:
        return ColumnLineage((ColumnSource(dataset, column),), "identity")
    return None


def job_lineage(registry: Registry, job_id: str) -> JobLineage:
    """What the job reads and writes, with its sink's columns' sources (its quarantine table holds the raw lines it
    could not parse; a deleted-keys table the keys: both from its source)."""
    job = registry.job(job_id)
    columns: dict[str, dict[str, ColumnLineage]] = {}
    sink = {name: found for name in job.output_schema if (found := column_lineage(registry, job, name)) is not None}
    columns[job.sink.table] = sink
    if isinstance(job.transform, ApplyChanges) and job.transform.deletes_table(job.sink.table):
        columns[job.transform.deletes_table(job.sink.table)] = {k: sink[k] for k in job.transform.keys if k in sink}
    return JobLineage(job_id, tuple(dict.fromkeys(dataset_of(s) for s in job.sources)), tuple(job.tables_written()),
                      columns)


def lineages(registry: Registry) -> dict[str, JobLineage]:
    """Every job's lineage, in registry order."""
    return {job_id: job_lineage(registry, job_id) for job_id in registry.order}


def _edges(registry: Registry) -> list[tuple[str, str, str]]:
    """(input dataset, job, output table) of every job."""
    return [(dataset, job.job, output) for job in lineages(registry).values()
            for dataset in job.inputs for output in job.outputs]


def _reach(edges: list[tuple[str, str, str]], start: str, upstream: bool) -> list[dict[str, str]]:
    """The edges leading into `start` (upstream) or out of it (downstream), transitively, nearest first."""
    found, seen, todo = [], {start}, [start]
    while todo:
        current = todo.pop(0)
        for source, job, output in edges:
            near, far = (output, source) if upstream else (source, output)
            if near != current:
                continue
            found.append({"from": source, "job": job, "to": output})
            if far not in seen:
                seen.add(far)
                todo.append(far)
    return found


def table_lineage(registry: Registry, table: str) -> dict:
    """`lakehouse lineage <table> --json`: the jobs writing the table, every edge upstream and downstream (`from`,
    `job`, `to`), and each column's sources (dataset, column, transformation). ValueError naming the registry's tables
    when it has no such table."""
    if table not in registry.table_schemas:
        raise ValueError(f"no table {table!r} in the registry; its tables: {', '.join(registry.tables_written())}")
    edges = _edges(registry)
    columns: dict[str, list[dict[str, str]]] = {name: [] for name in registry.table_schemas[table]}
    for job in registry.writers_of(table):
        for name, found in job_lineage(registry, job.id).columns.get(table, {}).items():
            columns.setdefault(name, []).extend(
                {"dataset": s.dataset, "column": s.column, "transformation": found.transformation, "job": job.id}
                for s in found.sources)
    upstream, downstream = _reach(edges, table, upstream=True), _reach(edges, table, upstream=False)
    tables = {d for e in upstream + downstream for d in (e["from"], e["to"]) if d in registry.table_schemas} | {table}
    return {"table": table, "catalog_name": catalog_name(table), "written_by": [j.id for j in registry.writers_of(table)],
            "upstream": upstream, "downstream": downstream, "columns": columns,
            "catalog_names": {t: catalog_name(t) for t in sorted(tables)}}


def render(lineage: dict) -> str:
    """The text of `lakehouse lineage <table>`."""
    lines = [f"{lineage['table']} ({lineage['catalog_name']} in the catalog): written by "
             f"{', '.join(lineage['written_by']) or 'no job'}", "upstream:"]
    lines += [f"  {e['from']} -> {e['job']} -> {e['to']}" for e in lineage["upstream"]] or ["  none"]
    lines.append("downstream:")
    lines += [f"  {e['from']} -> {e['job']} -> {e['to']}" for e in lineage["downstream"]] or ["  none"]
    lines.append("columns:")
    width = max((len(c) for c in lineage["columns"]), default=0)
    for name, sources in lineage["columns"].items():
        said = "; ".join(f"{s['dataset']}.{s['column']} ({s['transformation']})" for s in sources)
        lines.append(f"  {name:<{width}}  {said or '-'}")
    return "\n".join(lines)
