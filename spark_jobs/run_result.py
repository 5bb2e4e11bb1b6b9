"""How a job's run ended: its result and one-line summary, or the exception a failed run ends with (the lease lost,
the broker down, the query's error) and what to do about a failure that is not the job's."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from include.kafka.broker import BrokerError
from include.kafka.connection import unreachable_broker
from include.records import lease
from include.registry import JobSpec
from include.settings import Settings

log = logging.getLogger(__name__)

PYTHON_WORKER_TIMEOUT = "Python worker failed to connect back"  # Spark's message when workers start too slowly


@dataclass
class RunResult:
    job: str
    query_id: str
    status: str  # "finished" (available-now drained) or "stopped" (stop requested)
    last_batch: int | None
    summary: str = ""  # one line: batches, rows in, rows written per table, duration


def run_summary(job_id: str, status: str, batches: int, rows_in: int, written: Counter, last_batch: int | None,
                seconds: float) -> str:
    """The run's one-line summary, which ends the job's log (and its Airflow task's)."""
    tables = ", ".join(f"{table} +{rows}" for table, rows in sorted(written.items())) or "none"
    return (f"job={job_id} {status}: {batches} batches, {rows_in} rows in, rows out {tables}, "
            f"last batch {last_batch}, {seconds:.1f} s")


def run_failure(settings: Settings, job: JobSpec, held: lease.Lease, error: str, summary: str) -> Exception:
    """The exception a failed query's run ends with: the lease lost, the broker down, or the query's error."""
    if held.lost:  # the batch writer's guard refused to commit
        return lease.LeaseLost(f"job {job.id!r} stopped: {held.lost}; it committed nothing more ({summary})")
    hint = failure_hint(job.id, error)
    if hint:
        log.error("%s", hint)
    down = kafka_down(settings, job)
    if down:  # Spark's trace says only that its fetches timed out: say why, in one line
        return BrokerError(f"job {job.id!r} stopped: {down} (it resumes from its checkpoint when the broker is back)"
                           f"; {summary}")
    return RuntimeError(f"job {job.id!r} failed: {error}\n{summary}")


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
