"""Table-level metrics of a gold table: duplicates, freshness, reconciliation with its source.

They need the whole table (a new row can duplicate an old one; reconciliation and freshness compare
all finalized rows with the source), so they are computed on every run from the latest version,
with Arrow/pandas over the projected columns, whatever engine the row checks use. The result is one
row of metrics (what the Great Expectations table suite asserts on) plus the observed details.

- Duplicates: rows beyond one per the spec's unique key (windows and sessions: start, end, keys;
  joins: left key, right key).
- Freshness: how long before the latest source event (joins: of the left source, filtered by the
  join's ``where``, evaluated by include/storage/reader.py) the table stopped being up to date:
  windows and joins, its latest window end / left event time; sessions, which stay open as long as
  their key is active (an always-active user has no finalized session at all), the end of the
  earliest source session (sessionized as for reconciliation) that closed after the table's latest
  session_end and that the table lacks -- none: the table is up to date.
- Stateful processors' tables (alerts, session summaries): freshness is the gold job's watermark (each row is
  final when emitted and alerts are rare: the table is complete up to it); ``overlapping_alerts`` counts
  alerts that start at or before the previous alert of their entity and type, ``overlapping_sessions``
  sessions of a key that start within the gap of the previous one's end.
- SCD tables (``apply_changes``, :mod:`include.quality.scd_metrics`): freshness is the latest change the table holds
  or its job has read (the latest bronze ``_cdc_commit_time`` among the bronze versions its last committed batch had
  read: a change that alters no row, a snapshot's row restating what the table holds); a type 2 table's
  ``keys_with_several_current_versions`` and ``overlapping_versions``.
- Reconciliation (windows and sessions, see :mod:`include.quality.reconciliation`): finalized rows are
  those ending at or before the gold job's watermark, read from its checkpoint (the offset log entry
  of its latest committed batch). Without a checkpoint (tables written by other means), the
  watermark is taken as the latest source event minus the job's watermark delay, i.e. as if the job
  had caught up.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from include import checkpoints
from include.quality import scd_metrics
from include.quality.reconciliation import (
    SourceEvents,
    match_sessions,
    read_source_events,
    reconcile_sessions,
    reconcile_windows,
)
from include.quality.suites import (
    AggregateTable,
    AlertTable,
    HistoryTable,
    JoinTable,
    ProcessorTable,
    RunningTable,
    ScdTable,
    SessionTable,
    TableSpec,
)
from include.quality.timestamps import MICROS, iso, micros
from include.settings import Settings
from include.storage import delta as delta_store
from include.storage import reader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableMetrics:
    metrics: dict[str, int]  # one row: metric column -> value (what the table suite asserts on)
    details: dict[str, dict[str, Any]]  # per check name, the observed details behind it
    rows: int  # rows in the table version


@dataclass(frozen=True)
class SourceSpan:
    """Earliest and latest source event time (epoch µs; None: no events) and what they were read from."""

    earliest: int | None
    latest: int | None
    described: str


def gold_watermark(settings: Settings, spec: TableSpec, latest_source_event: int | None) -> tuple[int | None, str]:
    """The gold job's watermark (epoch µs) and where it came from."""
    committed = checkpoints.committed_watermark_ms(settings.layout.checkpoint(spec.job_id))
    if committed is not None:
        return committed * 1000, "checkpoint"
    if latest_source_event is None:
        return None, "none (no checkpoint, no source events)"
    return (latest_source_event - spec.watermark_seconds * MICROS,
            "latest source event - watermark delay (no checkpoint)")


def source_span(settings: Settings, spec: TableSpec) -> SourceSpan:
    """The event-time span of the job's (left) source rows; a join's, those that pass its ``where`` filter."""
    path = settings.layout.table(spec.source_table)
    where = spec.where if isinstance(spec, JoinTable) else None
    described = f"{spec.source_table}" + (f" where {where}" if where else "")
    if not delta_store.table_exists(path) or spec.event_time is None:  # no event time: nothing to be fresh about
        return SourceSpan(None, None, described)
    return SourceSpan(*event_time_bounds(path, spec.event_time, where), described)


def event_time_bounds(path, event_time: str, where: str | None = None,
                       version: int | None = None) -> tuple[int | None, int | None]:
    """The earliest and latest `event_time` (epoch µs; None: no rows) of the table's rows (at `version`) that pass the
    SQL filter `where`."""
    column = '"' + event_time.replace('"', '""') + '"'
    query = f"SELECT min({column}) AS earliest, max({column}) AS latest FROM t"
    query += f" WHERE {where}" if where else ""
    bounds = reader.query(path, query, version=version)
    earliest, latest = (micros(bounds[c]).to_pylist()[0] for c in ("earliest", "latest"))
    return earliest, latest


def _lag_seconds(latest_source_event: int | None, reference: int | None) -> int:
    """How many whole seconds `reference` trails the latest source event (none: nothing to be fresh about)."""
    return 0 if latest_source_event is None else max(0, (latest_source_event - reference) // MICROS)


def table_metrics(settings: Settings, spec: TableSpec, version: int, validated_before: int | None = None) -> TableMetrics:
    """The metrics row and observed details of the table checks of `spec`'s table at `version`
    (`validated_before`: the version the previous quality run validated, which running totals are compared with)."""
    if isinstance(spec, ScdTable):
        return scd_table_metrics(settings, spec, version)
    counts = spec.counts[:1] if isinstance(spec, AggregateTable) and spec.reconciled else ()
    columns = list(dict.fromkeys([*spec.unique_key, spec.freshness_column, *counts]))
    gold = delta_store.read_table(settings.layout.table(spec.table), version=version, columns=columns)
    distinct = gold.group_by(list(spec.unique_key)).aggregate([]).num_rows if gold.num_rows else 0
    duplicates = gold.num_rows - distinct

    source: SourceEvents | None = None
    watermark, watermark_source = None, ""
    if isinstance(spec, AggregateTable):
        source = read_source_events(settings.layout.table(spec.source_table), spec.event_time, spec.source_keys)
        span = SourceSpan(source.earliest, source.latest, spec.source_table)
        watermark, watermark_source = gold_watermark(settings, spec, source.latest)
    else:
        span = source_span(settings, spec)
        if isinstance(spec, ProcessorTable):
            watermark, watermark_source = gold_watermark(settings, spec, span.latest)
    # sessionizing the source per key needs the key columns (not SQL expressions over them)
    sessions = match_sessions(gold, spec, source) if isinstance(spec, SessionTable) and spec.source_keys else None

    timeless = isinstance(spec, RunningTable) and not spec.latest_event  # no time column: no freshness check
    ends = micros(gold[spec.freshness_column]).drop_null() if not timeless else pa.array([], pa.int64())
    if spec.mode == "update" and not isinstance(spec, RunningTable):  # rows past the watermark may still change
        ends = ends.filter(pc.less_equal(ends, watermark)) if watermark is not None else ends.slice(0, 0)
    latest_end = pc.max(ends).as_py() if len(ends) else None
    finalized = "finalized_" if isinstance(spec, AggregateTable) else ""
    freshness: dict[str, Any] = {f"latest_{finalized}{spec.freshness_column}": iso(latest_end)}
    # the table is up to date until `reference`: its latest end, or for sessions (which stay open while
    # their key is active) the end of the earliest session closed since then that it lacks
    if sessions is not None:
        missing = None if span.latest is None else sessions.earliest_missing_end(latest_end, closed_by=span.latest)
        freshness["earliest_missing_session_end"] = iso(missing)
        reference = missing if missing is not None else span.latest
    elif isinstance(spec, ProcessorTable):  # rows are final when emitted: the table is complete up to the watermark
        freshness.update(watermark=iso(watermark), watermark_source=watermark_source)
        reference = watermark if watermark is not None else span.earliest
    else:
        reference = latest_end if latest_end is not None else span.earliest
    lag = _lag_seconds(span.latest, reference)

    metrics = {spec.duplicates_metric: duplicates, "freshness_lag_seconds": lag}
    details: dict[str, dict[str, Any]] = {
        spec.unique_check: {spec.duplicates_metric: duplicates, "rows": gold.num_rows, f"distinct_{spec.noun}s": distinct},
        "freshness": {"freshness_lag_seconds": lag, "allowed_lag_seconds": spec.freshness_lag_seconds, **freshness,
                      f"latest_{spec.event_time}": iso(span.latest), "source": span.described},
    }
    if isinstance(spec, AlertTable) and (len(spec.writers) > 1 or spec.writers[0].within_seconds is None):
        # fresh as its most lagging writer; processing-time alerts: as what the job has read
        lag, details["freshness"] = writers_freshness(settings, spec, latest_end)
        metrics["freshness_lag_seconds"] = lag
    if isinstance(spec, RunningTable) and spec.counts:
        decreased = decreased_totals(settings, spec, version, validated_before)
        metrics["decreased_totals"] = decreased["decreased_totals"]
        details["totals_never_decrease"] = decreased
    if isinstance(spec, ProcessorTable):
        found = overlapping(settings, spec, version)
        metrics[spec.overlap_metric] = found[spec.overlap_metric]
        details[spec.overlap_check] = found
    if isinstance(spec, AggregateTable) and counts:
        if watermark is None:
            reconciled = {spec.unreconciled_metric: 0, f"finalized_{spec.noun}s": 0}
        elif sessions is not None:
            reconciled = reconcile_sessions(sessions, spec, source, watermark)
        else:
            reconciled = reconcile_windows(gold, spec, source, watermark)
        metrics[spec.unreconciled_metric] = reconciled[spec.unreconciled_metric]
        details["reconciliation"] = {**reconciled, "watermark": iso(watermark), "watermark_source": watermark_source}
    return TableMetrics(metrics, details, gold.num_rows)


def scd_table_metrics(settings: Settings, spec: ScdTable, version: int) -> TableMetrics:
    """The metrics of an SCD table at `version`: duplicates, freshness, and a type 2 table's versions per key (among
    distinct versions: a repeated one is the uniqueness check's finding)."""
    columns = list(dict.fromkeys([*spec.unique_key, *spec.held_times]))
    rows = delta_store.read_table(settings.layout.table(spec.table), version=version, columns=columns)
    versions = rows.to_pandas().drop_duplicates(list(spec.unique_key))
    duplicates = rows.num_rows - len(versions)
    span = source_span(settings, spec)
    held = scd_metrics.latest_held(settings, spec, rows)
    read, read_position = consumed_until(settings, spec)
    known = [t for t in (held, read) if t is not None]
    lag = _lag_seconds(span.latest, max(known) if known else span.earliest)
    metrics = {spec.duplicates_metric: duplicates, "freshness_lag_seconds": lag}
    details: dict[str, dict[str, Any]] = {
        spec.unique_check: {spec.duplicates_metric: duplicates, "rows": rows.num_rows,
                            f"distinct_{spec.noun}s": len(versions)},
        "freshness": {"freshness_lag_seconds": lag, "allowed_lag_seconds": spec.freshness_lag_seconds,
                      "latest_change_held": iso(held), "read_until": iso(read), "read_position": read_position,
                      f"latest_{spec.event_time}": iso(span.latest), "source": span.described}}
    if isinstance(spec, HistoryTable):
        for check, metric, found in (
                ("one_current_version", "keys_with_several_current_versions", scd_metrics.several_current),
                ("versions_apart", "overlapping_versions", scd_metrics.overlapping_versions)):
            details[check] = found(spec, versions)
            metrics[metric] = details[check][metric]
    return TableMetrics(metrics, details, rows.num_rows)


def consumed_until(settings: Settings, spec: TableSpec) -> tuple[int | None, str]:
    """The latest source event (epoch µs) among the source versions the job's latest committed batch had read
    completely (its Delta source offset), and what that was; None when it has read nothing yet."""
    checkpoint = settings.layout.checkpoint(spec.job_id)
    batch = checkpoints.latest_committed_batch(checkpoint)
    if batch is None:
        return None, "no committed batch"
    offset = json.loads(checkpoints.source_offsets(checkpoint, batch)[0])
    # (v, i): every version before v read (and some files of v); a starting version is a snapshot still being read
    version = -1 if offset.get("isStartingVersion") else offset["reservoirVersion"] - 1
    if version < 0:
        return None, "no source version read completely"
    _, latest = event_time_bounds(settings.layout.table(spec.source_table), spec.event_time, version=version)
    return latest, f"{spec.source_table} version {version} (batch {batch})"


def writers_freshness(settings: Settings, spec: AlertTable, latest_end: int | None) -> tuple[int, dict[str, Any]]:
    """The lag of an alert table several jobs write: per writer, its latest source event less its watermark;
    the table's lag is the largest."""
    per_writer = []
    for writer in spec.writers:
        own = replace(spec, job_id=writer.job_id, source_table=writer.source_table, event_time=writer.event_time,
                      watermark_seconds=writer.watermark_seconds)
        span = source_span(settings, own)
        if writer.within_seconds is None:  # processing-time alerts: up to date with what the job has read
            reference, described = consumed_until(settings, own)
            position = {"read_until": iso(reference), "read_position": described}
        else:
            reference, watermark_source = gold_watermark(settings, own, span.latest)
            position = {"watermark": iso(reference), "watermark_source": watermark_source}
        reference = reference if reference is not None else span.earliest
        lag = _lag_seconds(span.latest, reference)
        per_writer.append({"job": writer.job_id, "freshness_lag_seconds": lag, **position,
                           f"latest_{writer.event_time}": iso(span.latest), "source": span.described})
    lag = max(w["freshness_lag_seconds"] for w in per_writer)
    return lag, {"freshness_lag_seconds": lag, "allowed_lag_seconds": spec.freshness_lag_seconds,
                 "latest_alert_time": iso(latest_end), "writers": per_writer}


def overlapping(settings: Settings, spec: ProcessorTable, version: int) -> dict[str, Any]:
    """Rows that start at or within `apart_seconds` after the end of the previous row of their group: alerts
    starting at or before the previous alert of their entity and type was raised, sessions of a key within
    the gap of the previous one (among distinct rows: a repeated row is the uniqueness check's finding)."""
    groups, start, end = list(spec.groups), spec.start_column, spec.end_column
    rows = delta_store.read_table(settings.layout.table(spec.table), version=version,
                                  columns=list(dict.fromkeys([*groups, start, end, *spec.unique_key]))).to_pandas()
    if spec.sequence_types is not None:
        rows = rows[rows["alert_type"].isin(spec.sequence_types)]
    rows = rows.dropna().drop_duplicates(list(spec.unique_key)).sort_values([*groups, end, start])
    previous_end = rows.groupby(groups)[end].shift()
    found = rows[rows[start] <= previous_end + pd.Timedelta(seconds=spec.apart_seconds)]
    examples = [{**{c: getattr(r, c) for c in groups}, start: getattr(r, start).isoformat(),
                 end: getattr(r, end).isoformat()} for r in found.head(5).itertuples()]
    return {spec.overlap_metric: len(found), f"{spec.noun}s": len(rows), "examples": examples}


def decreased_totals(settings: Settings, spec: RunningTable, version: int, validated_before: int | None) -> dict[str, Any]:
    """Keys whose row count went down, or that vanished, between the version validated before (none: the
    previous version) and `version`."""
    baseline = validated_before if validated_before is not None else version - 1
    count = spec.counts[0]
    if baseline < 0 or baseline >= version:
        return {"decreased_totals": 0, "compared_versions": None}
    path = settings.layout.table(spec.table)
    columns = [*spec.keys, count]
    before, after = (delta_store.read_table(path, version=v, columns=columns).to_pandas() for v in (baseline, version))
    both = before.merge(after, on=list(spec.keys), how="left", suffixes=("_before", "_after"))
    bad = both[both[f"{count}_after"].isna() | (both[f"{count}_after"] < both[f"{count}_before"])]
    examples = [{**{k: getattr(r, k) for k in spec.keys}, "before": int(getattr(r, f"{count}_before")),
                 "after": None if pd.isna(getattr(r, f"{count}_after")) else int(getattr(r, f"{count}_after"))}
                for r in bad.head(5).itertuples()]
    return {"decreased_totals": len(bad), "compared_versions": [baseline, version], "keys_compared": len(before),
            "examples": examples}
