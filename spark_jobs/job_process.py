"""The entry point of a job process: `spark-submit spark_jobs/entrypoints/run_job.py <job> [--trigger ...]`, which
both DAGs launch (include.ops.launch), and `lakehouse run <job>`, the same thing in this process.

Exit codes: see :class:`include.ops.launch.ExitCode` (0 done, 1 failed, 2 bad input, 75 refused).
SIGTERM and SIGINT, to this process or to its whole process group, stop the query at its next batch
boundary (exit 0); the driver JVM ignores them.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from include import arguments
from include.checkpoints.journal import refuse_if_pending
from include.checkpoints.plan import PlanRequired, plan_job
from include.checkpoints.validate import check_job_files
from include.logging_setup import configure_logging
from include.ops import lease
from include.ops.launch import ExitCode, report_failure
from include.registry import load_registry
from include.settings import Settings, load_settings

log = logging.getLogger("lakehouse")


def add_run_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("job")
    parser.add_argument("--trigger", type=arguments.trigger, default=None,
                        help="'available-now' or 'processing-time=10 seconds' (default: the job's backfill trigger)")
    parser.add_argument("--shuffle-partitions", type=arguments.partition_count, default=None)
    return parser


def install_stop_handler() -> threading.Event:
    """SIGTERM / SIGINT set the returned event: the runner stops at the next batch boundary."""
    stop = threading.Event()

    def request_stop(signum, _frame):
        log.info("received %s: stopping at the next batch boundary", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    return stop


def shield_jvm_from_stop_signals(spark) -> None:
    """Make the driver JVM ignore SIGINT and SIGTERM, so that a signal to the whole process group (Ctrl-C,
    `timeout`, a task kill) stops the job through this process's handler at a batch boundary, instead of
    the JVM's shutdown hooks tearing Spark down under a running batch. SIGKILL still ends both."""
    jvm = spark.sparkContext._jvm
    for name in ("INT", "TERM"):
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), jvm.sun.misc.SignalHandler.SIG_IGN)


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one registry job in this process until it drains (available-now) or is stopped."""
    from include.kafka.broker import BrokerError
    from include.kafka.connection import unreachable_broker
    from include.spark_session import get_spark
    from spark_jobs import batch_hooks
    from spark_jobs.streaming_query import run_job

    registry = load_registry(settings.registry_path)
    job = registry.job(args.job)
    trigger = args.trigger or job.triggers["backfill"]
    if lease.is_held(settings, job.id):  # refuse before paying for a JVM; run_job takes the lease for real
        raise lease.LeaseHeld(lease.describe_holder(job.id, lease.read_lease(settings, job.id)))
    refuse_if_pending(settings, job.id)  # an unfinished checkpoint action; run_job checks again
    check_job_files(settings, job)  # a damaged checkpoint is named before paying for a JVM; run_job checks again
    down = unreachable_broker(settings, job)  # likewise a Kafka source's broker that does not answer
    if down:
        raise BrokerError(f"{down}: job {job.id!r} not started (its checkpoint keeps its place)")
    if args.shuffle_partitions is None:  # likewise a checkpoint whose plan is not resume (run_job checks again)
        plan = plan_job(job, registry, settings.layout.checkpoint(job.id), settings=settings)
        if plan.mode != "resume":
            raise PlanRequired(plan)
    if settings.batch_hooks:
        batch_hooks.install_named(settings.batch_hooks)
    spark = get_spark(settings, app_name=f"lakehouse-{job.id}")
    shield_jvm_from_stop_signals(spark)
    stop = install_stop_handler()  # after the SparkContext, whose own SIGINT handler it replaces
    run_job(spark, settings, registry, job.id, trigger, shuffle_partitions=args.shuffle_partitions,
            stop_requested=stop)  # its summary line ends the log
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    parser = add_run_arguments(argparse.ArgumentParser(prog="spark_jobs/entrypoints/run_job.py", description=__doc__))
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        settings.require_writable_root()
    except ValueError as exc:
        sys.stderr.write(f"lakehouse run: {exc}\n")
        return ExitCode.BAD_INPUT
    configure_logging(settings)
    try:
        return run(settings, args)
    except Exception as exc:
        return report_failure("lakehouse run", exc)
