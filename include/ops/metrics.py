"""`lakehouse metrics`: what the product already records about its jobs and tables, in Prometheus' text format.

Read at each scrape from the records the jobs write (heartbeats and leases, `_ops/query_progress`, `_ops/dq_results`,
the tables' Delta logs): the endpoint keeps no state of its own, and a job needs nothing new to be watched. Label
values are bounded: a job id, a table as the registry names it (`gold/user_activity_5m`), a problem of `lakehouse
health`, a quality check and its severity; never a run id or a time. `METRICS` below is the reference (docs/reference/metrics.md is generated from it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from deltalake.exceptions import DeltaError
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from include.checkpoints import journal
from include.ops.health import check_job
from include.ops.health_report import progress_by_job
from include.ops.metric_sources import kafka_lags, table_contents
from include.quality.suites import quality_tables
from include.records import batch_ledger
from include.records.quality_results import RESULTS_TABLE
from include.registry import Registry, load_registry
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)


DURATION_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)  # seconds


@dataclass(frozen=True)
class MetricInfo:
    """One metric family: its name (under `lakehouse_`), kind, labels and meaning."""

    name: str
    kind: str  # gauge | counter | histogram
    labels: tuple[str, ...]
    meaning: str


METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("lakehouse_job_up", "gauge", ("job",),
               "1 while the job's driver heartbeats (its lease held by a live process, its heartbeat not older than "
               "the job's stall bound), else 0"),
    MetricInfo("lakehouse_job_heartbeat_age_seconds", "gauge", ("job",),
               "seconds since the job's last heartbeat (absent before its first)"),
    MetricInfo("lakehouse_job_problem", "gauge", ("job", "problem"),
               "1 per problem `lakehouse health` names for the job (stalled, slow_batches, falling_behind, "
               "state_growing, watermark_stuck, ...)"),
    MetricInfo("lakehouse_job_batches_total", "counter", ("job",),
               "micro-batches the job recorded in `_ops/query_progress` (a replayed batch once; the progress "
               "retention deleting old rows reads as a counter reset)"),
    MetricInfo("lakehouse_job_input_rows_total", "counter", ("job",),
               "rows the job's recorded batches read (as the batches: a reset when retention deletes old rows)"),
    MetricInfo("lakehouse_job_output_rows_total", "counter", ("job", "table"),
               "rows the job's committed batches wrote into each table it writes (`_ops/batch_ledger`; a "
               "replayed batch once; the ledger's retention deleting old rows reads as a counter reset)"),
    MetricInfo("lakehouse_job_last_batch_timestamp_seconds", "gauge", ("job",),
               "when the job's last recorded batch ended (epoch seconds): `time() - this` is the seconds since it"),
    MetricInfo("lakehouse_job_last_batch_duration_seconds", "gauge", ("job",), "the last recorded batch's duration"),
    MetricInfo("lakehouse_job_batch_duration_seconds", "histogram", ("job",),
               "the recorded batches' durations (buckets " + ", ".join(f"{b:g}" for b in DURATION_BUCKETS) +
               " s; as the batches counter, a reset when retention deletes old rows)"),
    MetricInfo("lakehouse_job_operator_state_rows", "gauge", ("job", "operator"),
               "rows each stateful operator of the job held after its last recorded batch (`operator`: its position "
               "in the plan and its name, e.g. `0_dedupeWithinWatermark`)"),
    MetricInfo("lakehouse_job_operator_state_memory_bytes", "gauge", ("job", "operator"),
               "memory each stateful operator of the job used after its last recorded batch"),
    MetricInfo("lakehouse_job_quarantined_rows_total", "counter", ("job",),
               "rows the job set aside in its quarantine table (`sink.quarantine_table`: lines that did not parse)"),
    MetricInfo("lakehouse_kafka_lag_messages", "gauge", ("job", "topic", "partition"),
               "messages on the broker the job's checkpoint has not read yet (Kafka and CDC sources; absent while "
               "the broker does not answer)"),
    MetricInfo("lakehouse_job_watermark_timestamp_seconds", "gauge", ("job",),
               "the job's event-time watermark after its last recorded batch (absent without one)"),
    MetricInfo("lakehouse_job_state_rows", "gauge", ("job",),
               "rows in the job's state store after its last recorded batch (stateful jobs)"),
    MetricInfo("lakehouse_job_state_memory_bytes", "gauge", ("job",),
               "memory the job's state store used after its last recorded batch (stateful jobs)"),
    MetricInfo("lakehouse_table_last_commit_timestamp_seconds", "gauge", ("table",),
               "when the table's latest Delta commit was made (its commitInfo's timestamp, epoch seconds)"),
    MetricInfo("lakehouse_table_version", "gauge", ("table",), "the table's latest Delta version"),
    MetricInfo("lakehouse_table_rows", "gauge", ("table",), "rows of the table's latest version (its log's counts)"),
    MetricInfo("lakehouse_table_files", "gauge", ("table",), "data files of the table's latest version"),
    MetricInfo("lakehouse_table_freshness_goal_seconds", "gauge", ("table",),
               "the table's freshness goal (its suite's `quality.freshness_lag`; tables with a freshness "
               "check): `time() - lakehouse_table_last_commit_timestamp_seconds` against it is how stale it is"),
    MetricInfo("lakehouse_checkpoint_action_pending_seconds", "gauge", ("job", "mode"),
               "seconds since a checkpoint action naming the job started, while it has not finished (its journal is "
               "there; the job cannot start): `lakehouse checkpoint resume-action <job>` finishes one left behind"),
    MetricInfo("lakehouse_quality_check_success", "gauge", ("table", "check", "severity"),
               "1 when the check's latest recorded result on the table (`_ops/dq_results`) passed, else 0; severity "
               "`blocking` or `warning`"),
    MetricInfo("lakehouse_quality_failing_checks", "gauge", ("table", "severity"),
               "the table's checks whose latest result failed, per severity (`blocking` > 0: its suite fails)"),
    MetricInfo("lakehouse_quality_last_validation_timestamp_seconds", "gauge", ("table",),
               "when the table was last validated (epoch seconds)"),
)
_INFO = {m.name: m for m in METRICS}


def _family(name: str) -> Metric:
    info = _INFO[name]
    kind = {"counter": CounterMetricFamily, "histogram": HistogramMetricFamily}.get(info.kind, GaugeMetricFamily)
    return kind(name, info.meaning, labels=list(info.labels))


class LakehouseCollector(Collector):
    """Every family of `METRICS`, read again at each scrape (the registry too: a job added shows up)."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        registry = load_registry(self.settings.registry_path)
        families = {m.name: _family(m.name) for m in METRICS}
        _job_samples(self.settings, registry, families)
        _table_samples(self.settings, registry, families)
        _action_samples(self.settings, families)
        _quality_samples(self.settings, registry, families)
        yield from families.values()


def _job_samples(settings: Settings, registry: Registry, families: dict[str, Metric]) -> None:
    progress = progress_by_job(settings)
    for job_id in registry.order:
        health = check_job(settings, registry, job_id, progress=progress.get(job_id, []))
        families["lakehouse_job_up"].add_metric([job_id], 1.0 if health.running and "stalled" not in health.problems
                                                else 0.0)
        if health.heartbeat_age_seconds is not None:
            families["lakehouse_job_heartbeat_age_seconds"].add_metric([job_id], health.heartbeat_age_seconds)
        for problem in sorted(set(health.problems)):
            families["lakehouse_job_problem"].add_metric([job_id, problem], 1.0)
        batches = progress.get(job_id, [])
        families["lakehouse_job_batches_total"].add_metric([job_id], float(len(batches)))
        families["lakehouse_job_input_rows_total"].add_metric([job_id], float(sum(b["num_input_rows"] or 0
                                                                            for b in batches)))
        if batches:
            _last_batch(job_id, batches[-1], families)
            _durations(job_id, batches, families)
    for (job_id, table), rows in sorted(batch_ledger.rows_written(settings).items()):
        if job_id in registry.jobs:  # a job since removed from the registry: its label is gone
            families["lakehouse_job_output_rows_total"].add_metric([job_id, table], float(rows))
    for lag in kafka_lags(settings, registry):
        families["lakehouse_kafka_lag_messages"].add_metric([lag.job, lag.topic, str(lag.partition)],
                                                            float(lag.messages))


def _durations(job_id: str, batches: list[dict], families: dict[str, Metric]) -> None:
    seconds = [b["batch_duration_ms"] / 1000 for b in batches if b["batch_duration_ms"] is not None]
    buckets = [(floatToGoString(bound), float(sum(1 for d in seconds if d <= bound))) for bound in DURATION_BUCKETS]
    families["lakehouse_job_batch_duration_seconds"].add_metric(
        [job_id], buckets + [("+Inf", float(len(seconds)))], sum_value=sum(seconds))


def _last_batch(job_id: str, last: dict, families: dict[str, Metric]) -> None:
    if last["progress_time"] is not None:
        ended = last["progress_time"].timestamp() + (last["batch_duration_ms"] or 0) / 1000
        families["lakehouse_job_last_batch_timestamp_seconds"].add_metric([job_id], ended)
    if last["batch_duration_ms"] is not None:
        families["lakehouse_job_last_batch_duration_seconds"].add_metric([job_id], last["batch_duration_ms"] / 1000)
    if last["watermark"] is not None:
        families["lakehouse_job_watermark_timestamp_seconds"].add_metric([job_id], last["watermark"].timestamp())
    if last["state_rows_total"] is not None:
        families["lakehouse_job_state_rows"].add_metric([job_id], float(last["state_rows_total"]))
    if last["state_memory_used_bytes"] is not None:
        families["lakehouse_job_state_memory_bytes"].add_metric([job_id], float(last["state_memory_used_bytes"]))
    try:
        operators = json.loads(last.get("state_operators") or "[]")
    except ValueError:
        operators = []
    for position, operator in enumerate(operators):
        name = f"{position}_{operator.get('operator') or 'state'}"
        if operator.get("numRowsTotal") is not None:
            families["lakehouse_job_operator_state_rows"].add_metric([job_id, name], float(operator["numRowsTotal"]))
        if operator.get("memoryUsedBytes") is not None:
            families["lakehouse_job_operator_state_memory_bytes"].add_metric([job_id, name],
                                                                            float(operator["memoryUsedBytes"]))


def _table_samples(settings: Settings, registry: Registry, families: dict[str, Metric]) -> None:
    tables = dict.fromkeys(t for job_id in registry.order for t in registry.jobs[job_id].tables_written())
    quarantined_by: dict[str, list[str]] = {}
    for job_id in registry.order:
        if registry.jobs[job_id].sink.quarantine_table:
            quarantined_by.setdefault(registry.jobs[job_id].sink.quarantine_table, []).append(job_id)
    for table in tables:
        try:
            commit = delta_store.last_commit(settings.layout.table(table))
        except (OSError, ValueError) as exc:  # one unreadable log: the other tables are still reported
            log.warning("metrics: the Delta log of %s was not read (%s)", table, exc)
            continue
        if commit is None:
            continue
        families["lakehouse_table_version"].add_metric([table], float(commit.version))
        families["lakehouse_table_last_commit_timestamp_seconds"].add_metric([table], commit.timestamp)
        try:
            contents = table_contents(settings.layout.table(table), commit.version)
        except (OSError, ValueError, DeltaError) as exc:  # a log deltalake does not read: the rest still reported
            log.warning("metrics: the files of %s were not read (%s)", table, exc)
            continue
        families["lakehouse_table_rows"].add_metric([table], float(contents.rows))
        families["lakehouse_table_files"].add_metric([table], float(contents.files))
        for job in quarantined_by.get(table, ()):
            families["lakehouse_job_quarantined_rows_total"].add_metric([job], float(contents.rows))
    for table, spec in quality_tables(registry).items():
        if any(check.name == "freshness" for check in spec.checks):
            families["lakehouse_table_freshness_goal_seconds"].add_metric([table], float(spec.freshness_lag_seconds))


def _action_samples(settings: Settings, families: dict[str, Metric]) -> None:
    try:
        actions = journal.pending(settings.layout.checkpoints)
    except journal.ActionPending as exc:  # an unreadable journal: said, the rest still reported
        log.warning("metrics: %s", exc)
        return
    now = time.time()
    for action in actions:
        started = datetime.fromisoformat(action.started_at).timestamp()
        for job_id in action.targets:
            families["lakehouse_checkpoint_action_pending_seconds"].add_metric([job_id, action.mode],
                                                                               max(0.0, now - started))


def _quality_samples(settings: Settings, registry: Registry, families: dict[str, Metric]) -> None:
    path = settings.layout.ops_table(RESULTS_TABLE)
    if not delta_store.table_exists(path):
        return
    tables = {t for job in registry.jobs.values() for t in job.tables_written()}
    latest: dict[tuple[str, str], dict] = {}
    for row in delta_store.read_table(path, columns=["table", "expectation", "severity", "success",
                                                     "validated_at"]).to_pylist():
        key = (row["table"], row["expectation"])
        if row["table"] in tables and (key not in latest or row["validated_at"] >= latest[key]["validated_at"]):
            latest[key] = row
    failing: dict[tuple[str, str], int] = {}
    validated: dict[str, float] = {}
    for (table, check), row in sorted(latest.items()):
        families["lakehouse_quality_check_success"].add_metric([table, check, row["severity"]],
                                                               1.0 if row["success"] else 0.0)
        for severity in ("blocking", "warning"):
            failing.setdefault((table, severity), 0)
        failing[(table, row["severity"])] += 0 if row["success"] else 1
        validated[table] = max(validated.get(table, 0.0), row["validated_at"].timestamp())
    for (table, severity), count in sorted(failing.items()):
        families["lakehouse_quality_failing_checks"].add_metric([table, severity], float(count))
    for table, moment in sorted(validated.items()):
        families["lakehouse_quality_last_validation_timestamp_seconds"].add_metric([table], moment)


def collector_registry(settings: Settings) -> CollectorRegistry:
    """A registry holding only the lakehouse's collector (no process metrics of the scraping process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakehouseCollector(settings))
    return registry


def exposition(settings: Settings) -> str:
    """The metrics as one scrape would return them (Prometheus' text format 0.0.4)."""
    started = time.monotonic()
    text = generate_latest(collector_registry(settings)).decode()
    log.debug("metrics collected in %.2f s", time.monotonic() - started)
    return text

