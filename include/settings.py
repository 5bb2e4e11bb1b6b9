"""One settings object for the whole project, read from documented environment variables.

| variable                         | default                         | meaning                                   |
|----------------------------------|---------------------------------|-------------------------------------------|
| LAKEHOUSE_ROOT                   | <repo>/lakehouse                | landing, tables, checkpoints, ops, reports |
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
| LAKEHOUSE_LIVE_DRIVERS           | 4                               | live drivers (a group's, or a job's alone) started at most on this host; a start beyond waits for capacity |
| LAKEHOUSE_LIVE_WATCH_SECONDS     | 240                             | after its check, each `lakehouse_live` task watches its jobs this long (every 10 s): a crash is restarted once its backoff allows, not at the next 5-minute run; 0: check only |
| LAKEHOUSE_BATCH_HOOKS            | unset                           | `module:function` called at each batch's commit points (spark_jobs/batch_hooks.py; the tests' fault injection) |
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from include.storage.layout import Layout

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
    """Resolved configuration; build it with :func:`load_settings`."""

    root: Path
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
    kafka_timeout_seconds: int = 20
    live_drivers: int = 4  # live drivers (a group's, or a job's alone) this host runs at most
    live_watch_seconds: int = 240  # how long a lakehouse_live task watches its jobs after checking them

    def driver_java_options(self, jit: str = "tiered") -> str:
        """The Spark driver's JVM options: the project's logging, the class-data archive when `make` built one
        (include/jvm_archive.py), its JIT compilers (`jit`: a key of JIT_OPTIONS, ResourcesSpec.jit), then
        LAKEHOUSE_SPARK_JAVA_OPTIONS (last: it can override them)."""
        from include.jvm_archive import java_options
        from include.registry.specs import JIT_OPTIONS

        return " ".join(filter(None, (SPARK_LOG_JAVA_OPTION, java_options(self.jars_dir), JIT_OPTIONS[jit],
                                      self.spark_java_options)))

    @property
    def layout(self) -> Layout:
        """Where everything lives under the root."""
        return Layout(self.root)

    def require_writable_root(self) -> None:
        """Raise ValueError naming LAKEHOUSE_ROOT unless it is (or can be made) a writable directory."""
        existing = next(p for p in (self.root, *self.root.parents) if p.exists())
        if not existing.is_dir():
            raise ValueError(f"LAKEHOUSE_ROOT={self.root}: {existing} is a file, not a directory; point "
                             "LAKEHOUSE_ROOT at a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"LAKEHOUSE_ROOT={self.root}: {existing} is not writable by this user "
                             f"(uid {os.getuid()}); fix its permissions or choose another directory")


def load_settings() -> Settings:
    """Read the environment into a :class:`Settings`."""
    root = Path(_env("LAKEHOUSE_ROOT", str(REPO_ROOT / "lakehouse"))).expanduser().resolve()
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
    live_drivers = _env("LAKEHOUSE_LIVE_DRIVERS", "4")
    if not live_drivers.isdigit() or int(live_drivers) < 1:
        raise ValueError(f"LAKEHOUSE_LIVE_DRIVERS must be a positive integer, got {live_drivers!r}")
    watch = _env("LAKEHOUSE_LIVE_WATCH_SECONDS", "240")
    if not watch.isdigit():
        raise ValueError(f"LAKEHOUSE_LIVE_WATCH_SECONDS must be a non-negative integer, got {watch!r}")
    return Settings(
        root=root,
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
        live_drivers=int(live_drivers),
        live_watch_seconds=int(watch),
    )


def check_bootstrap(name: str, value: str) -> None:
    """Raise ValueError naming `name` unless `value` is a comma-separated list of `host:port`."""
    for server in value.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{name} must be host:port (comma-separated for several brokers), got {value!r}")
