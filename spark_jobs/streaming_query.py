"""Run one registry job as a Structured Streaming query with an exactly-once Delta sink."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from include import checkpoints
from include.checkpoints.journal import refuse_if_pending
from include.checkpoints.ownership import count_own_rows, written_versions
from include.checkpoints.plan import (
    Plan,
    PlanRequired,
    fingerprint,
    output_edits,
    plan_job,
    read_fingerprint,
    read_start_position,
    write_fingerprint,
)
from include.checkpoints.validate import check_job_files
from include.kafka.broker import BrokerError
from include.kafka.connection import unreachable_broker
from include.ops.health import memory_bytes
from include.records import batch_ledger, job_requests, lease, log_rotation
from include.records.heartbeats import write_heartbeat
from include.registry import (
    PROCESSORS,
    JobSpec,
    Registry,
    SessionAggregate,
    StatefulProcess,
    StreamJoin,
    Trigger,
    WindowAggregate,
)
from include.settings import Settings
from include.spark_session import HDFS_PROVIDER, ROCKSDB_PROVIDER, session_confs
from spark_jobs.batch_writer import make_batch_writer
from spark_jobs.delta_tables import ensure_job_tables
from spark_jobs.evolution import (
    SCHEMA_LOG_ADVANCED,
    SCHEMA_LOG_RESTARTS,
    SCHEMA_RESTARTS,
    RegistryEvolved,
    RegistryWatch,
    SourceSchemaChanged,
    backfilled_sources,
    record_evolution,
    source_schema_changed,
)
from spark_jobs.progress_listener import recorder_for
from spark_jobs.transforms import build_stream

log = logging.getLogger(__name__)


PYTHON_WORKER_TIMEOUT = "Python worker failed to connect back"  # Spark's message when workers start too slowly


class CheckpointConflict(ValueError):
    """The requested settings contradict what the checkpoint has fixed."""


def refuse_python_source_checkpoint(settings: Settings, job: JobSpec) -> None:
    """A checkpoint whose Delta source offsets were written by the project's former Python source
    (offsets ``{"version": n}``) cannot be resumed by Delta's own streaming source: refuse, never
    silently start from zero (which would duplicate every row in the sink)."""
    checkpoint = settings.layout.checkpoint(job.id)
    if not any(s.kind == "delta" for s in job.sources) or not checkpoints.written_by_python_delta_source(checkpoint):
        return
    raise CheckpointConflict(
        f"job {job.id!r}: checkpoint {checkpoint} was written by the former Python Delta source (before native "
        f"Delta) and cannot be resumed by Delta's streaming source; rebuild the job: move {checkpoint} and its "
        f"sink table {settings.layout.table(job.sink.table)} aside, then run it (and every job downstream of it, "
        "the same way) again"
    )


def refuse_lost_checkpoint(settings: Settings, registry: Registry, job: JobSpec) -> None:
    """A job without a checkpoint whose tables already hold rows of its own would start from zero and write them
    all again: refuse, and name the checkpoint commands that fit. A new checkpoint made by `lakehouse checkpoint`
    (full-refresh empties the tables; reset-checkpoint records where to start) passes."""
    checkpoint = settings.layout.checkpoint(job.id)
    if checkpoints.latest_offsets_batch(checkpoint) is not None or read_start_position(checkpoint) is not None:
        return
    filled = [t for t in job.tables_written() if count_own_rows(settings, registry, job, t)]
    if not filled:
        return
    archived = settings.layout.archived_checkpoints(job.id)
    fixes = [f"rebuild it from all its input with `lakehouse checkpoint full-refresh {job.id}`"]
    if all(s.kind != "landing" for s in job.sources):
        fixes.append(f"keep the table and go on from new data with `lakehouse checkpoint reset-checkpoint {job.id} "
                     "--from-latest`")
    fixes.append(f"or put the checkpoint back at {checkpoint}" + (f" (archived copies: {archived[-1]})"
                                                                  if archived else ""))
    raise CheckpointConflict(
        f"job {job.id!r}: no checkpoint at {checkpoint}, but {', '.join(filled)} already hold rows of an earlier "
        f"run; starting from zero would write them again. {'; '.join(fixes)}"
    )


@dataclass
class RunResult:
    job: str
    query_id: str
    status: str  # "finished" (available-now drained) or "stopped" (stop requested)
    last_batch: int | None
    summary: str = ""  # one line: batches, rows in, rows written per table, duration


def resolve_shuffle_partitions(settings: Settings, job: JobSpec, override: int | None) -> int:
    """The shuffle partition count for this run; an explicit override may not contradict the checkpoint
    (a changed registry value is the checkpoint plan's business: see :func:`require_resume`)."""
    fixed = checkpoints.shuffle_partitions(settings.layout.checkpoint(job.id))
    if override is not None and fixed is not None and fixed != override:
        raise CheckpointConflict(
            f"job {job.id!r}: checkpoint {settings.layout.checkpoint(job.id)} has its state in {fixed} shuffle "
            f"partitions; {override} cannot take effect without repartitioning the checkpoint "
            f"(lakehouse checkpoint repartition {job.id} --partitions {override})"
        )
    return override or job.state_store.shuffle_partitions


def require_resume(settings: Settings, registry: Registry, job: JobSpec, action_id: str | None = None) -> Plan:
    """Refuse (PlanRequired) to start on a checkpoint whose state depends on another definition of the job;
    record the fingerprint of a new checkpoint (or of one made before fingerprints were kept). The plan: `resume`, or
    `evolve` (the start applies it: spark_jobs.evolution)."""
    checkpoint = settings.layout.checkpoint(job.id)
    plan = plan_job(job, registry, checkpoint, inside_action=action_id, settings=settings)
    if not plan.startable:
        raise PlanRequired(plan)
    if read_fingerprint(checkpoint) is None or not (checkpoint / "offsets").is_dir():
        write_fingerprint(checkpoint, fingerprint(job, registry))
    return plan


def emits_on_watermark(job: JobSpec) -> bool:
    """Some of the job's output is emitted when the watermark passes it: closed windows and sessions, the
    unmatched rows of an outer join, event-time timers."""
    transform = job.transform
    if isinstance(transform, StreamJoin):
        return transform.how != "inner"
    if isinstance(transform, StatefulProcess):
        return PROCESSORS[transform.processor].time_mode == "EventTime"
    return isinstance(transform, (WindowAggregate, SessionAggregate))


def replay_batch_owing_a_watermark(settings: Settings, job: JobSpec, trigger: Trigger) -> None:
    """When the last run ended (killed) after its last data batch committed but before Spark planned the no-data
    batch that emits what the new watermark closes, take that batch's commit back: Spark runs it again (the sink
    skips what it already wrote) and then plans the owed no-data batch, as in an uninterrupted run."""
    if not emits_on_watermark(job) or (trigger.available_now and job.processing_time_timers):
        return
    checkpoint = settings.layout.checkpoint(job.id)
    batch = checkpoints.owed_watermark_batch(checkpoint)
    if batch is None:
        return
    app_id = checkpoints.writer_app_id(checkpoint, job.id)
    if app_id is None or not batch_ledger.recorded(settings, job.id, app_id, batch):
        # written by an earlier writer generation (a rollback rewound to it): a replay under this one would write
        # its rows again; the next batch, with the input after it, plans the no-data batch as usual
        log.info("job=%s: batch %d was written by an earlier writer; not run again", job.id, batch)
        return
    log.warning("job=%s: batch %d moved the watermark on but the run ended before the batch that emits what it "
                "closes; running batch %d again (its rows are already written) so that Spark plans that batch",
                job.id, batch, batch)
    for name in (f".{batch}.crc", str(batch)):  # the checksum first: a crash in between leaves a readable log
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def runs_no_data_batches(job: JobSpec, trigger: Trigger | None) -> bool:
    """Whether the run lets Spark plan batches without new input (for what a watermark or a timer has made due).

    Spark runs one after every batch of a processing-time stateful processor (its timers may be due): under
    available-now that never ends, so such a run takes batches with new input only. On its upstream's commits, a
    job that emits nothing on the watermark would run one a second after each batch only to drop expired state,
    which its next batch drops as well."""
    if trigger is not None and trigger.available_now and job.processing_time_timers:
        return False
    return not (trigger is not None and trigger.on_upstream_commit and not emits_on_watermark(job))


def configure_session(spark: SparkSession, job: JobSpec, shuffle_partitions: int, trigger: Trigger | None = None) -> None:
    """Session confs a new query picks up (Spark pins most of them in the checkpoint)."""
    state = job.state_store
    conf = spark.conf
    conf.set("spark.sql.streaming.noDataMicroBatches.enabled", str(runs_no_data_batches(job, trigger)).lower())
    conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        ROCKSDB_PROVIDER if state.provider == "rocksdb" else HDFS_PROVIDER,
    )
    conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
        str(state.changelog_in(trigger)).lower(),
    )
    conf.set("spark.sql.streaming.minBatchesToRetain", str(state.min_batches_to_retain))


STATE_ENCODING = "spark.sql.streaming.stateStore.encodingFormat"


def state_encoding(job: JobSpec) -> dict[str, str]:
    """A processor's new checkpoint encodes its state in Avro, whose schema may evolve (fields added or removed, types
    widened) without a new checkpoint; the encoding is pinned in each checkpoint (older ones keep UnsafeRow). Set
    only while the query starts (it copies the session then): Spark refuses Avro for other operators
    (aggregations), which later queries of the same session may run."""
    return {STATE_ENCODING: "avro"} if isinstance(job.transform, StatefulProcess) else {}


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
        refuse_if_pending(settings, job.id, inside=action_id)
        write_heartbeat(settings, job.id, status="starting", trigger=str(trigger))
        restarts: list[int | None] = []  # the last committed batch at each restart for a source's new schema
        logged_restarts = 0
        while True:
            try:
                result = _run_with_lease(QueryRun(spark, settings, registry, job, trigger, held, stop_requested,
                                                  shuffle_partitions, action_id))
                break
            except RegistryEvolved as changed:
                registry = changed.registry
                job = registry.job(job_id)
            except SourceSchemaChanged as changed:
                # a schema log that moved on is progress (each of its entries once), not a restart that read nothing
                logged = SCHEMA_LOG_ADVANCED in str(changed) and (logged_restarts := logged_restarts + 1) <= SCHEMA_LOG_RESTARTS
                if not logged:
                    restarts = [*restarts, checkpoints.latest_committed_batch(settings.layout.checkpoint(job.id))]
                if len(restarts) > SCHEMA_RESTARTS and len(set(restarts[-SCHEMA_RESTARTS - 1:])) == 1:
                    raise RuntimeError(f"job {job.id!r} failed: a table it reads changed its schema, and "
                                       f"{SCHEMA_RESTARTS} restarts in a row committed no batch: the change is not "
                                       f"one the job can read on (`lakehouse checkpoint plan {job.id}`): {changed}"
                                       ) from None
                log.info("job=%s: a table it reads has a new schema; its query starts again with it, from its "
                         "checkpoint (%s)", job.id, str(changed).splitlines()[0][:300])
    finally:
        if lease_taken:
            held.release()
        job_requests.clear(settings, job.id)
    log.info("%s", result.summary)  # the last line of the job's log
    return result


@dataclass(frozen=True)
class QueryRun:
    """One start of a job's query: what it runs with."""

    spark: SparkSession
    settings: Settings
    registry: Registry
    job: JobSpec
    trigger: Trigger
    held: lease.Lease  # the job's lease: renewed while the query runs, checked before each commit
    stop_requested: threading.Event
    shuffle_partitions: int | None = None  # asked for; the checkpoint's pinned count otherwise
    action_id: str | None = None  # the checkpoint action running the job, if any


def _run_with_lease(run: QueryRun) -> RunResult:
    """Check, prepare and start the job's query, watch it until it ends, and say how it ended."""
    run, partitions = _prepare(run)
    configure_session(run.spark, run.job, partitions, run.trigger)
    recorder = recorder_for(run.spark)
    recorder.track(run.job.id, run.settings, str(run.trigger), state_memory_bytes(run.spark))
    written: Counter = Counter()  # rows out per table, over this run's batches
    started = time.monotonic()
    query = _start_query(run, partitions, written)
    status, evolved = _watch(run, query)
    error = query.exception()
    # The checkpoint's last committed batch: the last progress may be an idle one, which carries the next batch's id
    last_batch = checkpoints.latest_committed_batch(run.settings.layout.checkpoint(run.job.id))
    if not recorder.wait_terminated(str(query.runId)):
        log.warning("job=%s: the progress listener did not catch up in time", run.job.id)
    batches, rows_in = recorder.totals(str(query.runId))
    schema_changed = error is not None and not run.held.lost and source_schema_changed(str(error), run.settings,
                                                                                         run.job)
    status = "restarting" if schema_changed else "failed" if error else status
    summary = run_summary(run.job.id, status, batches, rows_in, written, last_batch, time.monotonic() - started)
    write_heartbeat(run.settings, run.job.id, status=status, query_id=str(query.id), batch_id=last_batch,
                    summary=summary)
    if schema_changed:
        raise SourceSchemaChanged(f"{str(error).splitlines()[0]}; {summary}")
    if evolved is not None and error is None:
        raise RegistryEvolved(evolved)
    if error is not None:
        raise _failure(run, str(error), summary)
    return RunResult(job=run.job.id, query_id=str(query.id), status=status, last_batch=last_batch, summary=summary)


def _prepare(run: QueryRun) -> tuple[QueryRun, int]:
    """Refuse a start the checkpoint or the registry forbids; make the job's tables, applying an `evolve` plan; the
    run with the job as it runs (its shuffle partitions), and those partitions."""
    settings, registry = run.settings, run.registry
    check_job_files(settings, run.job)
    refuse_python_source_checkpoint(settings, run.job)
    refuse_lost_checkpoint(settings, registry, run.job)
    partitions = resolve_shuffle_partitions(settings, run.job, run.shuffle_partitions)
    job = replace(run.job, state_store=replace(run.job.state_store, shuffle_partitions=partitions))
    plan = require_resume(settings, registry, job, run.action_id)
    replay_batch_owing_a_watermark(settings, job, run.trigger)
    before = written_versions(settings, job) if plan.mode == "evolve" else {}
    ensure_job_tables(run.spark, settings, registry, job, output_edits(plan, job) if plan.mode == "evolve" else None)
    if plan.mode == "evolve":
        record_evolution(settings, registry, job, plan, before, written_versions(settings, job))
    return replace(run, job=job), partitions


def _start_query(run: QueryRun, partitions: int, written: Counter):
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
    log.info("job=%s starting (%s, %d shuffle partitions, checkpoint %s)", job.id, trigger, partitions, checkpoint)
    with session_confs(run.spark, state_encoding(job)):
        return writer.start()


def _watch(run: QueryRun, query) -> tuple[str, Registry | None]:
    """Keep the lease while the query runs; stop it between batches on a stop request, or when a live run's registry
    file evolves the job (that registry returned). Its status: finished, stopped or restarting."""
    settings, job = run.settings, run.job
    watch = None if run.trigger.available_now else RegistryWatch(settings, job, run.registry)
    while query.isActive:
        run.held.renew()
        log_rotation.check_own_log(settings)
        try:
            run.held.check()
        except lease.LeaseLost:  # self-fencing: stopped before another process may take the lease over
            query.stop()
            raise
        request = job_requests.pending(settings, job.id)
        if request:  # this job's own request: the other jobs of a shared driver go on (`stop_requested` is the signal's)
            log.info("job=%s: stop requested (%s)", job.id, request)
        if request or run.stop_requested.is_set():
            _stop_at_batch_boundary(query, settings.stop_grace_seconds, job.id)
            return "stopped", None
        if watch is not None and (evolved := watch.evolved()) is not None:
            log.info("job=%s: the registry changes its output in place (plan evolve): its query stops between "
                     "batches and starts again with it", job.id)
            _stop_at_batch_boundary(query, settings.stop_grace_seconds, job.id)
            return "restarting", evolved
        try:
            query.awaitTermination(0.5)
        except StreamingQueryException:  # it failed: its error is read by the caller, and reported with the summary
            break
    return "finished", None


def _failure(run: QueryRun, error: str, summary: str) -> Exception:
    """The exception a failed query's run ends with: the lease lost, the broker down, or the query's error."""
    job = run.job
    if run.held.lost:  # the batch writer's guard refused to commit
        return lease.LeaseLost(f"job {job.id!r} stopped: {run.held.lost}; it committed nothing more ({summary})")
    hint = failure_hint(job.id, error)
    if hint:
        log.error("%s", hint)
    down = kafka_down(run.settings, job)
    if down:  # Spark's trace says only that its fetches timed out: say why, in one line

        return BrokerError(f"job {job.id!r} stopped: {down} (it resumes from its checkpoint when the broker is back)"
                           f"; {summary}")
    return RuntimeError(f"job {job.id!r} failed: {error}\n{summary}")


def state_memory_bytes(spark: SparkSession) -> int | None:
    """The heap the job's state lives in, as the health check measures it: in local mode the driver's JVM (its
    executors run there), else an executor's (spark.executor.memory)."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        return int(context._jvm.java.lang.Runtime.getRuntime().maxMemory())
    return memory_bytes(context.getConf().get("spark.executor.memory", "1g"))


def kafka_down(settings: Settings, job: JobSpec) -> str | None:
    """"broker unreachable at host:port" when a Kafka source's broker does not answer now."""
    return unreachable_broker(settings, job) if any(s.kind == "kafka" for s in job.sources) else None


def python_worker_timed_out(error: str) -> bool:
    """Whether a query failed because Spark's Python worker did not connect back in time (a busy machine's)."""
    return PYTHON_WORKER_TIMEOUT in error


def failure_hint(job_id: str, error: str) -> str | None:
    """What to do about a failure whose cause is known and is not the job's (one ERROR line), or None."""
    if python_worker_timed_out(error):
        return (f"job={job_id}: Spark's Python workers did not start in time: the machine ran more Spark work than its "
                "cores can host. Lower the Airflow pool `lakehouse_spark` (LAKEHOUSE_SPARK_POOL_SLOTS, or Admin -> "
                "Pools) or run fewer jobs at once, then clear the task: the job resumes from its checkpoint")
    return None


def run_summary(job_id: str, status: str, batches: int, rows_in: int, written: Counter, last_batch: int | None,
                seconds: float) -> str:
    """The run's one-line summary, which ends the job's log (and its Airflow task's)."""
    tables = ", ".join(f"{table} +{rows}" for table, rows in sorted(written.items())) or "none"
    return (f"job={job_id} {status}: {batches} batches, {rows_in} rows in, rows out {tables}, "
            f"last batch {last_batch}, {seconds:.1f} s")


def _stop_at_batch_boundary(query, grace_seconds: float, job_id: str) -> None:
    """Wait for the running batch (if any) to finish, then stop the query. Batches that run back to back (longer
    than their trigger interval) leave no moment between them: the next one has just begun when the running one
    reports its progress, and is stopped there (it runs again on the next start, as after any stop mid-batch)."""
    deadline = time.monotonic() + grace_seconds
    running = _last_batch(query)
    while (query.isActive and query.status["isTriggerActive"] and _last_batch(query) == running
           and time.monotonic() < deadline):
        time.sleep(0.05)
    if time.monotonic() >= deadline and query.isActive and query.status["isTriggerActive"]:
        log.warning("job=%s: batch still running after %.0fs; stopping anyway (it will replay)", job_id, grace_seconds)
    log.info("job=%s: stop requested, stopping between batches", job_id)
    query.stop()


def _last_batch(query) -> int | None:
    """The id of the query's last finished batch (None before its first)."""
    progress = query.lastProgress
    return progress["batchId"] if progress else None
