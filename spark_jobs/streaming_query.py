"""Run one registry job as a Structured Streaming query with an exactly-once Delta sink.

This module is the query itself: taken under the job's lease, checked by the one preflight
(include/checkpoints/preflight.py), its tables made, started, watched until it ends and summed up. Each concern around
it has its module: the session settings (`query_session`), the owed no-data batch (`watermark_replay`), the lease, stop
requests and registry watch while it runs (`query_watch`), the sink (`batch_writer`), each batch's progress and
heartbeat (`progress_listener`), how the run ended (`run_result`), restarts for a new source schema (`evolution`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from pyspark.sql import SparkSession

from include import checkpoints
from include.checkpoints.ownership import written_versions
from include.checkpoints.plan import (
    fingerprint,
    output_edits,
    read_fingerprint,
    read_start_position,
    write_fingerprint,
)
from include.checkpoints.preflight import Startable, preflight
from include.lineage.emitter import JobRun
from include.records import job_requests, lease
from include.records.heartbeats import write_heartbeat
from include.registry import JobSpec, Registry, Trigger
from include.settings import Settings
from include.spark_session import driver_metrics_url, session_confs
from spark_jobs.batch_writer import make_batch_writer
from spark_jobs.delta_tables import ensure_job_tables
from spark_jobs.evolution import (
    RegistryEvolved,
    RegistryWatch,
    SchemaRestarts,
    SourceSchemaChanged,
    backfilled_sources,
    record_evolution,
    source_schema_changed,
)
from spark_jobs.progress_listener import recorder_for
from spark_jobs.query_session import configure_session, state_encoding, state_memory_bytes
from spark_jobs.query_watch import watch_query
from spark_jobs.run_result import RunResult, run_failure, run_summary
from spark_jobs.transforms import build_stream
from spark_jobs.watermark_replay import replay_batch_owing_a_watermark

log = logging.getLogger(__name__)


def run_job(
    spark: SparkSession,
    settings: Settings,
    registry: Registry,
    job_id: str,
    trigger: Trigger,
    *,
    shuffle_partitions: int | None = None,
    stop_requested: threading.Event | None = None,
    held: lease.Lease | None = None,
    action_id: str | None = None,
) -> RunResult:
    """Run `job_id` until an available-now run drains its input, or until a stop is requested.

    A checkpoint action runs the job under its own lease (`held`) and journal (`action_id`); otherwise the run
    takes the job's lease, and refuses while an unfinished action names the job."""
    job = registry.job(job_id)
    if trigger.on_upstream_commit and (problem := registry.upstream_commit_problem(job.id)):
        raise ValueError(f"job {job.id!r}: {problem}")
    stop_requested = stop_requested or threading.Event()
    lease_taken = held is None
    asked_since = datetime.now(UTC)  # a stop request from now on is this run's, even before its query starts
    held = held or lease.acquire(settings, job.id, trigger=str(trigger))
    try:
        leftover = job_requests.discard_older(settings, job.id, asked_since)
        if leftover:
            log.warning("job=%s: discarding a stop request left from before this run: %s", job.id, leftover)
        options = {"shuffle_partitions": shuffle_partitions, "inside_action": action_id, "lease_held": True}
        start = preflight(settings, registry, job, **options)
        write_heartbeat(settings, job.id, status="starting", trigger=str(trigger))
        lineage_run = JobRun(settings, registry, job.id, live=not trigger.available_now)  # OpenLineage: START
        try:
            result, registry = _run_through_changes(QueryRun(spark, settings, registry, trigger, held, stop_requested,
                                                             action_id, start), options)
        except BaseException as failure:
            lineage_run.end(registry, failure)
            raise
        lineage_run.end(registry)
    finally:
        if lease_taken:
            held.release()
        job_requests.clear(settings, job.id)
    log.info("%s", result.summary)  # the last line of the job's log
    return result


def _run_through_changes(run: QueryRun, options: dict) -> tuple[RunResult, Registry]:
    """`_run_with_lease` until the run ends, its query started again (from its checkpoint) when the registry evolves
    or a table it reads changes its schema; the result, and the registry it ended with."""
    registry, job, start = run.registry, run.job, run.start
    restarts = SchemaRestarts(job.id)
    while True:
        try:
            return _run_with_lease(replace(run, registry=registry, start=start)), registry
        except RegistryEvolved as changed:
            registry = changed.registry
            job = registry.job(job.id)
        except SourceSchemaChanged as changed:
            restarts.note(changed, checkpoints.latest_committed_batch(run.settings.layout.checkpoint(job.id)))
            log.info("job=%s: a table it reads has a new schema; its query starts again with it, from its "
                     "checkpoint (%s)", job.id, str(changed).splitlines()[0][:300])
        start = preflight(run.settings, registry, job, **options)  # the checkpoint or the registry moved on


@dataclass(frozen=True)
class QueryRun:
    """One start of a job's query: what it runs with."""

    spark: SparkSession
    settings: Settings
    registry: Registry
    trigger: Trigger
    held: lease.Lease  # the job's lease: renewed while the query runs, checked before each commit
    stop_requested: threading.Event
    action_id: str | None  # the checkpoint action running the job, if any
    start: Startable  # the job as it starts (its shuffle partitions) and its plan: the preflight's answer

    @property
    def job(self) -> JobSpec:
        return self.start.job


def _run_with_lease(run: QueryRun) -> RunResult:
    """Prepare and start the job's query, watch it until it ends, and say how it ended."""
    _prepare(run)
    settings, job = run.settings, run.job
    configure_session(run.spark, job, run.start.partitions, run.trigger)
    recorder = recorder_for(run.spark)
    recorder.track(job.id, settings, str(run.trigger), state_memory_bytes(run.spark), driver_metrics_url(run.spark))
    written: Counter = Counter()  # rows out per table, over this run's batches
    started = time.monotonic()
    query = _start_query(run, written)
    watch = None if run.trigger.available_now else RegistryWatch(settings, job, run.registry)
    status, evolved = watch_query(settings, job, query, run.held, run.stop_requested, watch)
    error = query.exception()
    # The checkpoint's last committed batch: the last progress may be an idle one, which carries the next batch's id
    last_batch = checkpoints.latest_committed_batch(settings.layout.checkpoint(job.id))
    if not recorder.wait_terminated(str(query.runId)):
        log.warning("job=%s: the progress listener did not catch up in time", job.id)
    batches, rows_in = recorder.totals(str(query.runId))
    schema_changed = error is not None and not run.held.lost and source_schema_changed(str(error), settings, job)
    status = "restarting" if schema_changed else "failed" if error else status
    summary = run_summary(job.id, status, batches, rows_in, written, last_batch, time.monotonic() - started)
    write_heartbeat(settings, job.id, status=status, query_id=str(query.id), batch_id=last_batch, summary=summary)
    if schema_changed:
        raise SourceSchemaChanged(f"{str(error).splitlines()[0]}; {summary}")
    if evolved is not None and error is None:
        raise RegistryEvolved(evolved)
    if error is not None:
        raise run_failure(settings, job, run.held, str(error), summary)
    return RunResult(job=job.id, query_id=str(query.id), status=status, last_batch=last_batch, summary=summary)


def _prepare(run: QueryRun) -> None:
    """What a start does before its query, once the preflight let it: the fingerprint of a new checkpoint (or of one
    made before fingerprints were kept), the owed no-data batch replayed, the job's tables made, an `evolve` plan
    applied to them and recorded."""
    settings, registry, job, plan = run.settings, run.registry, run.job, run.start.plan
    checkpoint = settings.layout.checkpoint(job.id)
    if read_fingerprint(checkpoint) is None or not (checkpoint / "offsets").is_dir():
        write_fingerprint(checkpoint, fingerprint(job, registry))
    replay_batch_owing_a_watermark(settings, job, run.trigger)
    evolving = plan.mode == "evolve"
    before = written_versions(settings, job) if evolving else {}
    ensure_job_tables(run.spark, settings, registry, job, output_edits(plan, job) if evolving else None)
    if evolving:
        record_evolution(settings, registry, job, plan, before, written_versions(settings, job))


def _start_query(run: QueryRun, written: Counter):
    """The job's streaming query, started on its checkpoint (a new one: from the sources' starting positions)."""
    settings, job, trigger = run.settings, run.job, run.trigger
    checkpoint = settings.layout.checkpoint(job.id)
    # no batch planned yet (Spark makes `offsets/` when a query starts): the sources' starting options apply
    new_checkpoint = checkpoints.latest_offsets_batch(checkpoint) is None
    starting = read_start_position(checkpoint) if new_checkpoint else None
    if starting:
        log.info("job=%s: new checkpoint, Delta sources start at %s", job.id, starting)
    writer = (
        build_stream(run.spark, settings, job, starting, available_now=trigger.available_now,
                     skip_changes=backfilled_sources(settings, job), new_checkpoint=new_checkpoint)
        .writeStream.queryName(job.id)
        .option("checkpointLocation", str(checkpoint))
        .outputMode(job.sink.mode)
        .foreachBatch(make_batch_writer(settings, job, written, guard=run.held.check))
    )
    writer = writer.trigger(availableNow=True) if trigger.available_now else writer.trigger(
        processingTime=trigger.spark_interval
    )
    log.info("job=%s starting (%s, %d shuffle partitions, checkpoint %s)", job.id, trigger, run.start.partitions,
             checkpoint)
    with session_confs(run.spark, state_encoding(job)):
        return writer.start()

