"""`lakehouse cluster up | status | down`: start the production topology's parts in order, each waited for until it
answers; stop them in the reverse order; report each part's address and whether it answers."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from include.airflow.environment import run_airflow, setup_steps
from include.catalog import metastore
from include.cdc import chain, connect
from include.cdc.database import CdcError, CdcRefused
from include.cluster import airflow_services, postgres, spark_standalone
from include.cluster.postgres import ClusterError
from include.cluster.topology import AIRFLOW_USER, HOST, POSTGRES_DATABASE, POSTGRES_USER, Topology, topology
from include.daemons import port_taken
from include.kafka import broker
from include.monitor import stack as monitor
from include.monitor.configs import MonitorError
from include.objectstore import server
from include.registry import load_registry
from include.settings import Settings
from include.storage.s3 import kept_credentials

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 240.0


@dataclass
class Started:
    """What this `up` started, stopped again if a later part fails."""

    top: Topology
    settings: Settings
    parts: list[str]


def wait_until(check: Callable[[], bool], part: str, timeout: float = START_TIMEOUT_SECONDS,
               died: Callable[[], str | None] = lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        why = died()
        if why:
            raise ClusterError(f"{part}: exited at start: {why}")
        time.sleep(0.5)
    raise ClusterError(f"{part}: did not answer within {timeout:.0f} s")


def _require_free(part: str, port: int) -> None:
    if port_taken(HOST, port):
        raise ClusterError(f"{part}: port {port} on {HOST} is taken by another program (free it, or set "
                           "LAKEHOUSE_CLUSTER_PORTS=postgres,airflow,spark_ui[,spark_master])")


def _died(daemon) -> Callable[[], str | None]:
    """Why the part is no more: it exited (or, under a keeper, exited and is being started again)."""
    return lambda: (None if daemon.running_pid() and not daemon.restarted()
                    else f"{daemon.last_error()} (log {daemon.log_file})")


S3_CLUSTER_ROOT = "s3://lakehouse/cluster"  # `--storage s3` when LAKEHOUSE_ROOT is a local path


def up(settings: Settings, workers: int = 2, storage: str | None = None) -> list[str]:
    """Start every part not yet running; lines saying what runs where. On a failure, stop what this call started
    and raise ClusterError naming the part. `storage`: `local` (LAKEHOUSE_ROOT on this machine's disk) or `s3` (the
    S3 server of include/objectstore started with the rest, every part pointed at it: LAKEHOUSE_ROOT if it is an S3
    URI, else S3_CLUSTER_ROOT); default: what the running cluster uses, else the root's own kind."""
    if workers < 1:
        raise ClusterError(f"--workers must be at least 1, got {workers}")
    top = topology(settings, workers)
    recorded = read_state(top)
    if recorded and recorded.get("workers") and recorded["workers"] != workers and _any_running(top, recorded):
        raise ClusterError(f"the cluster runs with {recorded['workers']} workers: `lakehouse cluster down` first to "
                           f"change it to {workers}")
    storage = storage or (recorded or {}).get("storage") or ("local" if settings.root.is_local else "s3")
    for directory in (top.home, top.logs, top.run, top.spark_dir):
        directory.mkdir(parents=True, exist_ok=True)
    started = Started(top, settings, [])
    try:
        if storage == "s3":
            started.settings = settings = _up_storage(started)
        _up_postgres(started)
        _up_catalog(started)
        kafka_started = _up_kafka(started)
        _up_cdc(started)
        _up_spark(started)
        _up_airflow(started)
        _up_monitor(started)
    except Exception:
        _stop(top, settings, started.parts)
        raise
    state = {"workers": workers, "lakehouse_root": str(settings.root), "storage": storage,
             "kafka_started": kafka_started or bool(recorded and recorded.get("kafka_started")),
             "storage_started": "s3" in started.parts or bool(recorded and recorded.get("storage_started")),
             "catalog_started": "catalog" in started.parts or bool(recorded and recorded.get("catalog_started")),
             "cdc_started": "cdc" in started.parts or bool(recorded and recorded.get("cdc_started")),
             "monitor_started": "monitor" in started.parts or bool(recorded and recorded.get("monitor_started"))}
    top.state_file.write_text(json.dumps(state, indent=2) + "\n")
    info = status(settings)
    return [f"cluster up ({', '.join(started.parts) or 'everything was already running'} started)",
            f"Airflow UI: {info['airflow_url']}  (user {info['airflow_user']}, password {info['airflow_password']})",
            f"Spark master: {info['spark_master']}  (UI {info['spark_master_ui']}, {workers} workers)",
            f"PostgreSQL: {HOST}:{top.ports.postgres} database {POSTGRES_DATABASE}",
            f"catalog: {info['catalog']['uri']} ({info['catalog']['backend']})",
            f"Kafka: {info['kafka_bootstrap']}", f"Prometheus: {info['prometheus_url']}  (Alertmanager "
            f"{info['alertmanager_url']}, metrics {info['metrics_url']})", f"lakehouse: {settings.root}"
            + (f" (S3 at {settings.s3.endpoint or 'AWS'})" if storage == "s3" else ""), f"logs: {top.logs}"]


def cluster_settings(settings: Settings) -> Settings:
    """The settings of the cluster's parts: the lakehouse root it was started with (an S3 root, with the credentials
    its server keeps), whatever LAKEHOUSE_ROOT says in this shell."""
    state = read_state(topology(settings)) or {}
    if state.get("storage") != "s3":
        return settings
    return _s3_settings(replace(settings, root=state["lakehouse_root"]))


def _s3_settings(settings: Settings) -> Settings:
    """`settings` on an S3 root (S3_CLUSTER_ROOT unless LAKEHOUSE_ROOT is one), with the credentials of the S3
    server `lakehouse storage up` keeps when none are given."""
    root = settings.root if not settings.root.is_local else S3_CLUSTER_ROOT
    s3 = settings.s3
    kept = None if s3.access_key_id else kept_credentials(settings.layout.s3_server)
    if kept:
        s3 = replace(s3, access_key_id=kept[0], secret_access_key=kept[1])
    return replace(settings, root=str(root), s3=s3, local_dir=settings.local)


def _up_storage(started: Started) -> Settings:
    """The S3 server (include/objectstore/server.py), unless one answers; the settings pointed at it."""
    settings = _s3_settings(started.settings)
    try:
        made, _ = server.up(settings)
    except server.StorageError as exc:
        raise ClusterError(f"s3: {exc}") from exc
    if made:
        started.parts.append("s3")
    return _s3_settings(settings)


def _up_postgres(started: Started) -> None:
    top = started.top
    if not postgres.running(top):
        _require_free("postgres", top.ports.postgres)
        postgres.initialize(top)
        postgres.start(top)
        started.parts.append("postgres")
        wait_until(lambda: postgres.answers(top), "postgres", 60)
    postgres.ensure_database(top)  # a cluster made before the catalog gets its database too


def catalog_settings(settings: Settings, top: Topology) -> Settings:
    """The settings of the cluster's catalog: the metastore keeps its tables in the cluster's PostgreSQL."""
    return replace(settings, metastore_db=top.metastore_db())


def _up_catalog(started: Started) -> None:
    """The Hive metastore on the cluster's PostgreSQL (database `metastore`), unless one answers at the URI."""
    try:
        made, _ = metastore.up(catalog_settings(started.settings, started.top))
    except metastore.CatalogError as exc:
        raise ClusterError(f"catalog: {exc}") from exc
    if made:
        started.parts.append("catalog")


def _up_kafka(started: Started) -> bool:
    try:
        made, _ = broker.up(started.settings, started.settings.kafka_bootstrap)
    except broker.BrokerError as exc:
        raise ClusterError(f"kafka: {exc}") from exc
    if made:
        started.parts.append("kafka")
    return made


def _up_cdc(started: Started) -> None:
    """The change data capture chain (include/cdc) when the registry captures a database (`cdc:` sources): its
    database (the local one unless LAKEHOUSE_CDC_DATABASE_URL names one), the Connect worker on the cluster's broker,
    a publication and a connector per logical database."""
    settings, registry = started.settings, load_registry(started.settings.registry_path)
    if not registry.cdc_sources():
        return
    worker_ran = connect.answers(settings.connect_url)
    try:
        chain.up(settings, registry, settings.kafka_bootstrap)
    except (CdcError, CdcRefused) as exc:
        raise ClusterError(f"cdc: {exc}") from exc
    if not worker_ran:
        started.parts.append("cdc")


def _up_monitor(started: Started) -> None:
    """Prometheus and Alertmanager on the lakehouse's metrics (`lakehouse monitor up`): a part of the cluster when
    this call started its endpoint."""
    try:
        lines = monitor.up(started.settings)
    except MonitorError as exc:
        raise ClusterError(f"monitor: {exc}") from exc
    if not lines[0].startswith((f"{monitor.ENDPOINT.name}: already answers", f"{monitor.ENDPOINT.name}: runs")):
        started.parts.append("monitor")


def _up_spark(started: Started) -> None:
    top = started.top
    master = spark_standalone.master_daemon(top)
    if not master.running_pid():
        _require_free("spark-master", top.ports.spark_master)
        _require_free("spark-master UI", top.ports.spark_master_ui)
        spark_standalone.start_master(top)
        started.parts.append("spark-master")
    wait_until(lambda: (spark_standalone.master_state(top) or {}).get("status") == "ALIVE", "spark-master",
               died=_died(master))
    for number in range(1, top.workers + 1):
        worker = spark_standalone.worker_daemon(top, number)
        if worker.running_pid():
            continue
        _require_free(f"spark-worker-{number} UI", top.ports.spark_master_ui + number)
        spark_standalone.start_worker(top, number)
        started.parts.append(f"spark-worker-{number}")
    wait_until(lambda: spark_standalone.alive_workers(spark_standalone.master_state(top)) >= top.workers,
               "spark workers")


def _up_airflow(started: Started) -> None:
    top, settings = started.top, started.settings
    airflow_services.write_files(top)
    env = airflow_services.environment(settings, top)
    if not all(airflow_services.daemon(top, c).running_pid() for c in airflow_services.COMPONENTS):
        setup_log = top.logs / "airflow-setup.log"
        for step in setup_steps(settings):
            if run_airflow(settings, step, setup_log, env) != 0:
                raise ClusterError(f"airflow: `airflow {' '.join(step)}` failed (log {setup_log})")
    for component in airflow_services.COMPONENTS:
        service = airflow_services.daemon(top, component)
        if service.running_pid():
            continue
        if component == "api-server":
            _require_free("airflow api-server", top.ports.airflow)
        airflow_services.start(settings, top, component)
        started.parts.append(f"airflow-{component}")
    for component in airflow_services.COMPONENTS:
        service = airflow_services.daemon(top, component)
        # one already running may be between two runs under its keeper: waited for, not failed
        died = _died(service) if service.name in started.parts else lambda: None
        wait_until(lambda c=component: airflow_services.answers(top, c, airflow_services.health(top)),
                   f"airflow-{component}", died=died)


def down(settings: Settings) -> list[str]:
    """Stop every part, the monitoring and Airflow first (no new tasks), then Spark, the CDC chain (when `up` started it), Kafka (likewise),
    PostgreSQL last. Data stays: the lakehouse, PostgreSQL's data, the broker's topics, the replication slots."""
    top = topology(settings)
    state = read_state(top) or {}
    parts = (["monitor"] if state.get("monitor_started") else []) + [f"airflow-{c}" for c in airflow_services.COMPONENTS]
    parts += [f"spark-worker-{n}" for n in range(1, int(state.get("workers") or _recorded_workers(top)) + 1)]
    parts += ["spark-master"] + (["catalog"] if state.get("catalog_started") else [])
    parts += ["cdc"] if state.get("cdc_started") else []
    parts += (["kafka"] if state.get("kafka_started") else []) + ["postgres"]
    parts += ["s3"] if state.get("storage_started") else []
    settings = cluster_settings(settings)
    stopped = _stop(top, settings, parts)
    return [f"stopped: {', '.join(stopped)}" if stopped else "nothing of the cluster was running",
            f"data kept: {settings.root} (PostgreSQL's in {top.postgres_data})"]


def _recorded_workers(top: Topology) -> int:
    return len(list(top.run.glob("spark-worker-*.pid"))) if top.run.is_dir() else 0


def _stop(top: Topology, settings: Settings, parts: list[str]) -> list[str]:
    """Stop `parts` in the cluster's stop order; the ones that ran."""
    order = (["monitor"] + [f"airflow-{c}" for c in ("history", "scheduler", "triggerer", "dag-processor", "api-server")]
             + sorted((p for p in parts if p.startswith("spark-worker-")), reverse=True)
             + ["spark-master", "cdc", "catalog", "kafka", "postgres", "s3"])
    stopped = []
    for part in (p for p in order if p in parts):
        if part == "monitor":
            ran = any(line.endswith(")") and ": stopped" in line for line in monitor.down(settings))
        elif part == "postgres":
            ran = postgres.stop(top)
        elif part == "s3":
            ran = "stopped" in server.down(settings)
        elif part == "catalog":
            ran = metastore.down(settings).startswith("catalog stopped")
        elif part == "cdc":  # the worker and the local database; the slots stay (`lakehouse cdc down --purge`)
            ran = connect.down(settings).startswith("Kafka Connect worker stopped")
            chain.stop_local_database(settings)
        elif part == "kafka":
            ran = broker.running_pid(broker.BrokerFiles(settings.layout.kafka)) is not None
            broker.down(settings)
        else:
            ran = _daemon(top, part).stop(timeout=60) is not None
        if ran:
            stopped.append(part)
    return stopped


def _daemon(top: Topology, part: str):
    if part.startswith("airflow-"):
        return airflow_services.daemon(top, part.removeprefix("airflow-"))
    if part == "spark-master":
        return spark_standalone.master_daemon(top)
    return spark_standalone.worker_daemon(top, int(part.rsplit("-", 1)[1]))


def _any_running(top: Topology, state: dict) -> bool:
    return postgres.running(top) or spark_standalone.master_daemon(top).running_pid() is not None


def read_state(top: Topology) -> dict | None:
    try:
        return json.loads(top.state_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def status(settings: Settings) -> dict:
    """Each part's address and whether it answers, with the logins (`lakehouse cluster status --json`)."""
    top = topology(settings)
    state = read_state(top) or {}
    top = topology(settings, int(state.get("workers") or 2))
    settings = cluster_settings(settings)
    keys = top.secrets() if (top.home / "secrets.json").exists() else {}
    spark_state = spark_standalone.master_state(top)
    alive = {w.get("webuiaddress", "").rsplit(":", 1)[-1] for w in (spark_state or {}).get("workers", [])
             if w.get("state") == "ALIVE"}
    report = airflow_services.health(top)
    parts = {"postgres": {"address": f"{HOST}:{top.ports.postgres}", "up": postgres.answers(top)}}
    for component in airflow_services.COMPONENTS:
        restarts = airflow_services.daemon(top, component).restarts()
        parts[f"airflow-{component}"] = {"address": top.airflow_url if component == "api-server" else None,
                                         "up": airflow_services.answers(top, component, report),
                                         "restarts": len(restarts), "last_restart": restarts[-1] if restarts else None}
    parts["spark-master"] = {"address": top.spark_master, "ui": top.spark_master_ui,
                             "up": (spark_state or {}).get("status") == "ALIVE"}
    for number in range(1, top.workers + 1):
        port = top.ports.spark_master_ui + number
        parts[f"spark-worker-{number}"] = {"address": f"{HOST}:{port}", "up": str(port) in alive}
    kafka_up = broker.answers(settings.kafka_bootstrap, timeout=2.0)
    parts["kafka"] = {"address": settings.kafka_bootstrap, "up": kafka_up}
    if state.get("cdc_started"):
        parts["cdc"] = {"address": settings.connect_url, "up": connect.answers(settings.connect_url, timeout=2.0)}

    catalog = metastore.status(catalog_settings(settings, top) if keys else settings)
    parts["catalog"] = {"address": catalog["uri"], "up": catalog["up"]}
    monitoring = monitor.status(settings)
    if state.get("monitor_started"):
        parts["monitor"] = {"address": monitoring["prometheus_url"], "up": monitoring["up"]}
    return {
        "airflow_url": top.airflow_url,
        "airflow_user": AIRFLOW_USER,
        "airflow_password": keys.get("airflow_password"),
        "spark_master": top.spark_master,
        "spark_master_ui": top.spark_master_ui,
        "postgres": {"host": HOST, "port": top.ports.postgres, "database": POSTGRES_DATABASE, "user": POSTGRES_USER,
                     "password": keys.get("airflow_db_password")},
        "kafka_bootstrap": settings.kafka_bootstrap if kafka_up else None,
        "lakehouse_root": str(settings.root),
        "storage": storage_status(settings),
        "catalog": catalog,
        **{key: monitoring[key] for key in ("prometheus_url", "alertmanager_url", "metrics_url")},
        "logs": str(top.logs),
        "parts": parts,
    }


def storage_status(settings: Settings) -> dict:
    """Where the cluster's lakehouse lives: `endpoint` (None: a local disk), `root`, `up` (it answers)."""
    if settings.root.is_local:
        return {"endpoint": None, "root": str(settings.root), "up": True}

    return {"endpoint": settings.s3.endpoint or "aws", "root": str(settings.root), "up": server.answers(settings.s3)}


def render(info: dict) -> str:
    width = max(len(p) for p in info["parts"])
    lines = [f"{name:<{width}}  {'up  ' if part['up'] else 'DOWN'}  {part.get('address') or ''}"
             + (f"  restarted {part['restarts']} times, last: {part['last_restart']}" if part.get("restarts") else "")
             for name, part in info["parts"].items()]
    storage = info["storage"]
    if storage["endpoint"]:
        lines.append(f"{'s3':<{width}}  {'up  ' if storage['up'] else 'DOWN'}  {storage['endpoint']}")
    lines += [f"Airflow UI: {info['airflow_url']}  (user {info['airflow_user']}, password {info['airflow_password']})",
              f"lakehouse: {info['lakehouse_root']}  logs: {info['logs']}"]
    return "\n".join(lines)
