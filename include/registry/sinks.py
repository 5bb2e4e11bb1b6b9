"""A job's `sink:` section: the table, how it is written (append or upsert), its Delta properties and upkeep."""

from __future__ import annotations

from typing import Any

from include.registry.cdc import SEQUENCE
from include.registry.context import LoadContext
from include.registry.durations import parse_duration
from include.registry.specs import MaintenanceSpec, RunningAggregate, SinkSpec
from include.registry.vocabulary import (
    AUTO_COMPACT,
    BOOLEAN_PROPERTIES,
    FILE_RETENTION,
    LOG_RETENTION,
    SINK_MODES,
    TABLE_NAME,
    TABLE_PROPERTIES,
    UPDATE_KINDS,
)

_FIELDS = ("table", "mode", "merge_keys", "partition_by", "quarantine_table", "properties", "files_per_batch",
           "maintenance")


def parse_sink(ctx: LoadContext, where: str, raw: Any, transform: dict,
               output_schema: dict[str, str]) -> SinkSpec | None:
    """The sink of a job whose raw transform is `transform` and whose output is `output_schema`."""
    if not isinstance(raw, dict):
        ctx.problem(where, "sink: must be a mapping with 'table' and 'mode'")
        return None
    ctx.unknown_fields(f"{where}: sink", raw, _FIELDS)
    table, mode = raw.get("table"), raw.get("mode", "append")
    for field_name in ("table", "quarantine_table"):
        value = raw.get(field_name)
        if (field_name == "table" or value is not None) and not (isinstance(value, str) and TABLE_NAME.match(value)):
            ctx.problem(where, f"sink.{field_name}: {value!r} must look like 'layer/name' (or its name, 'layer.name')")
    if mode not in SINK_MODES:
        ctx.problem(where, f"sink.mode: unknown mode {mode!r} (known: {', '.join(SINK_MODES)})")
    merge_keys = list(raw.get("merge_keys") or [])
    partition_by = list(raw.get("partition_by") or [])
    for field_name, columns in (("merge_keys", merge_keys), ("partition_by", partition_by)):
        for column in columns:
            if column not in output_schema:
                ctx.problem(where, f"sink.{field_name}: unknown column {column!r}")
    kind = transform.get("kind")
    if kind == RunningAggregate.kind:
        if mode != "update":
            ctx.problem(where, "sink.mode: a running_aggregate upserts its totals: mode update")
        keys = [k.get("name") if isinstance(k, dict) else k for k in transform.get("keys") or []]
        merge_keys = merge_keys or keys  # one row per key
        if sorted(map(str, merge_keys)) != sorted(map(str, keys)):
            ctx.problem(where, f"sink.merge_keys: a running_aggregate has one row per key: its keys {keys}")
    if kind == "apply_changes":
        merge_keys = _apply_changes_keys(ctx, where, transform, mode, merge_keys)
    if mode == "update" and not merge_keys:
        ctx.problem(where, "sink.merge_keys: update mode upserts and needs merge keys")
    if mode == "update" and kind not in UPDATE_KINDS:
        ctx.problem(where, f"sink.mode: update mode needs a {' or '.join(UPDATE_KINDS)} transform")
    quarantine = raw.get("quarantine_table")
    if kind == "parse_json" and not quarantine:
        ctx.problem(where, "sink.quarantine_table: parse_json needs a table for unparseable lines")
    properties = _properties(ctx, where, raw.get("properties"), mode)
    files = ctx.positive_int(f"{where}: sink.files_per_batch", raw.get("files_per_batch", 1)) or 1
    maintenance = _maintenance(ctx, where, raw.get("maintenance"))
    if mode == "update" and maintenance.optimize:
        # `lakehouse maintain` cannot compact an upserted table while its writer runs (the two conflict): a live
        # writer compacts its own small files as it commits (Delta: at 50 small files, only what it changed)
        properties.setdefault(AUTO_COMPACT, "true")
    # Versions older than the VACUUM retention cannot be read (their files are gone): their commits are kept no longer
    # (Delta's default is 30 days: a live table at 30 s triggers holds up to 86,400 commits)
    retention = properties.setdefault(FILE_RETENTION, f"interval {maintenance.vacuum_retention_hours} hours")
    properties.setdefault(LOG_RETENTION, retention)
    return SinkSpec(str(table), str(mode), tuple(str(k) for k in merge_keys), tuple(partition_by), quarantine,
                    properties, files, maintenance)


def _apply_changes_keys(ctx: LoadContext, where: str, transform: dict, mode: str, merge_keys: list) -> list:
    """An apply_changes sink upserts by the change's keys (type 2: and the version's first change)."""
    if mode != "update":
        ctx.problem(where, "sink.mode: apply_changes upserts its table: mode update")
    keys = [str(k) for k in transform.get("keys") or []]
    wanted = keys + ([SEQUENCE] if transform.get("scd") == 2 else [])
    if merge_keys and sorted(map(str, merge_keys)) != sorted(wanted):
        ctx.problem(where, f"sink.merge_keys: an apply_changes table is upserted by {wanted}: leave merge_keys out")
    return wanted


def _properties(ctx: LoadContext, where: str, raw: Any, mode: str) -> dict[str, str]:
    """Delta table properties of the sink (and its quarantine table), as the strings Delta stores."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        ctx.problem(where, "sink.properties: must map Delta table properties to values")
        return {}
    properties = {}
    for key, value in raw.items():
        if key not in TABLE_PROPERTIES:
            ctx.problem(where, f"sink.properties.{key}: not a supported table property "
                        f"(supported: {', '.join(TABLE_PROPERTIES)})")
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key in BOOLEAN_PROPERTIES and text not in ("true", "false"):
            ctx.problem(where, f"sink.properties.{key}: must be true or false, got {value!r}")
        properties[str(key)] = text
    if mode == "update" and properties.get("delta.appendOnly") == "true":
        ctx.problem(where, "sink.properties.delta.appendOnly: an update-mode (MERGE) sink cannot be append-only")
    return properties


def _maintenance(ctx: LoadContext, where: str, raw: Any) -> MaintenanceSpec:
    """`sink.maintenance`: what `lakehouse maintain` does to the table (compaction, VACUUM retention)."""
    if raw is None:
        return MaintenanceSpec()
    if not isinstance(raw, dict):
        ctx.problem(where, "sink.maintenance: must be a mapping with 'optimize' and/or 'vacuum_retention'")
        return MaintenanceSpec()
    ctx.unknown_fields(f"{where}: sink.maintenance", raw, ("optimize", "vacuum_retention"))
    optimize = ctx.flag(f"{where}: sink.maintenance.optimize", raw.get("optimize", True), True)
    retention = MaintenanceSpec.vacuum_retention_hours
    if raw.get("vacuum_retention") is not None:
        try:
            seconds = parse_duration(raw["vacuum_retention"])
            if seconds % 3600:
                raise ValueError("must be whole hours")
            retention = seconds // 3600
        except ValueError as exc:
            ctx.problem(where, f"sink.maintenance.vacuum_retention: {exc}")
    return MaintenanceSpec(optimize=optimize, vacuum_retention_hours=retention)
