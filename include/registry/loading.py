"""Loading and validating `jobs.yaml` into typed specs (:mod:`include.registry.specs`).

Validation collects every problem and raises one :class:`RegistryError` whose lines each name the
job (or source) and the field that is wrong. Jobs are validated in dependency order, so that a job
reading a table knows the table's schema and event time from its writer. The sections of a job are
parsed by :mod:`.sources`, :mod:`.transforms`, :mod:`.sinks` and :mod:`.operations`, sharing one
:class:`~include.registry.context.LoadContext`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from include.registry.cdc import ApplyChanges
from include.registry.columns import QUARANTINE_SCHEMA
from include.registry.context import LoadContext
from include.registry.graph import declared_tables, dependency_order
from include.registry.operations import (
    parse_quality,
    parse_resources,
    parse_state_store,
    parse_supervision,
    parse_triggers,
)
from include.registry.processors import PROCESSORS
from include.registry.sinks import parse_sink
from include.registry.sources import parse_source, parse_sources
from include.registry.specs import JobSpec, Registry, ResourcesSpec, StatefulProcess, StreamJoin
from include.registry.transforms import RIGHT_INPUT_KINDS, parse_transform
from include.registry.vocabulary import CATALOG_TABLE_NAME, IDENTIFIER, TABLE_FIELDS

# libyaml's safe loader where PyYAML was built with it (PyPI's wheels are): ~9x faster than the pure-Python one (20 ms a
# parse of include/jobs.yaml), and every command, job start and DAG parse loads the registry.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_JOB_FIELDS = ("description", "source", "transform", "sink", "triggers", "state_store", "live", "supervision",
               "quality", "reset_allowed", "group", "resources")


class RegistryError(ValueError):
    """The registry is invalid; ``problems`` lists every finding."""

    def __init__(self, problems: list[str], path: Path | None = None):
        self.problems = problems
        where = f" in {path}" if path else ""
        super().__init__(f"invalid job registry{where}:\n  - " + "\n  - ".join(problems))


def load_registry(path: Path) -> Registry:
    """Load and validate the registry at `path`."""
    try:
        raw = yaml.load(Path(path).read_text(), Loader=_SAFE_LOADER)
    except FileNotFoundError as exc:
        raise RegistryError([f"registry file not found: {path}"]) from exc
    except yaml.YAMLError as exc:
        raise RegistryError([f"not valid YAML: {exc}"], path) from exc
    return build_registry(raw, path)


def tables_as_paths(jobs: Any) -> Any:
    """The jobs with every table named `database.table` (its name in the catalog: `sink.table: gold.activity_5m`)
    written as the path it names (`gold/activity_5m`), so that one table has one spelling from here on; a copy."""
    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (CATALOG_TABLE_NAME.sub(r"\1/\2", v) if k in TABLE_FIELDS and isinstance(v, str) else convert(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [convert(v) for v in node]
        return node

    return convert(jobs)


def build_registry(raw: Any, path: Path | None = None) -> Registry:
    """Validate a parsed registry document."""
    ctx = LoadContext()
    if not isinstance(raw, dict):
        raise RegistryError(["the registry must be a mapping with 'sources' and 'jobs'"], path)
    unknown_top = set(raw) - {"defaults", "sources", "jobs", "groups"}
    if unknown_top:
        ctx.problems.append(f"unknown top-level keys: {sorted(unknown_top)}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        ctx.problems.append("defaults: must be a mapping")
        defaults = {}
    ctx.defaults = defaults
    ctx.unknown_fields("defaults", defaults, ("triggers", "state_store", "supervision", "backfill", "group",
                                              "resources"))
    if not isinstance(defaults.get("backfill") or {}, dict):
        ctx.problem("defaults.backfill", "must be a mapping of max_files_per_trigger / max_bytes_per_trigger")
    ctx.sources = parse_sources(ctx, raw.get("sources") or {})
    raw_jobs = tables_as_paths(raw.get("jobs") or {})
    if not isinstance(raw_jobs, dict) or not raw_jobs:
        ctx.problems.append("'jobs' must be a non-empty mapping of job id to job")
        raise RegistryError(ctx.problems, path)

    all_writers = _writers(ctx, raw_jobs)
    order = dependency_order(raw_jobs, all_writers, ctx.problems)
    ctx.writer_sinks = {t: raw_jobs[j]["sink"] for t, j in ctx.writers.items()
                        if declared_tables(raw_jobs[j])[0] == t}
    jobs: dict[str, JobSpec] = {}
    for job_id in order:
        spec, output_schema = _parse_job(ctx, job_id, raw_jobs[job_id])
        if spec is not None:
            jobs[job_id] = spec
        # An invalid job's output schema still lets its downstream jobs be checked.
        table = declared_tables(raw_jobs[job_id])
        if output_schema and table and table[0] not in ctx.table_schemas:
            ctx.table_schemas[table[0]] = output_schema
        if spec is not None and spec.sink.quarantine_table:
            ctx.table_schemas[spec.sink.quarantine_table] = dict(QUARANTINE_SCHEMA)
        if spec is not None and isinstance(spec.transform, ApplyChanges) and spec.transform.scd == 1:
            ctx.table_schemas[spec.transform.deletes_table(spec.sink.table)] = spec.transform.deletes_schema(
                spec.output_schema)
        if spec is not None and spec.renamed_columns:
            ctx.table_renames[spec.sink.table] = spec.renamed_columns
        if spec is not None and _output_event_time(spec):
            ctx.event_times[spec.sink.table] = _output_event_time(spec)
    for group in sorted({j.group for j in jobs.values() if j.group} & set(raw_jobs)):
        ctx.problems.append(f"group {group!r}: a job has that id; name the group otherwise (groups and jobs are "
                            "supervised by name)")
    group_resources = _parse_groups(ctx, raw.get("groups"), {j.group for j in jobs.values() if j.group})
    registry = Registry(jobs=jobs, order=tuple(order), table_schemas=ctx.table_schemas,
                        group_resources=group_resources, default_resources=parse_resources(ctx, "defaults", None))
    for job in jobs.values():
        for name, trigger in job.triggers.items():
            if trigger.on_upstream_commit and (problem := registry.upstream_commit_problem(job.id)):
                ctx.problem(f"job {job.id!r}", f"triggers.{name}: {problem}")
    if ctx.problems:
        raise RegistryError(ctx.problems, path)
    return registry


def _parse_groups(ctx: LoadContext, raw: Any, used: set[str]) -> dict[str, ResourcesSpec]:
    """The `groups:` section (each group's `resources`), and every group its jobs name. A group no job joins is
    kept (a registry cut down to some jobs stays valid) and runs nothing."""
    raw = raw if raw is not None else {}
    if not isinstance(raw, dict):
        ctx.problems.append("groups: must be a mapping of group name to {resources: ...}")
        raw = {}
    resources = {}
    for name in sorted(used | set(raw)):
        where = f"group {name!r}"
        spec = raw.get(name) if raw.get(name) is not None else {}
        if not isinstance(spec, dict):
            ctx.problem(where, "must be a mapping with `resources`")
            spec = {}
        ctx.unknown_fields(where, spec, ("resources",))
        resources[name] = parse_resources(ctx, where, spec.get("resources"))
    return resources


def _writers(ctx: LoadContext, raw_jobs: dict) -> dict[str, list[str]]:
    """Every writer of each table (several only for alert processors sharing one); the first into `ctx.writers`."""
    all_writers: dict[str, list[str]] = {}
    for job_id, job in raw_jobs.items():
        for table in declared_tables(job):
            if table in ctx.writers:
                shared = _shared_alert_table(table, [raw_jobs[w] for w in all_writers[table]], job)
                taken = f"sink table {table!r} is already written by job {ctx.writers[table]!r}"
                if shared is None:
                    ctx.problem(f"job {job_id!r}", taken)
                elif shared:
                    ctx.problem(f"job {job_id!r}", f"{taken}: {shared}")
                all_writers[table].append(job_id)
            else:
                ctx.writers[table] = job_id
                all_writers[table] = [job_id]
    return all_writers


def _shared_alert_table(table: str, writers: list[Any], job: Any) -> str | None:
    """Whether `job` may also write `table`: None when not (only alert processors share a table), '' when it
    may, else why not. Alert processors (stateful_process, alert_types in the catalogue) may share their append
    sink when their alert types differ (a full refresh of one removes its types' rows) and the sinks agree."""
    def alert_types(raw: Any) -> set[str] | None:
        transform = raw.get("transform") if isinstance(raw, dict) else None
        if not isinstance(transform, dict) or transform.get("kind") != StatefulProcess.kind:
            return None
        name = transform.get("processor")
        info = PROCESSORS.get(name) if isinstance(name, str) else None
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


def _parse_job(ctx: LoadContext, job_id: str, job: Any) -> tuple[JobSpec | None, dict[str, str] | None]:
    """The job's spec (None when invalid) and its output schema (None when unknowable)."""
    where = f"job {job_id!r}"
    if not IDENTIFIER.match(str(job_id)):
        ctx.problem(where, "id must be lowercase letters, digits and underscores")
    if not isinstance(job, dict):
        ctx.problem(where, "must be a mapping")
        return None, None
    ctx.unknown_fields(where, job, _JOB_FIELDS)
    before = len(ctx.problems)
    source = parse_source(ctx, where, job.get("source"))
    transform = job.get("transform") if isinstance(job.get("transform"), dict) else None
    if transform is None:
        ctx.problem(where, "transform: must be a mapping with a 'kind'")
    right = None
    if transform is not None and transform.get("kind") in RIGHT_INPUT_KINDS:
        right = parse_source(ctx, where, transform.get("right"), field="transform.right")
        if right is None:
            return None, None
    if source is None or transform is None:
        return None, None
    transform_spec, output_schema = parse_transform(ctx, where, transform, source, right)
    sink = parse_sink(ctx, where, job.get("sink"), transform, output_schema)
    triggers = parse_triggers(ctx, where, job.get("triggers"))
    state_store = parse_state_store(ctx, where, job.get("state_store"), transform.get("kind"))
    supervision = parse_supervision(ctx, where, job.get("supervision"))
    quality = parse_quality(ctx, where, job.get("quality"), transform)
    group = _parse_group(ctx, where, job.get("group", ctx.defaults.get("group")))
    if group and job.get("resources") is not None:
        ctx.problem(where, f"resources: its group {group!r} runs in one driver: set them under groups.{group}.resources")
    resources = parse_resources(ctx, where, None if group else job.get("resources"))
    if len(ctx.problems) > before or transform_spec is None or sink is None or state_store is None:
        return None, output_schema
    spec = JobSpec(
        id=job_id,
        description=str(job.get("description", "")).strip(),
        source=source,
        transform=transform_spec,
        sink=sink,
        triggers=triggers,
        state_store=state_store,
        output_schema=output_schema,
        live=bool(job.get("live", True)),
        # Checked last, as before: only a job otherwise valid reports a bad reset_allowed.
        reset_allowed=ctx.flag(f"{where}: reset_allowed", job.get("reset_allowed", True), True),
        supervision=supervision,
        quality=quality,
        group=group,
        resources=resources,
    )
    return spec, output_schema


def _parse_group(ctx: LoadContext, where: str, group: Any) -> str | None:
    """The job's group (several live jobs in one driver), from the job or `defaults.group`; None: it runs alone."""
    if group is None:
        return None
    if not isinstance(group, str) or not IDENTIFIER.match(group):
        ctx.problem(where, f"group: must be a name of lowercase letters, digits and underscores, got {group!r}")
        return None
    return group


def _output_event_time(job: JobSpec) -> str | None:
    """The event-time column the job's sink table carries on (inherited by the jobs reading it): the source's,
    under its output name (a join's left event time), when the output keeps it."""
    column = job.source.event_time
    if isinstance(job.transform, StreamJoin):
        column = job.transform.output_of("left").get(column)
    return column if column and job.output_schema.get(column) == "timestamp" else None
