"""One settings object for the whole project, read from documented environment variables.

Every variable is one row of :data:`SETTINGS` (a :class:`Setting`: its name, kind, default, minimum or choices, and
meaning). :func:`load_settings` reads the environment through that table (a variable unset or blank takes its
default; each kind has one parse-and-check, whose error names the variable and the value), and
`configuration_reference` (include/settings_reference.py) renders the same table as the docs' Configuration page: the
defaults and their documentation live in one place. The few variables that need more than their kind's check (the S3
endpoint, the root, the Kafka bootstrap servers, the metastore's URI and database, the CDC database and the Connect
worker: include/addresses.py) name their own parse in their row, or are resolved after the table is read (the root,
kept S3 credentials).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path

from include.addresses import (
    check_bootstrap,
    http_host_port,
    lineage_destination,
    metastore_host_port,
    postgres_address,
    s3_endpoint,
)
from include.storage.layout import Layout
from include.storage.paths import LocalPath, S3Path, storage_path
from include.storage.s3 import DEFAULT_ENDPOINT, DEFAULT_REGION, S3Config, bucket_problem, kept_credentials

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(__file__).resolve().parent
SPARK_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
SPARK_LOG_CONFIG = PACKAGE_DIR / "spark_log4j2.properties"  # Spark's JVM logging, from its first line
SPARK_LOG_JAVA_OPTION = f"-Dlog4j2.configurationFile={SPARK_LOG_CONFIG.as_uri()}"  # the driver's JVM option
PORT_RANGE = (1, 65535)  # a port number's least and greatest value (Kind.PORT)


class Kind(StrEnum):
    """What a variable holds: how its text is checked (load_settings) and the type the reference shows."""

    TEXT = "text"  # taken as it is
    WHOLE = "whole number"  # digits only, at least the row's minimum (0 when it has none)
    NUMBER = "number"  # any number Python's float() reads
    PORT = "port"  # a whole number in PORT_RANGE
    CHOICE = "choice"  # one of the row's choices
    FLAG = "flag"  # `1`: on; anything else: off
    PATH = "path"  # a local path (`~` expanded, made absolute, symbolic links resolved); blank: none
    URL = "URL"  # checked by the row's own parse
    ADDRESSES = "host:port list"  # checked by the row's own parse
    LOCATION = "path or S3 URI"  # the root: resolved after the table is read (it needs the S3 settings)


@dataclass(frozen=True)
class Setting:
    """One environment variable: a row of :data:`SETTINGS`."""

    name: str  # the environment variable
    fills: str  # the Settings field it fills (`s3.<field>`: the S3Config's)
    kind: Kind
    default: str | Callable[[], str]  # the text an unset or blank variable stands for (a callable: computed then)
    meaning: str  # Markdown
    shown_default: str = ""  # the default as the reference says it (Markdown); "": the default itself ("unset": "")
    minimum: int | None = None  # Kind.WHOLE: the least value (None: 0)
    choices: tuple[str, ...] = ()  # Kind.CHOICE: the values allowed
    unit: str = ""  # what a number counts ("seconds"), named in its type and in its error
    upper: bool = False  # read upper-cased: case does not matter
    strip: bool = True  # False: taken exactly as given, surrounding spaces too (a password)
    parse: Callable[[str], object] | None = None  # its own parse-and-check (a special case) instead of its kind's

    def default_text(self) -> str:
        return self.default() if callable(self.default) else self.default

    @property
    def requirement(self) -> str:
        """What a value must be, as the error of a bad one says it (`<NAME> must be <this>, got '<value>'`)."""
        least = self.minimum or 0
        if self.kind is Kind.WHOLE and self.unit:
            return f"a positive whole number of {self.unit}" if least == 1 else \
                f"a whole number of {self.unit}, at least {least}"
        if self.kind is Kind.WHOLE:
            return {0: "a non-negative integer", 1: "a positive integer"}.get(least, f"a whole number, at least {least}")
        if self.kind is Kind.NUMBER:
            return f"a number of {self.unit}" if self.unit else "a number"
        if self.kind is Kind.PORT:
            return f"a port number ({PORT_RANGE[0]}-{PORT_RANGE[1]})"
        if self.kind is Kind.CHOICE:
            return f"one of {', '.join(self.choices)}"
        return f"a {self.kind}"


def _checked(check: Callable[[str], object]) -> Callable[[str], str]:
    """A row's own parse: the text as it is, once `check` passed it (its ValueError names the variable)."""
    def parse(text: str) -> str:
        check(text)
        return text
    return parse


SETTINGS: tuple[Setting, ...] = (
    Setting("LAKEHOUSE_ROOT", "root", Kind.LOCATION, str(REPO_ROOT / "lakehouse"), shown_default="`<repo>/lakehouse`",
            meaning="landing, tables, checkpoints, ops, reports: a local path or an S3 URI (`s3://bucket/prefix`, "
                    "`s3a://` too)"),
    Setting("LAKEHOUSE_S3_ENDPOINT", "s3.endpoint", Kind.URL, DEFAULT_ENDPOINT, parse=s3_endpoint,
            meaning="the S3 API of an S3 root that is not AWS (path-style access); `lakehouse storage up` listens "
                    "there; `aws`: AWS S3 itself"),
    Setting("AWS_ACCESS_KEY_ID", "s3.access_key_id", Kind.TEXT, "",
            meaning="the S3 credentials' key (AWS's own variable); unset with a local endpoint: the one "
                    "`lakehouse storage up` made and keeps"),
    Setting("AWS_SECRET_ACCESS_KEY", "s3.secret_access_key", Kind.TEXT, "",
            meaning="the S3 credentials' secret (AWS's own variable); unset with a local endpoint: the one "
                    "`lakehouse storage up` made and keeps"),
    Setting("AWS_REGION", "s3.region", Kind.TEXT, DEFAULT_REGION, meaning="the S3 region (AWS's own variable)"),
    Setting("LAKEHOUSE_LEASE_SECONDS", "lease_seconds", Kind.WHOLE, "60", minimum=3, unit="seconds",
            meaning="on an S3 root: how long a writer's lease outlives its last renewal (renewed every third of it; "
                    "a holder that cannot renew for half of it stops committing); a SIGKILLed driver's job can start "
                    "again on another host after at most this, on its own host at once"),
    Setting("LAKEHOUSE_HOST_NAME", "host_name", Kind.TEXT, socket.gethostname, shown_default="the OS's host name",
            meaning="this host's name in lease records (hosts that share a name; a test standing in for another "
                    "host)"),
    Setting("LAKEHOUSE_LOCAL_DIR", "local_dir", Kind.PATH, "",
            shown_default="`LAKEHOUSE_ROOT` if local, else `<repo>/lakehouse`",
            meaning="this host's own files: the servers' data (`_kafka`, `_cluster`, `_s3`), live drivers' logs, "
                    "working copies"),
    Setting("LAKEHOUSE_REGISTRY", "registry_path", Kind.PATH, str(PACKAGE_DIR / "jobs.yaml"),
            shown_default="`include/jobs.yaml`", meaning="the job registry"),
    Setting("LAKEHOUSE_SPARK_MASTER", "spark_master", Kind.TEXT, "local[2]",
            meaning="master when not under spark-submit"),
    Setting("LAKEHOUSE_SPARK_DRIVER_MEMORY", "spark_driver_memory", Kind.TEXT, "2g",
            meaning="driver memory of every driver (spark-submit's too), unless the registry's "
                    "`resources.driver_memory` says"),
    Setting("LAKEHOUSE_SPARK_UI", "spark_ui", Kind.FLAG, "0", meaning="`1` enables the Spark UI"),
    Setting("LAKEHOUSE_DRIVER_METRICS", "driver_metrics", Kind.FLAG, "0",
            meaning="`1`: each live driver serves its Spark metrics (its UI on a free port, `PrometheusServlet` at "
                    "`/metrics/prometheus`, streaming metrics, namespace `lakehouse`), found by `lakehouse monitor` "
                    "through its heartbeats; off by default: Spark's UI made live batches 40-50 % longer on 2 cores"),
    Setting("LAKEHOUSE_SPARK_JAVA_OPTIONS", "spark_java_options", Kind.TEXT, "",
            meaning="more JVM options of every Spark driver (e.g. `-XX:TieredStopAtLevel=1`: quicker starts of "
                    "short runs)"),
    Setting("LAKEHOUSE_SPARK_EXECUTOR_JAVA_OPTIONS", "spark_executor_java_options", Kind.TEXT, "",
            meaning="JVM options of every Spark executor on a cluster (`spark.executor.extraJavaOptions`; e.g. "
                    "`-XX:TieredStopAtLevel=1` where batches are small)"),
    Setting("LAKEHOUSE_LOG_LEVEL", "log_level", Kind.TEXT, "INFO", upper=True,
            meaning="Python log level (the project's lines)"),
    Setting("LAKEHOUSE_SPARK_LOG_LEVEL", "spark_log_level", Kind.CHOICE, "WARN", choices=SPARK_LOG_LEVELS,
            upper=True, meaning="Spark's (JVM) log level: TRACE..OFF"),
    Setting("LAKEHOUSE_STOP_GRACE_SECONDS", "stop_grace_seconds", Kind.NUMBER, "120", unit="seconds",
            meaning="wait for a batch to end on SIGTERM"),
    Setting("LAKEHOUSE_TASK_RETRIES", "task_retries", Kind.WHOLE, "2", minimum=0,
            meaning="Airflow retries of the lakehouse tasks"),
    Setting("LAKEHOUSE_SPARK_POOL_SLOTS", "spark_pool_slots", Kind.WHOLE,
            lambda: str(max(1, (os.cpu_count() or 2) // 2)), minimum=1, shown_default="cores / 2, at least 1",
            meaning="Spark tasks Airflow runs at once (pool `lakehouse_spark`)"),
    Setting("LAKEHOUSE_DQ_SPARK_THRESHOLD_ROWS", "dq_spark_threshold_rows", Kind.WHOLE, "2000000", minimum=0,
            meaning="rows above which quality checks use Spark"),
    Setting("LAKEHOUSE_JARS_DIR", "jars_dir", Kind.PATH, str(REPO_ROOT / ".cache" / "jars"),
            shown_default="`<repo>/.cache/jars`", meaning="Delta Lake's JVM jars (fetched by `make`)"),
    Setting("LAKEHOUSE_KAFKA_BOOTSTRAP", "kafka_bootstrap", Kind.ADDRESSES, "127.0.0.1:9092",
            parse=_checked(lambda text: check_bootstrap("LAKEHOUSE_KAFKA_BOOTSTRAP", text)),
            meaning="the Kafka broker (`host:port`): overrides the connection `kafka_default` everywhere (CLI, jobs, "
                    "DAGs); `lakehouse kafka up` listens there"),
    Setting("LAKEHOUSE_KAFKA_TIMEOUT_SECONDS", "kafka_timeout_seconds", Kind.WHOLE, "20", minimum=1,
            meaning="a Kafka request's timeout in a job, in seconds (Spark tries offsets 3 times: a broker lost under "
                    "a running job fails it after about 3x this)"),
    Setting("LAKEHOUSE_KAFKA_JARS_DIR", "kafka_jars_dir", Kind.PATH, str(REPO_ROOT / ".cache" / "kafka"),
            shown_default="`<repo>/.cache/kafka`", meaning="Kafka's broker jars (fetched by `make`)"),
    Setting("LAKEHOUSE_CDC_DATABASE_URL", "cdc_database_url", Kind.URL, "",
            parse=_checked(lambda text: text and postgres_address(text, "LAKEHOUSE_CDC_DATABASE_URL")),
            meaning="the database whose changes the `cdc:` sources capture: `postgresql://user:password@host:port/"
                    "database` (a team's own, used as it is: the product creates only its publication and replication "
                    "slot); unset: the local one `lakehouse cdc up` starts (database `shop`)"),
    Setting("LAKEHOUSE_CDC_POSTGRES_PORT", "cdc_postgres_port", Kind.PORT, "5434",
            meaning="the local CDC database's port on 127.0.0.1 (`lakehouse cdc up` starts it there when "
                    "`LAKEHOUSE_CDC_DATABASE_URL` is unset and none answers)"),
    Setting("LAKEHOUSE_CONNECT_URL", "connect_url", Kind.URL, "http://127.0.0.1:8083",
            parse=lambda text: _checked(lambda url: http_host_port("LAKEHOUSE_CONNECT_URL", url))(text.rstrip("/")),
            meaning="the Kafka Connect worker's REST API (`http://host:port`): `lakehouse cdc up` starts the worker "
                    "listening there, and registers the connectors through it"),
    Setting("LAKEHOUSE_CONNECT_JARS_DIR", "connect_jars_dir", Kind.PATH, str(REPO_ROOT / ".cache" / "connect"),
            shown_default="`<repo>/.cache/connect`",
            meaning="Kafka Connect's and Debezium's jars (fetched by `make`, include/jars/kafka-connect.pom.xml)"),
    Setting("LAKEHOUSE_METASTORE_URI", "metastore_uri", Kind.URL, "thrift://127.0.0.1:9083",
            parse=_checked(lambda text: metastore_host_port(text)),  # ValueError naming the variable
            meaning="the catalog (a Hive metastore): `lakehouse catalog up` listens there; a team's own metastore "
                    "at another URI is used as it is"),
    Setting("LAKEHOUSE_METASTORE_DB", "metastore_db", Kind.URL, "",
            parse=_checked(lambda text: text and postgres_address(text)),  # blank: Derby
            meaning="the catalog's database: `postgresql://user:password@host:port/database` (docker-compose.yaml's "
                    "`metastore` service); unset: Derby under `<local>/_catalog`"),
    Setting("LAKEHOUSE_SQL_PORT", "sql_port", Kind.PORT, "10000",
            meaning="the SQL endpoint (`lakehouse sql up`: Spark's Thrift server, JDBC "
                    "`jdbc:hive2://host:port/default`)"),
    Setting("LAKEHOUSE_SQL_BIND", "sql_bind", Kind.TEXT, "127.0.0.1",
            meaning="the address it listens on (loopback unless set; `0.0.0.0`: every interface)"),
    Setting("LAKEHOUSE_SQL_USER", "sql_user", Kind.TEXT, "lakehouse", meaning="its login's user"),
    Setting("LAKEHOUSE_SQL_PASSWORD", "sql_password", Kind.TEXT, "", strip=False,
            meaning="its login's password (taken as given, spaces too); unset: one made once, kept owner-only under "
                    "`<local>/_sql/password`, printed by `sql up`"),
    Setting("LAKEHOUSE_METRICS_PORT", "metrics_port", Kind.PORT, "9188",
            meaning="the lakehouse's Prometheus metrics (`lakehouse metrics --serve`: `/metrics` on that port)"),
    Setting("LAKEHOUSE_METRICS_BIND", "metrics_bind", Kind.TEXT, "127.0.0.1",
            meaning="the address the metrics endpoint, Prometheus and Alertmanager (`lakehouse monitor up`) listen on "
                    "(loopback unless set; `0.0.0.0`: every interface)"),
    Setting("LAKEHOUSE_PROMETHEUS_PORT", "prometheus_port", Kind.PORT, "9090",
            meaning="the Prometheus `lakehouse monitor up` runs (its UI and API)"),
    Setting("LAKEHOUSE_ALERTMANAGER_PORT", "alertmanager_port", Kind.PORT, "9093",
            meaning="the Alertmanager `lakehouse monitor up` runs (its UI and API)"),
    Setting("LAKEHOUSE_MONITOR_INTERVAL_SECONDS", "monitor_interval_seconds", Kind.WHOLE, "15", minimum=1,
            unit="seconds", meaning="how often Prometheus scrapes and evaluates the alert rules; Alertmanager waits 2 "
                                    "intervals before a new group's first notification and 4 between a group's next"),
    Setting("LAKEHOUSE_PROMETHEUS_RETENTION_HOURS", "prometheus_retention_hours", Kind.WHOLE, "168", minimum=1,
            unit="hours", meaning="how long Prometheus keeps samples (at most 1 GB), in `<local>/_monitor/`"),
    Setting("LAKEHOUSE_ALERTMANAGER_CONFIG", "alertmanager_config", Kind.PATH, "",
            meaning="a team's `alertmanager.yml` (its receivers) for `lakehouse monitor up`; unset: every alert to "
                    "the product's webhook, which records it in `ops.alerts`"),
    Setting("LAKEHOUSE_LINEAGE", "lineage", Kind.TEXT, "kafka", parse=lineage_destination,
            meaning="where drivers send an OpenLineage event as a job run starts and ends: `kafka` (LAKEHOUSE_LINEAGE_"
                    "TOPIC on LAKEHOUSE_KAFKA_BOOTSTRAP; no broker there: none, warned once), `file` (JSON lines in "
                    "`<local>/_lineage/`), an http(s):// URL (an OpenLineage endpoint: Marquez, DataHub), `off`"),
    Setting("LAKEHOUSE_LINEAGE_TOPIC", "lineage_topic", Kind.TEXT, "lakehouse.lineage", meaning="the Kafka topic of "
            "the OpenLineage events (LAKEHOUSE_LINEAGE=kafka; made when missing)"),
    Setting("LAKEHOUSE_LIVE_DRIVERS", "live_drivers", Kind.WHOLE, "4", minimum=1,
            meaning="live drivers (a group's, or a job's alone) started at most on this host; a start beyond waits "
                    "for capacity"),
    Setting("LAKEHOUSE_LIVE_WATCH_SECONDS", "live_watch_seconds", Kind.WHOLE, "240", minimum=0,
            meaning="after its check, each `lakehouse_live` task watches its jobs this many seconds (every 10 s): a "
                    "crash is restarted once its backoff allows, not at the next 5-minute run; `0`: check only"),
    Setting("LAKEHOUSE_LOG_MAX_BYTES", "log_max_bytes", Kind.WHOLE, "20000000", minimum=1024, unit="bytes",
            meaning="a live driver's log (`_ops/logs/<job or group>.log`) is rotated above this size "
                    "(include/records/log_rotation.py)"),
    Setting("LAKEHOUSE_LOG_BACKUPS", "log_backups", Kind.WHOLE, "3", minimum=1,
            meaning="rotated logs kept per driver log (`.1` newest); the oldest is deleted"),
    Setting("LAKEHOUSE_PROGRESS_RETENTION_DAYS", "progress_retention_days", Kind.WHOLE, "7", minimum=1,
            meaning="`_ops/query_progress` rows older than this many days are deleted by the maintenance "
                    "(include/records/ops_maintenance.py)"),
    Setting("LAKEHOUSE_OPS_HISTORY_HOURS", "ops_history_hours", Kind.WHOLE, "24", minimum=1, unit="hours",
            meaning="the maintenance keeps the operational tables' (`_ops/*`) replaced files and commits this long: "
                    "after it, each holds its rows in a few files plus this many hours of commits"),
    Setting("LAKEHOUSE_AIRFLOW_HISTORY_DAYS", "airflow_history_days", Kind.WHOLE, "30", minimum=1, unit="days",
            meaning="`lakehouse airflow-history` (the cluster's `airflow-history` part, hourly) deletes Airflow's "
                    "runs, task instances and log files older than this"),
    Setting("LAKEHOUSE_BATCH_HOOKS", "batch_hooks", Kind.TEXT, "",
            meaning="`module:function` called at each batch's commit points (spark_jobs/batch_hooks.py; the tests' "
                    "fault injection)"),
)


@dataclass(frozen=True)
class Settings:
    """Resolved configuration; build it with :func:`load_settings` (the defaults live in :data:`SETTINGS` only). `root`
    may be given as a path or a URI (a test's `replace(settings, root=tmp_path)`): it is made a storage path
    (include/storage/paths.py)."""

    root: LocalPath | S3Path
    registry_path: Path
    spark_master: str
    spark_driver_memory: str
    spark_ui: bool
    driver_metrics: bool  # live drivers serve Spark's PrometheusServlet (include/spark_session.py)
    lineage: str  # kafka | file | off | an OpenLineage endpoint's URL (include/lineage/emitter.py)
    lineage_topic: str
    log_level: str
    spark_log_level: str
    stop_grace_seconds: float
    task_retries: int
    spark_pool_slots: int
    dq_spark_threshold_rows: int
    batch_hooks: str
    jars_dir: Path
    spark_java_options: str
    spark_executor_java_options: str
    kafka_bootstrap: str
    kafka_bootstrap_set: bool  # LAKEHOUSE_KAFKA_BOOTSTRAP was given: it wins over the Airflow connection
    kafka_jars_dir: Path
    cdc_database_url: str  # LAKEHOUSE_CDC_DATABASE_URL: a team's database (empty: the local one, include/cdc)
    cdc_postgres_port: int  # the local CDC database's port on 127.0.0.1
    connect_url: str  # the Kafka Connect worker's REST API
    connect_jars_dir: Path
    metastore_uri: str
    sql_port: int
    metrics_port: int
    metrics_bind: str  # the metrics endpoint's, Prometheus' and Alertmanager's address
    prometheus_port: int
    alertmanager_port: int
    monitor_interval_seconds: int  # Prometheus' scrape and rule evaluation interval
    prometheus_retention_hours: int
    alertmanager_config: Path | None  # a team's alertmanager.yml; None: the product's webhook receiver
    sql_bind: str
    sql_user: str
    sql_password: str  # empty: the one `lakehouse sql up` made and keeps (include/catalog/sql_endpoint.py)
    metastore_db: str  # LAKEHOUSE_METASTORE_DB: the catalog's PostgreSQL database (empty: Derby)
    metastore_uri_set: bool  # LAKEHOUSE_METASTORE_URI was given: a catalog is expected (its absence is warned)
    kafka_timeout_seconds: int
    live_drivers: int  # live drivers (a group's, or a job's alone) this host runs at most
    live_watch_seconds: int  # how long a lakehouse_live task watches its jobs after checking them
    log_max_bytes: int  # a live driver's log is rotated above this size
    log_backups: int  # rotated logs kept per driver log
    progress_retention_days: int  # _ops/query_progress rows older than this are deleted by the maintenance
    ops_history_hours: int  # the maintenance keeps the _ops tables' replaced files and commits this long
    airflow_history_days: int  # Airflow's runs and task logs kept this long (include/airflow/history.py)
    lease_seconds: float  # an object-store lease's life without renewal (include/records/lease.py)
    host_name: str  # this host in lease records
    s3: S3Config
    local_dir: Path | None  # LAKEHOUSE_LOCAL_DIR; None: the root when it is local, else <repo>/lakehouse

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
    """Read the environment into a :class:`Settings`: every variable of :data:`SETTINGS` through its row, then the
    root resolved and the S3 credentials `lakehouse storage up` keeps filled in."""
    values = {setting.fills: read_setting(setting) for setting in SETTINGS}
    s3 = S3Config(**{name.removeprefix("s3."): values.pop(name) for name in list(values) if name.startswith("s3.")})
    root = _storage_root(values.pop("root"), s3)
    s3 = _with_kept_credentials(s3, root, values["local_dir"])
    return Settings(root=root, s3=s3, **_as_fields(values),
                    kafka_bootstrap_set=_given("LAKEHOUSE_KAFKA_BOOTSTRAP"),  # it wins over the Airflow connection
                    metastore_uri_set=_given("LAKEHOUSE_METASTORE_URI"))  # a catalog is expected


def read_setting(setting: Setting) -> object:
    """`setting`'s value from the environment (its default when unset or blank), parsed and checked: by the row's
    own parse if it has one, else by its kind's. ValueError naming the variable and the value when it is bad."""
    given = os.environ.get(setting.name, "")
    text = (given.strip() if setting.strip else given) or setting.default_text()
    if setting.upper:
        text = text.upper()
    if setting.parse is not None:
        return setting.parse(text)
    return _KIND_PARSES[setting.kind](setting, text)


def _bad(setting: Setting, text: str) -> ValueError:
    return ValueError(f"{setting.name} must be {setting.requirement}, got {text!r}")


def _parse_whole(setting: Setting, text: str) -> int:
    least, most = PORT_RANGE if setting.kind is Kind.PORT else (setting.minimum or 0, None)
    if not text.isdecimal() or int(text) < least or most is not None and int(text) > most:  # digits only: no sign
        raise _bad(setting, text)
    return int(text)


def _parse_number(setting: Setting, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise _bad(setting, text) from None


def _parse_choice(setting: Setting, text: str) -> str:
    if text not in setting.choices:
        raise _bad(setting, text)
    return text


def _parse_path(setting: Setting, text: str) -> Path | None:
    return Path(text).expanduser().resolve() if text else None


_KIND_PARSES: dict[Kind, Callable[[Setting, str], object]] = {
    Kind.WHOLE: _parse_whole, Kind.PORT: _parse_whole, Kind.NUMBER: _parse_number, Kind.CHOICE: _parse_choice,
    Kind.FLAG: lambda setting, text: text == "1", Kind.PATH: _parse_path,
    **{kind: lambda setting, text: text for kind in (Kind.TEXT, Kind.URL, Kind.ADDRESSES, Kind.LOCATION)},
}


def _storage_root(text: str, s3: S3Config) -> LocalPath | S3Path:
    """LAKEHOUSE_ROOT's storage path: an S3 URI, or a local path with its symbolic links resolved (as Spark records
    paths). ValueError naming LAKEHOUSE_ROOT."""
    try:
        root = storage_path(text, s3)
    except ValueError as exc:
        raise ValueError(f"LAKEHOUSE_ROOT: {exc}") from None
    return LocalPath(Path(str(root)).resolve()) if root.is_local else root


def _with_kept_credentials(s3: S3Config, root: LocalPath | S3Path, local_dir: Path | None) -> S3Config:
    """`s3` with the credentials `lakehouse storage up` made for its server, when it has an endpoint (not AWS) and no
    AWS_ACCESS_KEY_ID was given, and that server kept some (under this host's directory)."""
    if s3.access_key_id or not s3.endpoint:
        return s3
    local = local_dir if local_dir is not None else Path(str(root)) if root.is_local else REPO_ROOT / "lakehouse"
    kept = kept_credentials(Layout(root, local).s3_server)
    return replace(s3, access_key_id=kept[0], secret_access_key=kept[1]) if kept else s3


def _as_fields(values: dict[str, object]) -> dict[str, object]:
    """The values as the Settings fields hold them: a whole number of seconds for a float field (lease_seconds) as a
    float."""
    floats = {each.name for each in fields(Settings) if each.type in ("float", float)}
    return {name: float(value) if name in floats else value for name, value in values.items()}


def _given(name: str) -> bool:
    """Whether the variable `name` was given (not unset or blank): a `*_set` field of Settings."""
    return bool(os.environ.get(name, "").strip())
