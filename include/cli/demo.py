"""`lakehouse demo`: generate every source, run every job available-now (through Airflow's lakehouse_backfill, or
`--direct` in this process), print the summary; the servers it needs are started for it and stopped after."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext

from include import arguments
from include.airflow import run_follower
from include.airflow.environment import (
    airflow_environment,
    airflow_home,
    run_airflow,
    setup_steps,
    start_airflow,
)
from include.catalog import metastore
from include.cdc import capture, chain, connect, shop
from include.cdc.shop import HARD_CASES_EVENTS
from include.cli.command import command
from include.cli.generate import generate_into
from include.generator import GeneratorConfig, generated_sources
from include.kafka import broker
from include.kafka.connection import bootstrap_servers
from include.objectstore import server
from include.registry import Registry, Trigger, load_registry
from include.settings import Settings, load_settings
from spark_jobs.driver import install_stop_handler
from spark_jobs.job_process import run

SHOP_SHARE = 10  # the shop database's changes: a tenth of the events of each other source


def _arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--events", type=arguments.positive_int, default=20000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--files", type=arguments.positive_int, default=10)
    demo.add_argument("--direct", action="store_true",
                      help="run the jobs in this process instead of through Airflow's lakehouse_backfill")


@command("demo", "generate data, run every job available-now, print the summary", _arguments, needs_root=False)
def demo(settings: Settings, args: argparse.Namespace) -> int:
    """Generate every source, run the backfill, print the summary; a Kafka source's broker and the catalog are
    started first when none answers, and stopped again at the end."""
    registry = load_registry(settings.registry_path)
    with ExitStack() as cleanup:
        if not settings.root.is_local:
            settings = cleanup.enter_context(store_for_demo(settings))
        settings.require_writable_root()
        if any(j.source.kind == "kafka" for j in registry.jobs.values()):
            cleanup.enter_context(broker_for_demo(settings))
        if registry.cdc_sources():
            cleanup.enter_context(cdc_for_demo(settings, registry))
        cleanup.enter_context(catalog_for_demo(settings))
        return run_demo(settings, registry, args)


@contextmanager
def _started_for_the_demo(started: bool, message: str, stop: Callable[[], str]) -> Iterator[None]:
    """A server the demo asked for (`started`: by it), said in one line; stopped on exit if the demo started it,
    whatever happens (a closed stderr included)."""
    try:
        sys.stderr.write(message + "\n")
        yield
    finally:
        if started:
            sys.stderr.write(stop() + " (the demo started it)\n")


def catalog_for_demo(settings: Settings) -> AbstractContextManager[None]:
    """A context in which the catalog answers when it can: the one running, or one started here (a local URI) and
    stopped on exit; one that cannot start is one line, and the demo runs without it."""
    try:
        started, message = metastore.up(settings)
    except metastore.CatalogError as exc:
        sys.stderr.write(f"lakehouse demo: running without a catalog: {exc}\n")
        return nullcontext()
    return _started_for_the_demo(started, message, lambda: metastore.down(settings))


@contextmanager
def store_for_demo(settings: Settings) -> Iterator[Settings]:
    """A context in which the S3 root answers: the server running, or, for a local endpoint, one started here and
    stopped on exit; yields the settings (with the credentials a new server made)."""
    local = settings.s3.endpoint and server.host_port(settings.s3.endpoint)[0] in ("127.0.0.1", "localhost")
    if not local or server.answers(settings.s3):
        yield settings
        return
    started, message = server.up(settings)
    with _started_for_the_demo(started, message, lambda: server.down(settings)):
        yield load_settings()


def broker_for_demo(settings: Settings) -> AbstractContextManager[None]:
    """A context in which a Kafka broker answers: the one running, or one started here and stopped on exit."""
    started, message = broker.up(settings, bootstrap_servers(settings))
    return _started_for_the_demo(started, message, lambda: broker.down(settings))


@contextmanager
def cdc_for_demo(settings: Settings, registry: Registry) -> Iterator[None]:
    """A context in which the CDC chain runs (the local database, the Connect worker, the connectors), stopped on
    exit when the demo started it; its replication slot stays, so the next demo's connector resumes there."""
    bootstrap = bootstrap_servers(settings)
    started = not connect.answers(settings.connect_url)
    lines = chain.up(settings, registry, bootstrap)
    with _started_for_the_demo(started, "\n".join(lines), lambda: "; ".join(chain.down(settings, registry, bootstrap))):
        yield


def generate_shop(settings: Settings, registry: Registry, changes: int, seed: int) -> None:
    """The shop database's transactions, waited for until every change is on its table's topic."""
    topics = [s.cdc.topic for sources in registry.cdc_sources().values() for s in sources]
    before = capture.end_offsets(bootstrap_servers(settings), topics)
    run_ = shop.run(settings, changes, seed)
    capture.wait_captured(bootstrap_servers(settings), before, capture.expected_messages(registry, run_.transactions))
    sys.stderr.write(f"shop: {len(run_.transactions)} transactions committed and captured ({run_.oracle})\n")


def run_demo(settings: Settings, registry: Registry, args: argparse.Namespace) -> int:
    from include.summary import summarize

    stop = install_stop_handler()
    for _, source in sorted(generated_sources(registry).items()):
        generate_into(settings, source, GeneratorConfig(events=args.events, seed=args.seed, files=args.files))
    if registry.cdc_sources():
        generate_shop(settings, registry, max(args.events // SHOP_SHARE, HARD_CASES_EVENTS), args.seed)
    if args.direct:
        if stop.is_set():
            return 0
        every_job = argparse.Namespace(jobs=list(registry.order), group=None, trigger=Trigger(available_now=True),
                                       shuffle_partitions=None, outcomes=None)
        code = run(settings, every_job)  # in one driver, one after another, as the backfill's run_jobs does
        if code:
            sys.stderr.write(f"lakehouse demo: not every job finished (exit {code}); their lines are above\n")
            return code
        from include.quality.runner import run_quality

        sys.stdout.write(run_quality(settings, registry).render() + "\n")
        from include.ops.health_report import build

        build(settings, registry)  # through Airflow, the DAG's health_report task builds it
        failed_step = None
    else:
        failed_step = demo_through_airflow(settings, registry)
        log_file = settings.layout.demo_log
        if failed_step:
            tail = "".join(log_file.read_text().splitlines(keepends=True)[-40:])
            sys.stderr.write(f"{tail}\nlakehouse demo: `airflow {' '.join(failed_step)}` failed; log: {log_file}\n")
    sys.stdout.write("\n" + summarize(settings, registry).render() + "\n")
    sys.stdout.write(f"\nlakehouse root: {settings.root}\n")
    if settings.layout.health_report_index.is_file():
        sys.stdout.write(f"pipeline-health report: {settings.layout.health_report_index}\n")
    return 1 if failed_step else 0


def demo_through_airflow(settings: Settings, registry: Registry) -> list[str] | None:
    """`airflow db migrate` and the Spark pool, then `airflow dags test lakehouse_backfill`, writing a line per
    task as the run goes; returns the failed step, or None."""
    log_file = settings.layout.demo_log
    sys.stderr.write(f"running lakehouse_backfill through Airflow (AIRFLOW_HOME={airflow_home()}); log: {log_file}\n")
    for step in setup_steps(settings):
        if run_airflow(settings, step, log_file) != 0:
            return step
    os.environ.update(airflow_environment(settings))  # this process reads the run's progress from Airflow's DB
    run_follower.forget_other_roots(settings, registry.tables_written())  # an earlier demo's at another root leave ours inactive

    started = time.monotonic()
    before = run_follower.latest_run_id("lakehouse_backfill")
    step = ["dags", "test", "lakehouse_backfill"]
    process = start_airflow(settings, step, log_file)
    run_follower.follow("lakehouse_backfill", before, process, sys.stderr)
    sys.stderr.write(f"lakehouse_backfill {'succeeded' if process.returncode == 0 else 'FAILED'} in "
                     f"{time.monotonic() - started:.0f} s\n")
    return step if process.returncode != 0 else None
