"""The `lakehouse` command line: generate, run, demo, summary."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import replace

from include import arguments
from include.checkpoints.request import MODES, add_arguments, from_args
from include.generator import GenerationResult, GeneratorConfig
from include.logging_setup import configure_logging
from include.ops.launch import report_failure
from include.registry import Registry, SourceSpec, Trigger, load_registry
from include.settings import Settings, load_settings
from spark_jobs.job_process import add_run_arguments

log = logging.getLogger("lakehouse")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakehouse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="write deterministic test data into landing/<source>/")
    gen.add_argument("--source", required=True)
    gen.add_argument("--events", type=arguments.positive_int, required=True)
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("--files", type=arguments.positive_int, default=10)
    gen.add_argument("--start", type=arguments.timestamp, help="event time of the first event (default 2026-01-01T00:00:00Z)")
    gen.add_argument("--events-per-minute", type=float, default=20.0)
    gen.add_argument("--users", type=arguments.positive_int,
                     help="distinct users (service_logs: services); default: one per 100 events (200), at least 5")
    gen.add_argument("--duplicate-fraction", type=arguments.fraction, default=0.02)
    gen.add_argument("--out-of-order-fraction", type=arguments.fraction, default=0.05)
    gen.add_argument("--late-fraction", type=arguments.fraction, default=0.01)
    gen.add_argument("--malformed-fraction", type=arguments.fraction, default=0.01)
    gen.add_argument("--to", choices=("files", "kafka"),
                     help="landing files, or messages on the source's topic (default: what the source reads)")
    gen.add_argument("--partitions", type=arguments.positive_int, default=3,
                     help="--to kafka: partitions of a topic created for it (an existing topic keeps its own)")

    add_run_arguments(sub.add_parser("run", help="run registry jobs as streaming queries (as spark-submit "
                                                 "spark_jobs/entrypoints/run_job.py does); several jobs share one "
                                                 "driver, one after another"))

    demo = sub.add_parser("demo", help="generate data, run every job available-now, print the summary")
    demo.add_argument("--events", type=arguments.positive_int, default=20000)
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--files", type=arguments.positive_int, default=10)
    demo.add_argument("--direct", action="store_true",
                      help="run the jobs in this process instead of through Airflow's lakehouse_backfill")

    sub.add_parser("airflow-setup", help="prepare Airflow's metadata DB: schema, and the lakehouse_spark pool")
    airflow = sub.add_parser("airflow", help="run an airflow command with this project's DAGs and connections")
    airflow.add_argument("airflow_args", nargs=argparse.REMAINDER)

    history = sub.add_parser("airflow-history", help="delete Airflow's runs, task instances and log files older "
                                                     "than LAKEHOUSE_AIRFLOW_HISTORY_DAYS (airflow db clean)")
    history.add_argument("--every", type=arguments.positive_int, metavar="MINUTES",
                         help="clean again every MINUTES, for ever (the cluster's `airflow-history` part: 60)")
    sub.add_parser("summary", help="rows per table, state rows, quarantined lines")

    quality = sub.add_parser("quality", help="Great Expectations checks of the gold tables (and bronze's rescued fields)")
    quality_sub = quality.add_subparsers(dest="quality_command", required=True)
    quality_run = quality_sub.add_parser("run", help="validate (new versions of) the tables with a suite")
    quality_run.add_argument("tables", nargs="*", help="tables such as gold/user_activity_5m (default: all)")
    quality_run.add_argument("--full", action="store_true", help="validate every row, not only new versions")

    checkpoint = sub.add_parser("checkpoint", help="inspect, plan and reset / repartition job checkpoints")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    inspect = checkpoint_sub.add_parser("inspect", help="what a job's checkpoint holds (the job may be stopped)")
    inspect.add_argument("job")
    inspect.add_argument("--json", action="store_true")
    inspect.add_argument("--no-state", action="store_true", help="skip the state operators (no Spark started)")
    plan = checkpoint_sub.add_parser("plan", help="what each job's checkpoint needs after registry changes")
    plan.add_argument("jobs", nargs="*", help="jobs (default: every job)")
    plan.add_argument("--json", action="store_true")
    for name, mode in MODES.items():
        add_arguments(checkpoint_sub.add_parser(name, help=mode.help), name)

    state = sub.add_parser("state", help="what a job's state store holds, per operator (the job may be stopped)")
    state.add_argument("job")
    state.add_argument("--json", action="store_true")
    state.add_argument("--changes", type=arguments.batch_range, metavar="B1:B2",
                       help="the state change feed from batch B1 to B2 (needs changelog checkpointing)")

    schema = sub.add_parser("schema", help="schema changes: fill added columns from what bronze rescued")
    schema_sub = schema.add_subparsers(dest="schema_command", required=True)
    backfill = schema_sub.add_parser(
        "backfill", help="fill columns the registry added in the rows written before, from `_rescued`, in the "
                         "bronze job's table and its pass-through copies (one Delta version each; the jobs stopped)")
    backfill.add_argument("job", help="the bronze (parse_json) job, e.g. bronze_clickstream")
    backfill.add_argument("--column", action="append", dest="columns", metavar="NAME",
                          help="a column of the source's schema (repeatable; default: every one)")
    backfill.add_argument("--dry-run", action="store_true", help="count what would be filled; change nothing")

    maintain = sub.add_parser("maintain", help="compact (OPTIMIZE) and VACUUM Delta tables, per the registry")
    maintain.add_argument("tables", nargs="*", help="tables such as bronze/clickstream (default: every table)")

    health = sub.add_parser("health", help="each job's batches, status and health problems")
    health.add_argument("--report", action="store_true",
                        help="also rebuild the pipeline-health report (as the DAGs' health_report task does)")

    kafka = sub.add_parser("kafka", help="the Kafka broker of the Kafka sources (LAKEHOUSE_KAFKA_BOOTSTRAP)")
    kafka_sub = kafka.add_subparsers(dest="kafka_command", required=True)
    kafka_sub.add_parser("up", help="format its data directory once, start it in the background, wait until it answers")
    kafka_sub.add_parser("down", help="stop the broker `kafka up` started")
    kafka_sub.add_parser("status", help="whether a broker answers, and its topics with their partitions")

    catalog = sub.add_parser("catalog", help="the catalog of the lakehouse's tables: a Hive metastore "
                                             "(LAKEHOUSE_METASTORE_URI)")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True)
    catalog_sub.add_parser("up", help="start it in the background (Derby under <local>/_catalog/), wait until it answers")
    catalog_sub.add_parser("down", help="stop the metastore `catalog up` started")
    catalog_sub.add_parser("serve", help="run the metastore in the foreground (a container's command)")
    catalog_sub.add_parser("sync", help="register or correct every table of the registry and the operational ones "
                                        "(idempotent; prints what it changed; never drops a table)")
    catalog_status = catalog_sub.add_parser("status", help="its URI, whether it answers, its backend and databases")
    catalog_status.add_argument("--json", action="store_true", help="as JSON")

    sql = sub.add_parser("sql", help="the SQL endpoint over the catalog: Spark's Thrift server (JDBC, "
                                     "LAKEHOUSE_SQL_PORT), read-only, behind a login")
    sql_sub = sql.add_subparsers(dest="sql_command", required=True)
    sql_sub.add_parser("up", help="start it in the background (the catalog must answer), wait until it answers; "
                                  "prints its JDBC URL, user and password")
    sql_sub.add_parser("down", help="stop the endpoint `sql up` started")
    sql_status = sql_sub.add_parser("status", help="its JDBC URL, whether it answers, its user")
    sql_status.add_argument("--json", action="store_true", help="as JSON")

    query = sub.add_parser("query", help="one read-only SQL statement over the catalog: through the SQL endpoint when "
                                         "it answers, else in a local session")
    query.add_argument("statement", help='e.g. "SELECT count(*) FROM gold.user_activity_5m"')
    query.add_argument("--format", dest="output", choices=("table", "csv", "json"), default="table",
                       help="table (default), csv with a header, or a JSON array of objects")

    storage = sub.add_parser("storage", help="the S3 server of a lakehouse on S3 (LAKEHOUSE_S3_ENDPOINT): SeaweedFS")
    storage_sub = storage.add_subparsers(dest="storage_command", required=True)
    storage_sub.add_parser("up", help="start it in the background (data under <local>/_s3/), create LAKEHOUSE_ROOT's "
                                      "bucket, wait until it answers")
    storage_sub.add_parser("down", help="stop the server `storage up` started")
    storage_status = storage_sub.add_parser("status", help="its endpoint, the root, whether it answers, the credentials")
    storage_status.add_argument("--json", action="store_true", help="as JSON")

    cluster = sub.add_parser("cluster", help="the production topology on this machine: PostgreSQL, Airflow's "
                                             "components, a Spark standalone master and workers, Kafka")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    cluster_up = cluster_sub.add_parser("up", help="start every part (each waited for until it answers)")
    cluster_up.add_argument("--workers", type=arguments.positive_int, default=2,
                            help="Spark workers, 1 core each (default 2)")
    cluster_up.add_argument("--storage", choices=("local", "s3"), default=None,
                            help="where the lakehouse lives: this machine's disk, or the S3 server started with the "
                                 "rest (LAKEHOUSE_ROOT if it is an S3 URI, else s3://lakehouse/cluster); default: as "
                                 "the running cluster, else LAKEHOUSE_ROOT's kind")
    cluster_status = cluster_sub.add_parser("status", help="each part, its address and whether it answers")
    cluster_status.add_argument("--json", action="store_true", help="as JSON (the logins too)")
    cluster_sub.add_parser("down", help="stop every part, in order; the data stays")

    stop = sub.add_parser("stop", help="ask a running job (or --all) to stop at its next batch boundary")
    stop.add_argument("job", nargs="?")
    stop.add_argument("--all", action="store_true", help="every running job (they stay stopped until started)")
    stop.add_argument("--reason", default="requested from the command line")
    stop.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the job to stop")
    return parser


def cmd_generate(settings: Settings, args: argparse.Namespace) -> int:
    from include.generator import DEFAULT_START

    registry = load_registry(settings.registry_path)
    sources = {j.source.name: j.source for j in registry.jobs.values() if j.source.kind in ("landing", "kafka")}
    if args.source not in sources:
        raise ValueError(f"unknown source {args.source!r}; the registry's landing and Kafka sources: {sorted(sources)}")
    config = GeneratorConfig(
        events=args.events, seed=args.seed, files=args.files, start=args.start or DEFAULT_START,
        events_per_minute=args.events_per_minute, users=args.users, duplicate_fraction=args.duplicate_fraction,
        out_of_order_fraction=args.out_of_order_fraction, late_fraction=args.late_fraction,
        malformed_fraction=args.malformed_fraction,
    )
    result = generate_into(settings, sources[args.source], config, args.to, args.partitions)
    sys.stdout.write(json.dumps(result.summary(), indent=2) + "\n")
    return 0


def generate_into(settings: Settings, source: SourceSpec, config: GeneratorConfig, to: str | None = None,
                  partitions: int = 3) -> GenerationResult:
    """The generator's records of `source` as landing files, or as messages on its topic (the default: what the
    source reads)."""
    from include.generator import produce_to_topic, write_landing

    to = to or ("kafka" if source.kind == "kafka" else "files")
    if to == "files":
        if source.kind != "landing":
            raise ValueError(f"source {source.name!r} reads Kafka topic(s) {source.path}, not files: use --to kafka")
        return write_landing(settings.layout.landing(source.path), source.name, config)
    if source.kind != "kafka":
        raise ValueError(f"source {source.name!r} reads landing files ({source.path}), not a topic: use --to files")
    from include.kafka.connection import bootstrap_servers

    return produce_to_topic(bootstrap_servers(settings, source.kafka.connection), source.kafka.topics[0],
                            source.name, config, partitions)


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.job_process import run

    return run(settings, args)


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """Generate every source, run the backfill, print the summary; a Kafka source's broker and the catalog are
    started first when none answers, and stopped again at the end."""
    from contextlib import ExitStack

    registry = load_registry(settings.registry_path)
    with ExitStack() as cleanup:
        if not settings.root.is_local:
            settings = cleanup.enter_context(store_for_demo(settings))
        settings.require_writable_root()
        if any(j.source.kind == "kafka" for j in registry.jobs.values()):
            cleanup.enter_context(broker_for_demo(settings))
        cleanup.enter_context(catalog_for_demo(settings))
        return run_demo(settings, registry, args)


def catalog_for_demo(settings: Settings):
    """A context in which the catalog answers when it can: the one running, or one started here (a local URI) and
    stopped on exit; one that cannot start is one line, and the demo runs without it."""
    from contextlib import contextmanager

    from include.catalog import metastore

    @contextmanager
    def running():
        try:
            started, message = metastore.up(settings)
        except metastore.CatalogError as exc:
            sys.stderr.write(f"lakehouse demo: running without a catalog: {exc}\n")
            yield
            return
        try:
            sys.stderr.write(message + "\n")
            yield
        finally:
            if started:
                sys.stderr.write(metastore.down(settings) + " (the demo started it)\n")

    return running()


def store_for_demo(settings: Settings):
    """A context in which the S3 root answers: the server running, or, for a local endpoint, one started here and
    stopped on exit; yields the settings (with the credentials a new server made)."""
    from contextlib import contextmanager

    from include.objectstore import server

    @contextmanager
    def running():
        local = settings.s3.endpoint and server.host_port(settings.s3.endpoint)[0] in ("127.0.0.1", "localhost")
        if not local or server.answers(settings.s3):
            yield settings
            return
        started, message = server.up(settings)
        try:
            sys.stderr.write(message + "\n")
            yield load_settings()
        finally:
            if started:
                sys.stderr.write(server.down(settings) + " (the demo started it)\n")

    return running()


def broker_for_demo(settings: Settings):
    """A context in which a Kafka broker answers: the one running, or one started here and stopped on exit."""
    from contextlib import contextmanager

    from include.kafka import broker
    from include.kafka.connection import bootstrap_servers

    @contextmanager
    def running():
        started, message = broker.up(settings, bootstrap_servers(settings))
        try:  # from here on, what it started is stopped whatever happens (a closed stderr included)
            sys.stderr.write(message + "\n")
            yield
        finally:
            if started:
                sys.stderr.write(broker.down(settings) + " (the demo started it)\n")

    return running()


def run_demo(settings: Settings, registry: Registry, args: argparse.Namespace) -> int:
    from include.summary import summarize
    from spark_jobs.driver import install_stop_handler

    stop = install_stop_handler()
    sources = {j.source.name: j.source for j in registry.jobs.values() if j.source.kind in ("landing", "kafka")}
    for _, source in sorted(sources.items()):
        generate_into(settings, source, GeneratorConfig(events=args.events, seed=args.seed, files=args.files))
    if args.direct:
        from spark_jobs.job_process import run

        if stop.is_set():
            return 0
        every_job = argparse.Namespace(jobs=list(registry.order), group=None, trigger=Trigger(available_now=True),
                                       shuffle_partitions=None, outcomes=None)
        code = run(settings, every_job)  # in one driver, one after another, as the backfill's run_jobs does
        if code:
            sys.stderr.write(f"lakehouse demo: not every job finished (exit {code}); their lines are above\n")
            return code
        from include.quality import run_quality

        sys.stdout.write(run_quality(settings, registry).render() + "\n")
        from include.ops.health_report import build

        build(settings, registry)  # through Airflow, the DAG's health_report task builds it
        failed_step = None
    else:
        failed_step = demo_through_airflow(settings)
        log_file = settings.layout.demo_log
        if failed_step:
            tail = "".join(log_file.read_text().splitlines(keepends=True)[-40:])
            sys.stderr.write(f"{tail}\nlakehouse demo: `airflow {' '.join(failed_step)}` failed; log: {log_file}\n")
    sys.stdout.write("\n" + summarize(settings, registry).render() + "\n")
    sys.stdout.write(f"\nlakehouse root: {settings.root}\n")
    if settings.layout.health_report_index.is_file():
        sys.stdout.write(f"pipeline-health report: {settings.layout.health_report_index}\n")
    return 1 if failed_step else 0


def demo_through_airflow(settings: Settings) -> list[str] | None:
    """`airflow db migrate` and the Spark pool, then `airflow dags test lakehouse_backfill`, writing a line per
    task as the run goes; returns the failed step, or None."""
    from include.airflow.environment import (
        airflow_environment,
        airflow_home,
        run_airflow,
        setup_steps,
        start_airflow,
    )

    log_file = settings.layout.demo_log
    sys.stderr.write(f"running lakehouse_backfill through Airflow (AIRFLOW_HOME={airflow_home()}); log: {log_file}\n")
    for step in setup_steps(settings):
        if run_airflow(settings, step, log_file) != 0:
            return step
    os.environ.update(airflow_environment(settings))  # this process reads the run's progress from Airflow's DB
    from include.airflow import run_follower

    started = time.monotonic()
    before = run_follower.latest_run_id("lakehouse_backfill")
    step = ["dags", "test", "lakehouse_backfill"]
    process = start_airflow(settings, step, log_file)
    run_follower.follow("lakehouse_backfill", before, process, sys.stderr)
    sys.stderr.write(f"lakehouse_backfill {'succeeded' if process.returncode == 0 else 'FAILED'} in "
                     f"{time.monotonic() - started:.0f} s\n")
    return step if process.returncode != 0 else None


def cmd_airflow_setup(settings: Settings, args: argparse.Namespace) -> int:
    """`airflow db migrate` and the `lakehouse_spark` pool (what `make airflow` and `lakehouse demo` run first)."""
    from include.airflow.environment import run_airflow, setup_steps

    for step in setup_steps(settings):
        code = run_airflow(settings, step)
        if code != 0:
            sys.stderr.write(f"lakehouse airflow-setup: `airflow {' '.join(step)}` failed (exit {code})\n")
            return code
    return 0


def cmd_airflow(settings: Settings, args: argparse.Namespace) -> int:
    from include.airflow.environment import airflow_command, airflow_environment

    command = airflow_command() + list(args.airflow_args)
    env = airflow_environment(settings)
    if args.airflow_args[:1] == ["standalone"]:  # say where the UI and its login are, whichever route started it
        home = env.get("AIRFLOW_HOME", "airflow_home")
        url = env.get("AIRFLOW__API__BASE_URL", "http://localhost:8080")
        sys.stderr.write(f"Airflow UI: {url}  (user: admin; the password is printed by 'standalone' below and kept "
                         f"in {home}/simple_auth_manager_passwords.json.generated)\n")
    os.execvpe(command[0], command, env)
    return 1  # not reached


def cmd_airflow_history(settings: Settings, args: argparse.Namespace) -> int:
    from include.airflow.history import clean_history, keep_cleaning

    if args.every:
        keep_cleaning(settings, args.every)
    sys.stdout.write(clean_history(settings).render() + "\n")
    return 0


def cmd_summary(settings: Settings, args: argparse.Namespace) -> int:
    from include.summary import summarize

    sys.stdout.write(summarize(settings, load_registry(settings.registry_path)).render() + "\n")
    return 0


def cmd_quality(settings: Settings, args: argparse.Namespace) -> int:
    from include.quality import run_quality

    report = run_quality(settings, load_registry(settings.registry_path), args.tables or None, full=args.full)
    sys.stdout.write(report.render() + "\n")
    return 1 if report.blocking_failures else 0


def cmd_checkpoint(settings: Settings, args: argparse.Namespace) -> int:
    registry = load_registry(settings.registry_path)
    if args.checkpoint_command == "plan":
        from include.checkpoints.plan import plan_job

        plans = [plan_job(registry.job(j), registry, settings.layout.checkpoint(j), settings=settings) for j in args.jobs or registry.order]
        text = (json.dumps([p.as_dict() for p in plans], indent=2, default=str) if args.json
                else "\n".join(p.render() for p in plans))
        sys.stdout.write(text + "\n")
        return 0
    if args.checkpoint_command == "inspect":
        from include.checkpoints import inspect

        job = registry.job(args.job)
        operators = None
        if not args.no_state:
            from include.spark_session import get_spark
            from spark_jobs.state_inspect import state_operators

            operators = state_operators(get_spark(settings, app_name="lakehouse-inspect"),
                                        settings.layout.checkpoint(job.id))
        report = inspect.inspect(settings, registry, job, operators)
        sys.stdout.write((json.dumps(report, indent=2, default=str) if args.json else inspect.render(report)) + "\n")
        return 0
    from spark_jobs.checkpoint_actions import run_request

    return run_request(settings, from_args(args.checkpoint_command, args))


def cmd_state(settings: Settings, args: argparse.Namespace) -> int:
    from include.spark_session import get_spark
    from spark_jobs.state_inspect import StateUnavailable, inspect_state, render

    registry = load_registry(settings.registry_path)
    registry.job(args.job)  # an unknown job fails before Spark starts
    try:
        report = inspect_state(get_spark(settings, app_name="lakehouse-state"), settings, registry, args.job,
                               args.changes)
    except StateUnavailable as exc:
        sys.stdout.write(f"{exc}\n")
        return 0
    sys.stdout.write((json.dumps(report, indent=2, default=str) if args.json else render(report)) + "\n")
    return 0


def cmd_schema(settings: Settings, args: argparse.Namespace) -> int:
    from include.spark_session import get_spark
    from spark_jobs.rescued_backfill import backfill, backfill_jobs, fill_columns, render

    registry = load_registry(settings.registry_path)
    fill_columns(backfill_jobs(registry, args.job)[0], args.columns)  # bad input fails before Spark starts
    report = backfill(get_spark(settings, app_name="lakehouse-schema-backfill"), settings, registry, args.job,
                      args.columns, dry_run=args.dry_run)
    sys.stdout.write(render(report, args.dry_run) + "\n")
    return 0


def cmd_maintain(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.table_maintenance import run

    return run(settings, args.tables)


def cmd_stop(settings: Settings, args: argparse.Namespace) -> int:
    from include.ops import lease
    from include.ops.processes import stop_job, stop_jobs

    registry = load_registry(settings.registry_path)
    if bool(args.all) == bool(args.job):
        raise ValueError("name one job, or --all" if not args.all else "name one job or --all, not both")
    if args.all:
        running = [j for j in registry.order if lease.is_held(settings, j)
                   and not (lease.read_lease(settings, j) or {}).get("action")]  # an action ends by itself
        left = stop_jobs(settings, running, args.reason, wait_seconds=args.wait)
        for job_id in running:
            sys.stdout.write(f"{job_id}: {'stop requested' if job_id in left else 'stopped'}\n")
        if not running:
            sys.stdout.write("no job runs\n")
        return 1 if left and args.wait else 0
    stopped = stop_job(settings, registry.job(args.job).id, args.reason, wait_seconds=args.wait)
    sys.stdout.write(f"{args.job}: {'stopped' if stopped else 'stop requested'}\n")
    return 0 if stopped or not args.wait else 1


def cmd_health(settings: Settings, args: argparse.Namespace) -> int:
    from include.ops import health_report

    registry = load_registry(settings.registry_path)
    sys.stdout.write(health_report.render_table(health_report.health_rows(settings, registry)) + "\n")
    if args.report:
        sys.stdout.write(f"pipeline-health report: {health_report.build(settings, registry)}\n")
    return 0


def cmd_kafka(settings: Settings, args: argparse.Namespace) -> int:
    from include.kafka import broker
    from include.kafka.connection import bootstrap_servers

    bootstrap = bootstrap_servers(settings)
    try:
        if args.kafka_command == "up":
            _, message = broker.up(settings, bootstrap)
            sys.stderr.write(message + "\n")
            sys.stdout.write(bootstrap + "\n")
            return 0
        if args.kafka_command == "down":
            sys.stdout.write(broker.down(settings) + "\n")
            return 0
        topics = broker.list_topics(bootstrap)
    except broker.BrokerError as exc:
        sys.stderr.write(f"lakehouse kafka {args.kafka_command}: {exc}\n")
        return 1
    lines = [f"Kafka broker answers at {bootstrap}: {len(topics)} topic(s)"]
    lines += [f"  {t.name}: {t.partitions} partition(s)" for t in topics]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def cmd_catalog(settings: Settings, args: argparse.Namespace) -> int:
    from include.catalog import metastore

    try:
        if args.catalog_command == "up":
            _, message = metastore.up(settings)
            sys.stderr.write(message + "\n")
            sys.stdout.write(settings.metastore_uri + "\n")
            return catalog_sync(settings) if settings.root.exists() else 0
        if args.catalog_command == "down":
            sys.stdout.write(metastore.down(settings) + "\n")
            return 0
        if args.catalog_command == "serve":
            metastore.serve(settings)  # does not return
        if args.catalog_command == "sync":
            metastore.databases(settings.metastore_uri)  # one line when none answers, before a Spark driver starts
            return catalog_sync(settings)
    except metastore.CatalogError as exc:
        sys.stderr.write(f"lakehouse catalog {args.catalog_command}: {exc}\n")
        return 1
    info = metastore.status(settings)
    if args.json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        sys.stdout.write(metastore.render(info) + "\n")
    return 0 if info["up"] else 1


def catalog_sync(settings: Settings) -> int:
    """`lakehouse catalog sync`: every table by name, through a Spark session on the catalog (none started while no
    table exists yet)."""
    from include.catalog.tables import is_delta_table, named_tables, on_catalog, register
    from include.spark_session import get_spark

    tables = named_tables(settings, load_registry(settings.registry_path))
    if not any(is_delta_table(t.location) for t in tables):
        sys.stdout.write("catalog in sync: no table of the lakehouse exists yet (each job names its tables when it "
                         "creates them)\n")
        return 0
    spark = get_spark(settings, app_name="lakehouse-catalog-sync")
    if not on_catalog(spark):
        sys.stderr.write(f"lakehouse catalog sync: no catalog answers at {settings.metastore_uri}\n")
        return 1
    changes = register(spark, settings, tables)
    sys.stdout.write("\n".join(changes) + "\n" if changes else "catalog in sync: every table of the lakehouse is "
                                                                 "named\n")
    return 0


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    from include.catalog import sql_endpoint

    try:
        if args.sql_command == "up":
            _, message = sql_endpoint.up(settings)
            sys.stderr.write(message + "\n")
            sys.stdout.write(f"{sql_endpoint.jdbc_url(settings)}\nuser: {settings.sql_user}\n"
                             f"password: {sql_endpoint.password(settings)}\n")
            return 0
        if args.sql_command == "down":
            sys.stdout.write(sql_endpoint.down(settings) + "\n")
            return 0
    except sql_endpoint.EndpointError as exc:
        sys.stderr.write(f"lakehouse sql {args.sql_command}: {exc}\n")
        return 1
    info = sql_endpoint.status(settings)
    if args.json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        sys.stdout.write(f"SQL endpoint {info['jdbc_url']}: {'answers' if info['up'] else 'does not answer'} "
                         f"(user {info['user']})\n")
    return 0 if info["up"] else 1


def cmd_query(settings: Settings, args: argparse.Namespace) -> int:
    from include.catalog.query import QueryError, render, run_query

    try:
        result = run_query(settings, args.statement)
    except QueryError as exc:
        sys.stderr.write(f"lakehouse query: {exc}\n")
        return 1
    sys.stdout.write(render(result, args.output) + "\n")
    return 0


def cmd_storage(settings: Settings, args: argparse.Namespace) -> int:
    from include.objectstore import server

    try:
        if args.storage_command == "up":
            _, message = server.up(settings)
            sys.stderr.write(message + "\n")
            info = server.status(load_settings())  # with the credentials `up` may just have made
            sys.stdout.write(f"{info['endpoint']}\naccess key id: {info['access_key_id']}\n"
                             f"secret access key: {info['secret_access_key']}\n")
            return 0
        if args.storage_command == "down":
            sys.stdout.write(server.down(settings) + "\n")
            return 0
    except server.StorageError as exc:
        sys.stderr.write(f"lakehouse storage {args.storage_command}: {exc}\n")
        return 1
    info = server.status(settings)
    if args.json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        sys.stdout.write(f"S3 server at {info['endpoint']}: {'answers' if info['up'] else 'does not answer'}\n"
                         f"lakehouse root: {info['root']}\naccess key id: {info['access_key_id'] or '-'}\n"
                         f"data (a server `storage up` started here): {info['data']}\n")
    return 0 if info["up"] else 1


def cmd_cluster(settings: Settings, args: argparse.Namespace) -> int:
    from include.cluster import manager
    from include.cluster.postgres import ClusterError

    try:
        if args.cluster_command == "up":
            sys.stdout.write("\n".join(manager.up(settings, args.workers, args.storage)) + "\n")
        elif args.cluster_command == "down":
            sys.stdout.write("\n".join(manager.down(settings)) + "\n")
        else:
            info = manager.status(settings)
            sys.stdout.write((json.dumps(info, indent=2) if args.json else manager.render(info)) + "\n")
    except ClusterError as exc:
        sys.stderr.write(f"lakehouse cluster {args.cluster_command}: {exc}\n")
        return 1
    return 0


COMMANDS = {
    "generate": cmd_generate, "run": cmd_run, "demo": cmd_demo, "summary": cmd_summary, "stop": cmd_stop,
    "airflow": cmd_airflow, "airflow-setup": cmd_airflow_setup, "airflow-history": cmd_airflow_history,
    "quality": cmd_quality, "maintain": cmd_maintain, "checkpoint": cmd_checkpoint, "schema": cmd_schema,
    "state": cmd_state, "health": cmd_health, "kafka": cmd_kafka, "cluster": cmd_cluster, "storage": cmd_storage,
    "catalog": cmd_catalog, "sql": cmd_sql, "query": cmd_query,
}
# Commands that start or stop servers, or touch only Airflow: they run whatever the state of an S3 root (`demo`
# starts its store first)
WITHOUT_ROOT = ("storage", "kafka", "catalog", "sql", "query", "cluster", "demo", "airflow-history")


def prints_a_report(args: argparse.Namespace) -> bool:
    """Commands whose output is a report on stdout (their INFO lines would only come before it)."""
    return args.command in ("summary", "quality", "state", "health", "kafka", "catalog", "sql", "query", "cluster",
                            "storage", "schema") or (
        args.command == "checkpoint" and args.checkpoint_command in ("plan", "inspect"))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
        if args.command not in WITHOUT_ROOT:
            settings.require_writable_root()
    except ValueError as exc:
        sys.stderr.write(f"lakehouse: {exc}\n")
        return 2
    if prints_a_report(args) and "LAKEHOUSE_LOG_LEVEL" not in os.environ:
        settings = replace(settings, log_level="WARNING")  # the report alone, unless logs are asked for
    configure_logging(settings)
    try:
        return COMMANDS[args.command](settings, args)
    except Exception as exc:
        return report_failure(f"lakehouse {args.command}", exc)


if __name__ == "__main__":
    sys.exit(main())
