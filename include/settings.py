"""One settings object for the whole project, read from documented environment variables.

| variable                         | default                         | meaning                                   |
|----------------------------------|---------------------------------|-------------------------------------------|
| LAKEHOUSE_ROOT                   | <repo>/lakehouse                | landing, tables, checkpoints, ops, reports: a local path or an S3 URI (s3://bucket/prefix, s3a:// too) |
| LAKEHOUSE_S3_ENDPOINT            | http://127.0.0.1:8333           | the S3 API of an S3 root that is not AWS (path-style access); `lakehouse storage up` listens there; `aws`: AWS S3 itself |
| AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION | unset, unset, us-east-1 | the S3 credentials and region (AWS's own variables); unset with a local endpoint: those `lakehouse storage up` made and keeps |
| LAKEHOUSE_LEASE_SECONDS          | 60                              | on an S3 root: how long a writer's lease outlives its last renewal (renewed every third of it; a holder that cannot renew for half of it stops committing); a SIGKILLed driver's job can start again on another host after at most this, on its own host at once |
| LAKEHOUSE_HOST_NAME              | the OS's host name              | this host's name in lease records (hosts that share a name; a test standing in for another host) |
| LAKEHOUSE_LOCAL_DIR              | LAKEHOUSE_ROOT if local, else <repo>/lakehouse | this host's own files: the servers' data (_kafka, _cluster, _s3), live drivers' logs, working copies |
| LAKEHOUSE_REGISTRY               | include/jobs.yaml               | the job registry                          |
| LAKEHOUSE_SPARK_MASTER           | local[2]                        | master when not under spark-submit        |
| LAKEHOUSE_SPARK_DRIVER_MEMORY    | 2g                              | driver memory of every driver (spark-submit's too), unless the registry's `resources.driver_memory` says |
| LAKEHOUSE_SPARK_UI               | 0                               | 1 enables the Spark UI                    |
| LAKEHOUSE_SPARK_JAVA_OPTIONS     | unset                           | more JVM options of every Spark driver (e.g. `-XX:TieredStopAtLevel=1`: quicker starts of short runs) |
| LAKEHOUSE_LOG_LEVEL              | INFO                            | Python log level (the project's lines)    |
| LAKEHOUSE_SPARK_LOG_LEVEL        | WARN                            | Spark's (JVM) log level: TRACE..OFF       |
| LAKEHOUSE_STOP_GRACE_SECONDS     | 120                             | wait for a batch to end on SIGTERM        |
| LAKEHOUSE_TASK_RETRIES           | 2                               | Airflow retries of the lakehouse tasks    |
| LAKEHOUSE_SPARK_POOL_SLOTS       | cores / 2, at least 1           | Spark tasks Airflow runs at once (pool `lakehouse_spark`) |
| LAKEHOUSE_DQ_SPARK_THRESHOLD_ROWS| 2000000                         | rows above which quality checks use Spark |
| LAKEHOUSE_JARS_DIR               | <repo>/.cache/jars              | Delta Lake's JVM jars (fetched by `make`) |
| LAKEHOUSE_KAFKA_BOOTSTRAP        | 127.0.0.1:9092                  | the Kafka broker (`host:port`): overrides the connection `kafka_default` everywhere (CLI, jobs, DAGs); `lakehouse kafka up` listens there |
| LAKEHOUSE_KAFKA_TIMEOUT_SECONDS  | 20                              | a Kafka request's timeout in a job (Spark tries offsets 3 times: a broker lost under a running job fails it after about 3x this) |
| LAKEHOUSE_KAFKA_JARS_DIR         | <repo>/.cache/kafka             | Kafka's broker jars (fetched by `make`)   |
| LAKEHOUSE_METASTORE_URI          | thrift://127.0.0.1:9083         | the catalog (a Hive metastore): `lakehouse catalog up` listens there; a team's own metastore at another URI is used as it is |
| LAKEHOUSE_METASTORE_DB           | unset                           | the catalog's database: `postgresql://user:password@host:port/database` (docker-compose.yaml's `metastore` service); unset: Derby under <local>/_catalog |
| LAKEHOUSE_SQL_PORT               | 10000                           | the SQL endpoint (`lakehouse sql up`: Spark's Thrift server, JDBC `jdbc:hive2://host:port/default`) |
| LAKEHOUSE_SQL_BIND               | 127.0.0.1                       | the address it listens on (loopback unless set; 0.0.0.0: every interface) |
| LAKEHOUSE_SQL_USER               | lakehouse                       | its login's user                          |
| LAKEHOUSE_SQL_PASSWORD           | unset                           | its login's password; unset: one made once, kept owner-only under <local>/_sql/password, printed by `sql up` |
| LAKEHOUSE_LIVE_DRIVERS           | 4                               | live drivers (a group's, or a job's alone) started at most on this host; a start beyond waits for capacity |
| LAKEHOUSE_LIVE_WATCH_SECONDS     | 240                             | after its check, each `lakehouse_live` task watches its jobs this long (every 10 s): a crash is restarted once its backoff allows, not at the next 5-minute run; 0: check only |
| LAKEHOUSE_LOG_MAX_BYTES          | 20000000                        | a live driver's log (`_ops/logs/<job or group>.log`) is rotated above this size (include/ops/log_rotation.py) |
| LAKEHOUSE_LOG_BACKUPS            | 3                               | rotated logs kept per driver log (`.1` newest); the oldest is deleted |
| LAKEHOUSE_PROGRESS_RETENTION_DAYS| 7                               | `_ops/query_progress` rows older than this are deleted by the maintenance (include/ops/ops_maintenance.py) |
| LAKEHOUSE_OPS_HISTORY_HOURS      | 24                              | the maintenance keeps the operational tables' (`_ops/*`) replaced files and commits this long: after it, each holds its rows in a few files plus this many hours of commits |
| LAKEHOUSE_AIRFLOW_HISTORY_DAYS   | 30                              | `lakehouse airflow-history` (the cluster's `airflow-history` part, hourly) deletes Airflow's runs, task instances and log files older than this |
| LAKEHOUSE_BATCH_HOOKS            | unset                           | `module:function` called at each batch's commit points (spark_jobs/batch_hooks.py; the tests' fault injection) |
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from include.storage.layout import Layout
from include.storage.paths import LocalPath, S3Path, storage_path
from include.storage.s3 import DEFAULT_ENDPOINT, DEFAULT_REGION, S3Config, bucket_problem, kept_credentials

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(__file__).resolve().parent
SPARK_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
SPARK_LOG_CONFIG = PACKAGE_DIR / "spark_log4j2.properties"  # Spark's JVM logging, from its first line
SPARK_LOG_JAVA_OPTION = f"-Dlog4j2.configurationFile={SPARK_LOG_CONFIG.as_uri()}"  # the driver's JVM option


def _env(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip()
    return value or default


@dataclass(frozen=True)
class Settings:
    """Resolved configuration; build it with :func:`load_settings`. `root` may be given as a path or a URI (a test's
    `replace(settings, root=tmp_path)`): it is made a storage path (include/storage/paths.py)."""

    root: LocalPath | S3Path
    registry_path: Path
    spark_master: str = "local[2]"
    spark_driver_memory: str = "2g"
    spark_ui: bool = False
    log_level: str = "INFO"
    spark_log_level: str = "WARN"
    stop_grace_seconds: float = 120.0
    task_retries: int = 2
    spark_pool_slots: int = 1
    dq_spark_threshold_rows: int = 2_000_000
    batch_hooks: str = ""
    jars_dir: Path = REPO_ROOT / ".cache" / "jars"
    spark_java_options: str = ""
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_bootstrap_set: bool = False  # LAKEHOUSE_KAFKA_BOOTSTRAP was given: it wins over the Airflow connection
    kafka_jars_dir: Path = REPO_ROOT / ".cache" / "kafka"
    metastore_uri: str = "thrift://127.0.0.1:9083"
    sql_port: int = 10000
    sql_bind: str = "127.0.0.1"
    sql_user: str = "lakehouse"
    sql_password: str = ""  # empty: the one `lakehouse sql up` made and keeps (include/catalog/sql_endpoint.py)
    metastore_db: str = ""  # LAKEHOUSE_METASTORE_DB: the catalog's PostgreSQL database (empty: Derby)
    metastore_uri_set: bool = False  # LAKEHOUSE_METASTORE_URI was given: a catalog is expected (its absence is warned)
    kafka_timeout_seconds: int = 20
    live_drivers: int = 4  # live drivers (a group's, or a job's alone) this host runs at most
    live_watch_seconds: int = 240  # how long a lakehouse_live task watches its jobs after checking them
    log_max_bytes: int = 20_000_000  # a live driver's log is rotated above this size
    log_backups: int = 3  # rotated logs kept per driver log
    progress_retention_days: int = 7  # _ops/query_progress rows older than this are deleted by the maintenance
    ops_history_hours: int = 24  # the maintenance keeps the _ops tables' replaced files and commits this long
    airflow_history_days: int = 30  # Airflow's runs and task logs kept this long (include/airflow/history.py)
    lease_seconds: float = 60.0  # an object-store lease's life without renewal (include/ops/lease.py)
    host_name: str = field(default_factory=socket.gethostname)  # this host in lease records
    s3: S3Config = S3Config()
    local_dir: Path | None = None  # LAKEHOUSE_LOCAL_DIR; None: the root when it is local, else <repo>/lakehouse

    def __post_init__(self) -> None:
        root = str(self.root) if isinstance(self.root, S3Path) else self.root  # reached with these settings' S3
        object.__setattr__(self, "root", storage_path(root, self.s3))

    @property
    def local(self) -> Path:
        """This host's own directory (servers' data, live drivers' logs, working copies of what lives on S3)."""
        if self.local_dir is not None:
            return Path(self.local_dir)
        return Path(str(self.root)) if self.root.is_local else REPO_ROOT / "lakehouse"

    def path(self, location: str) -> LocalPath | S3Path:
        """The storage path of a location recorded as text (a journal's archive, a checkpoint's file URI)."""
        return storage_path(location, self.s3)

    def storage_environment(self) -> dict[str, str]:
        """The variables that say where the lakehouse is and how to reach it, for the processes this one starts."""
        env = {"LAKEHOUSE_ROOT": str(self.root), "LAKEHOUSE_LEASE_SECONDS": str(int(self.lease_seconds)),
               "AWS_REGION": self.s3.region}
        if self.s3.endpoint:
            env["LAKEHOUSE_S3_ENDPOINT"] = self.s3.endpoint
        env |= self.s3.environment()
        if self.local_dir is not None:
            env["LAKEHOUSE_LOCAL_DIR"] = str(self.local_dir)
        if self.host_name != socket.gethostname():
            env["LAKEHOUSE_HOST_NAME"] = self.host_name
        return env

    @property
    def layout(self) -> Layout:
        """Where everything lives under the root."""
        return Layout(self.root, self.local)

    def require_writable_root(self) -> None:
        """Raise ValueError naming LAKEHOUSE_ROOT unless it is (or can be made) a writable directory; an S3 root must
        answer (include/storage/server.py says why it does not)."""
        if not self.root.is_local:
            problem = bucket_problem(self.s3, self.root.bucket)
            if problem:
                raise ValueError(f"LAKEHOUSE_ROOT={self.root}: {problem}")
            return
        existing = next(p for p in (self.root, *self.root.parents) if p.exists())
        if not existing.is_dir():
            raise ValueError(f"LAKEHOUSE_ROOT={self.root}: {existing} is a file, not a directory; point "
                             "LAKEHOUSE_ROOT at a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"LAKEHOUSE_ROOT={self.root}: {existing} is not writable by this user "
                             f"(uid {os.getuid()}); fix its permissions or choose another directory")


def load_settings() -> Settings:
    """Read the environment into a :class:`Settings`."""
    endpoint = _env("LAKEHOUSE_S3_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    if endpoint != "aws" and not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"LAKEHOUSE_S3_ENDPOINT must be an http:// or https:// URL, or `aws`, got {endpoint!r}")
    s3 = S3Config(endpoint="" if endpoint == "aws" else endpoint, access_key_id=_env("AWS_ACCESS_KEY_ID", ""),
                  secret_access_key=_env("AWS_SECRET_ACCESS_KEY", ""), region=_env("AWS_REGION", DEFAULT_REGION))
    try:
        root = storage_path(_env("LAKEHOUSE_ROOT", str(REPO_ROOT / "lakehouse")), s3)
    except ValueError as exc:
        raise ValueError(f"LAKEHOUSE_ROOT: {exc}") from None
    if root.is_local:
        root = LocalPath(Path(str(root)).resolve())  # symbolic links resolved, as Spark records paths
    local_dir = _env("LAKEHOUSE_LOCAL_DIR", "")
    if not s3.access_key_id and s3.endpoint:  # the credentials `lakehouse storage up` made for its server, if any
        local = Path(local_dir).expanduser().resolve() if local_dir else (
            Path(str(root)) if root.is_local else REPO_ROOT / "lakehouse")
        kept = kept_credentials(Layout(root, local).s3_server)
        if kept:
            s3 = replace(s3, access_key_id=kept[0], secret_access_key=kept[1])
    lease_seconds = _env("LAKEHOUSE_LEASE_SECONDS", "60")
    if not lease_seconds.isdigit() or int(lease_seconds) < 3:
        raise ValueError(f"LAKEHOUSE_LEASE_SECONDS must be a whole number of seconds, at least 3, got {lease_seconds!r}")
    registry = Path(_env("LAKEHOUSE_REGISTRY", str(PACKAGE_DIR / "jobs.yaml"))).expanduser().resolve()
    try:
        grace = float(_env("LAKEHOUSE_STOP_GRACE_SECONDS", "120"))
    except ValueError as exc:
        raise ValueError("LAKEHOUSE_STOP_GRACE_SECONDS must be a number of seconds") from exc
    retries = _env("LAKEHOUSE_TASK_RETRIES", "2")
    if not retries.isdigit():
        raise ValueError(f"LAKEHOUSE_TASK_RETRIES must be a non-negative integer, got {retries!r}")
    spark_log_level = _env("LAKEHOUSE_SPARK_LOG_LEVEL", "WARN").upper()
    if spark_log_level not in SPARK_LOG_LEVELS:
        raise ValueError(f"LAKEHOUSE_SPARK_LOG_LEVEL must be one of {', '.join(SPARK_LOG_LEVELS)}, "
                         f"got {spark_log_level!r}")
    pool_slots = _env("LAKEHOUSE_SPARK_POOL_SLOTS", str(max(1, (os.cpu_count() or 2) // 2)))
    if not pool_slots.isdigit() or int(pool_slots) < 1:
        raise ValueError(f"LAKEHOUSE_SPARK_POOL_SLOTS must be a positive integer, got {pool_slots!r}")
    threshold = _env("LAKEHOUSE_DQ_SPARK_THRESHOLD_ROWS", "2000000")
    if not threshold.isdigit():
        raise ValueError(f"LAKEHOUSE_DQ_SPARK_THRESHOLD_ROWS must be a non-negative integer, got {threshold!r}")
    bootstrap = _env("LAKEHOUSE_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    kafka_timeout = _env("LAKEHOUSE_KAFKA_TIMEOUT_SECONDS", "20")
    if not kafka_timeout.isdigit() or int(kafka_timeout) < 1:
        raise ValueError(f"LAKEHOUSE_KAFKA_TIMEOUT_SECONDS must be a positive integer, got {kafka_timeout!r}")
    check_bootstrap("LAKEHOUSE_KAFKA_BOOTSTRAP", bootstrap)
    metastore_uri = _env("LAKEHOUSE_METASTORE_URI", "thrift://127.0.0.1:9083")
    metastore_host_port(metastore_uri)  # ValueError naming LAKEHOUSE_METASTORE_URI
    metastore_db = _env("LAKEHOUSE_METASTORE_DB", "")
    if metastore_db:
        postgres_address(metastore_db)  # ValueError naming LAKEHOUSE_METASTORE_DB
    sql_port = _env("LAKEHOUSE_SQL_PORT", "10000")
    if not sql_port.isdigit() or not 0 < int(sql_port) < 65536:
        raise ValueError(f"LAKEHOUSE_SQL_PORT must be a port number (1-65535), got {sql_port!r}")
    live_drivers = _env("LAKEHOUSE_LIVE_DRIVERS", "4")
    if not live_drivers.isdigit() or int(live_drivers) < 1:
        raise ValueError(f"LAKEHOUSE_LIVE_DRIVERS must be a positive integer, got {live_drivers!r}")
    watch = _env("LAKEHOUSE_LIVE_WATCH_SECONDS", "240")
    if not watch.isdigit():
        raise ValueError(f"LAKEHOUSE_LIVE_WATCH_SECONDS must be a non-negative integer, got {watch!r}")
    log_max_bytes, log_backups = _env("LAKEHOUSE_LOG_MAX_BYTES", "20000000"), _env("LAKEHOUSE_LOG_BACKUPS", "3")
    if not log_max_bytes.isdigit() or int(log_max_bytes) < 1024:
        raise ValueError(f"LAKEHOUSE_LOG_MAX_BYTES must be a whole number of bytes, at least 1024, got {log_max_bytes!r}")
    if not log_backups.isdigit() or int(log_backups) < 1:
        raise ValueError(f"LAKEHOUSE_LOG_BACKUPS must be a positive integer, got {log_backups!r}")
    retention = _env("LAKEHOUSE_PROGRESS_RETENTION_DAYS", "7")
    if not retention.isdigit() or int(retention) < 1:
        raise ValueError(f"LAKEHOUSE_PROGRESS_RETENTION_DAYS must be a positive integer, got {retention!r}")
    ops_history = _env("LAKEHOUSE_OPS_HISTORY_HOURS", "24")
    if not ops_history.isdigit() or int(ops_history) < 1:
        raise ValueError(f"LAKEHOUSE_OPS_HISTORY_HOURS must be a positive whole number of hours, got {ops_history!r}")
    airflow_history = _env("LAKEHOUSE_AIRFLOW_HISTORY_DAYS", "30")
    if not airflow_history.isdigit() or int(airflow_history) < 1:
        raise ValueError(f"LAKEHOUSE_AIRFLOW_HISTORY_DAYS must be a positive whole number of days, got {airflow_history!r}")
    return Settings(
        root=root,
        s3=s3,
        lease_seconds=float(lease_seconds),
        host_name=_env("LAKEHOUSE_HOST_NAME", socket.gethostname()),
        local_dir=Path(local_dir).expanduser().resolve() if local_dir else None,
        registry_path=registry,
        spark_master=_env("LAKEHOUSE_SPARK_MASTER", "local[2]"),
        spark_driver_memory=_env("LAKEHOUSE_SPARK_DRIVER_MEMORY", "2g"),
        spark_ui=_env("LAKEHOUSE_SPARK_UI", "0") == "1",
        log_level=_env("LAKEHOUSE_LOG_LEVEL", "INFO").upper(),
        spark_log_level=spark_log_level,
        stop_grace_seconds=grace,
        task_retries=int(retries),
        spark_pool_slots=int(pool_slots),
        dq_spark_threshold_rows=int(threshold),
        batch_hooks=_env("LAKEHOUSE_BATCH_HOOKS", ""),
        jars_dir=Path(_env("LAKEHOUSE_JARS_DIR", str(REPO_ROOT / ".cache" / "jars"))).expanduser().resolve(),
        spark_java_options=_env("LAKEHOUSE_SPARK_JAVA_OPTIONS", ""),
        kafka_bootstrap=bootstrap,
        kafka_bootstrap_set=bool(os.environ.get("LAKEHOUSE_KAFKA_BOOTSTRAP", "").strip()),
        kafka_jars_dir=Path(_env("LAKEHOUSE_KAFKA_JARS_DIR", str(REPO_ROOT / ".cache" / "kafka"))).expanduser().resolve(),
        kafka_timeout_seconds=int(kafka_timeout),
        metastore_uri=metastore_uri,
        metastore_uri_set=bool(os.environ.get("LAKEHOUSE_METASTORE_URI", "").strip()),
        metastore_db=metastore_db,
        sql_port=int(sql_port),
        sql_bind=_env("LAKEHOUSE_SQL_BIND", "127.0.0.1"),
        sql_user=_env("LAKEHOUSE_SQL_USER", "lakehouse"),
        sql_password=os.environ.get("LAKEHOUSE_SQL_PASSWORD", ""),
        live_drivers=int(live_drivers),
        live_watch_seconds=int(watch),
        log_max_bytes=int(log_max_bytes),
        log_backups=int(log_backups),
        progress_retention_days=int(retention),
        ops_history_hours=int(ops_history),
        airflow_history_days=int(airflow_history),
    )


def check_bootstrap(name: str, value: str) -> None:
    """Raise ValueError naming `name` unless `value` is a comma-separated list of `host:port`."""
    for server in value.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{name} must be host:port (comma-separated for several brokers), got {value!r}")


def metastore_host_port(uri: str) -> tuple[str, int]:
    """(host, port) of a `thrift://host:port` URI; ValueError naming LAKEHOUSE_METASTORE_URI otherwise."""
    from urllib.parse import urlsplit

    parts = urlsplit(uri)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "thrift" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise ValueError(f"LAKEHOUSE_METASTORE_URI must be thrift://host:port, got {uri!r}")
    return parts.hostname, port


@dataclass(frozen=True)
class PostgresAddress:
    """A PostgreSQL database: where the catalog keeps its tables (LAKEHOUSE_METASTORE_DB)."""

    host: str
    port: int
    database: str
    user: str
    password: str

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"


def postgres_address(url: str) -> PostgresAddress:
    """The parts of `postgresql://user:password@host:port/database`; ValueError naming LAKEHOUSE_METASTORE_DB."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 0
    database = parts.path.lstrip("/")
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not port or not database \
            or "/" in database or not parts.username:
        raise ValueError("LAKEHOUSE_METASTORE_DB must be postgresql://user:password@host:port/database, got "
                         f"{parts.scheme}://...{'/' + database if database else ''}")
    return PostgresAddress(parts.hostname, port, database, unquote(parts.username), unquote(parts.password or ""))
