"""The alert rules `lakehouse monitor up` gives Prometheus, generated from the registry (never kept by hand): one rule
per live job, per live table with a freshness goal, per table with a quality suite, and the lakehouse-wide ones.

`ALERTS` is the reference (docs/reference/alerts.md is generated from it): each alert's name, what it watches, its
severity, how long its condition must hold (`for`), and its runbook (the `lakehouse` command that shows or fixes it).
Three names are contracts: `LakehouseJobDown`, `LakehouseTableStale`, `LakehouseQualityFailing`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from include.quality.suites import quality_tables
from include.registry import Registry
from include.registry.specs import JobSpec
from include.settings import Settings

METRICS_SCRAPE_JOB = "lakehouse"  # Prometheus' scrape job of the metrics endpoint
ACTION_PENDING_SECONDS = 900  # an unfinished checkpoint action older than this is one left behind


@dataclass(frozen=True)
class AlertInfo:
    """One alert: its name, what it is about (a `job`, a `table`, the `lakehouse`), severity, meaning, runbook."""

    name: str
    subject: str
    severity: str  # critical: a person acts now; warning: within the day
    condition: str  # when it fires, in words (the reference)
    holds_for: str  # how long, in words (the reference)
    runbook: str  # Markdown; `{job}`, `{table}` filled per rule


ALERTS: tuple[AlertInfo, ...] = (
    AlertInfo("LakehouseJobDown", "job", "critical",
              "a live job's `lakehouse_job_up` is 0: its driver holds no lease, or its heartbeat stalled",
              "the job's restart backoff (`supervision.backoff_seconds`: the supervisor's time to restart it), at "
              "least 2 evaluation intervals; 2 intervals for an `on_down: alert` job",
              "`lakehouse health` says why (no lease, stalled, its last failure); the `lakehouse_live` DAG starts it "
              "again (its next run, or trigger it), or `lakehouse stop {job}` first when it hangs"),
    AlertInfo("LakehouseJobUnhealthy", "job", "warning",
              "a live job that runs has a problem `lakehouse health` names (falling_behind, slow_batches, "
              "watermark_stuck, state_growing, state_memory_high, dropped_by_watermark, partition_skew): the "
              "`problem` label says which",
              "3 evaluation intervals",
              "`lakehouse health` shows the batches behind it; `lakehouse state {job}` what its state holds; "
              "docs/operations/live-supervision.md, *Health problems*"),
    AlertInfo("LakehouseKafkaLagGrowing", "job", "warning",
              "a live Kafka-fed job (its CDC topics too) has messages left to read on the broker, more at the end of "
              "a window than at its start (the window: 10 of its trigger intervals, at least 10 minutes)",
              "half the window",
              "`lakehouse health` (falling behind? slow batches?); `lakehouse metrics` has the lag per partition; "
              "more cores, a larger `max_offsets_per_trigger` or a shorter trigger let it catch up"),
    AlertInfo("LakehouseStateRowsHigh", "job", "warning",
              "a live job's state holds more rows than its `supervision.health.max_state_rows` (jobs with a bound)",
              "3 evaluation intervals",
              "`lakehouse state {job}` shows what each operator holds; a shorter watermark or expiry, or "
              "`lakehouse checkpoint repartition {job}` with more state partitions"),
    AlertInfo("LakehouseQuarantineHigh", "job", "warning",
              "of the rows a live job with a quarantine table read over a window (15 minutes, at least 10 trigger "
              "intervals), more than `supervision.health.max_quarantined_fraction` (default 0.05) were quarantined",
              "immediately (the window is the condition)",
              "`lakehouse summary` counts the quarantined lines; `SELECT reason, count(*) FROM <its quarantine "
              "table> GROUP BY reason` says why; a producer sending a new format is the usual cause"),
    AlertInfo("LakehouseTableStale", "table", "warning",
              "a table a live job writes has had no commit for longer than its freshness goal (its suite's "
              "`quality.freshness_lag`) plus its writer's live trigger interval",
              "immediately (the threshold already includes the goal)",
              "`lakehouse health` (is its writer up, is it fed?); `lakehouse summary` for the rows upstream; a "
              "source that stopped sending is the usual cause"),
    AlertInfo("LakehouseQualityFailing", "table", "critical",
              "a blocking check of the table's suite failed at its latest validation "
              "(`lakehouse_quality_failing_checks{severity=\"blocking\"}`)",
              "immediately (a validation is a fact, not a flap)",
              "`lakehouse quality run {table}` validates it again and names the failing checks and rows; the "
              "quality report (`_reports/data_docs`) shows them"),
    AlertInfo("LakehouseCheckpointActionPending", "job", "warning",
              f"a checkpoint action naming the job started more than {ACTION_PENDING_SECONDS // 60} minutes ago and "
              "has not finished (its journal is still there): the job cannot start until it is",
              "immediately (the threshold is the action's age)",
              "`lakehouse checkpoint resume-action {job}` finishes it (its journal says what is done)"),
    AlertInfo("LakehouseMetricsDown", "lakehouse", "critical",
              "Prometheus cannot scrape the lakehouse's metrics endpoint: every other alert is blind",
              "2 evaluation intervals",
              "`lakehouse monitor status`; `lakehouse monitor up` starts what is down"),
)
_INFO = {a.name: a for a in ALERTS}


def _seconds(value: float) -> str:
    return f"{int(value)}s"


def _rule(name: str, expr: str, holds: float, labels: dict[str, str], summary: str, **fill: str) -> dict[str, Any]:
    info = _INFO[name]
    return {"alert": name, "expr": expr, "for": _seconds(holds),
            "labels": {"severity": info.severity, **labels},
            "annotations": {"summary": summary, "runbook": info.runbook.format(**fill)}}


def _job_rules(registry: Registry, job: JobSpec, interval: int) -> list[dict[str, Any]]:
    supervision = job.supervision
    down_for = max(supervision.backoff_seconds, 2 * interval) if supervision.on_down == "restart" else 2 * interval
    labels = {"job": job.id, **({"lakehouse_group": job.group} if job.group else {})}
    return [
        _rule("LakehouseJobDown", f'lakehouse_job_up{{job="{job.id}"}} == 0', down_for, labels,
              f"live job {job.id} is down (no driver holds its lease, or its heartbeat stalled)", job=job.id),
        _rule("LakehouseJobUnhealthy",
              f'lakehouse_job_problem{{job="{job.id}",problem!="stalled"}} == 1 and on(job) '
              f'lakehouse_job_up{{job="{job.id}"}} == 1', 3 * interval, labels,
              f"live job {job.id}: {{{{ $labels.problem }}}}", job=job.id),
    ]


def _window(registry: Registry, job: JobSpec, least: int) -> int:
    """A window of 10 of the job's live trigger intervals, at least `least` seconds."""
    return max(least, 10 * (job.triggers["live"].interval_seconds or registry.live_interval_seconds(job.id)))


def _flow_rules(registry: Registry, job: JobSpec, interval: int) -> list[dict[str, Any]]:
    """The job's rules on what flows through it: Kafka lag growing, state beyond its bound, quarantine above its
    fraction (each where the job has what it watches)."""
    rules, health, labels = [], job.supervision.health, {"job": job.id}
    if any(source.kafka is not None for source in job.sources):
        window, lag = _window(registry, job, 600), f'lakehouse_kafka_lag_messages{{job="{job.id}"}}'
        rules.append(_rule("LakehouseKafkaLagGrowing",
                           f"sum by (job) (delta({lag}[{window}s])) > 0 and sum by (job) ({lag}) > 0", window // 2,
                           labels, f"{job.id} falls behind its Kafka topics: more messages to read than "
                           f"{window // 60} minutes ago", job=job.id))
    if health.max_state_rows:
        rules.append(_rule("LakehouseStateRowsHigh", f'lakehouse_job_state_rows{{job="{job.id}"}} > '
                           f"{health.max_state_rows}", 3 * interval, labels,
                           f"{job.id}'s state holds more than {health.max_state_rows} rows", job=job.id))
    if job.sink.quarantine_table:
        window = _window(registry, job, 900)
        read = f'increase(lakehouse_job_input_rows_total{{job="{job.id}"}}[{window}s])'
        rules.append(_rule("LakehouseQuarantineHigh",
                           f'increase(lakehouse_job_quarantined_rows_total{{job="{job.id}"}}[{window}s]) > '
                           f"{health.max_quarantined_fraction} * {read} and {read} > 0", 0, labels,
                           f"{job.id} quarantined more than {health.max_quarantined_fraction:.0%} of the rows it read "
                           f"in {window // 60} minutes (into {job.sink.quarantine_table})", job=job.id))
    return rules


def _stale_rule(registry: Registry, table: str, goal_seconds: int) -> dict[str, Any]:
    writer = registry.writers_of(table)[0]
    trigger = writer.triggers["live"]
    threshold = goal_seconds + (trigger.interval_seconds or registry.live_interval_seconds(writer.id))
    return _rule("LakehouseTableStale",
                 f'time() - lakehouse_table_last_commit_timestamp_seconds{{table="{table}"}} > {threshold}', 0,
                 {"table": table, "job": writer.id},
                 f"{table} has had no commit for over {threshold} s (its freshness goal, {goal_seconds} s, and its "
                 "writer's trigger interval)", table=table, job=writer.id)


def _quality_rule(registry: Registry, table: str) -> dict[str, Any]:
    writer = registry.writers_of(table)[0]
    return _rule("LakehouseQualityFailing",
                 f'lakehouse_quality_failing_checks{{table="{table}",severity="blocking"}} > 0', 0,
                 {"table": table, "job": writer.id},
                 f"{table}: a blocking quality check failed at its latest validation", table=table, job=writer.id)


def alert_rules(settings: Settings, registry: Registry) -> dict[str, Any]:
    """The rule file (Prometheus' YAML structure) for `registry`: groups `lakehouse_jobs`, `lakehouse_tables`,
    `lakehouse`, evaluated every LAKEHOUSE_MONITOR_INTERVAL_SECONDS."""
    interval = settings.monitor_interval_seconds
    live = [registry.jobs[j] for j in registry.order if registry.jobs[j].live]
    live_tables = {job.sink.table for job in live}
    suites = quality_tables(registry)
    job_rules = [rule for job in live for rule in _job_rules(registry, job, interval)]
    job_rules += [rule for job in live for rule in _flow_rules(registry, job, interval)]
    job_rules += [_rule("LakehouseCheckpointActionPending",
                        f'lakehouse_checkpoint_action_pending_seconds{{job="{job_id}"}} > {ACTION_PENDING_SECONDS}',
                        0, {"job": job_id}, f"a checkpoint action on {job_id} has not finished in "
                        f"{ACTION_PENDING_SECONDS // 60} minutes: {job_id} cannot start", job=job_id)
                  for job_id in registry.order]
    table_rules = [_stale_rule(registry, table, spec.freshness_lag_seconds)
                   for table, spec in suites.items()
                   if table in live_tables and any(check.name == "freshness" for check in spec.checks)]
    table_rules += [_quality_rule(registry, table) for table in suites]
    lakehouse_rules = [_rule("LakehouseMetricsDown", f'up{{job="{METRICS_SCRAPE_JOB}"}} == 0', 2 * interval, {},
                             "Prometheus cannot scrape the lakehouse's metrics endpoint")]
    every = f"{interval}s"
    return {"groups": [{"name": name, "interval": every, "rules": rules}
                       for name, rules in (("lakehouse_jobs", job_rules), ("lakehouse_tables", table_rules),
                                           ("lakehouse", lakehouse_rules)) if rules]}


def reference_rows(fill: Callable[[str], str] = str) -> list[list[str]]:
    """The alerts' reference table: name, about, severity, when, for how long, runbook."""
    return [[f"`{a.name}`", a.subject, a.severity, fill(a.condition), fill(a.holds_for), fill(a.runbook)]
            for a in ALERTS]
