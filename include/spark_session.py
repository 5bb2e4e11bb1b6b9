"""Building the SparkSession: Java check first, then one session configured from the settings."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from include.catalog_client import session_confs as catalog_confs
from include.jvm_archive import driver_java_options
from include.settings import REPO_ROOT, Settings

log = logging.getLogger(__name__)

SUPPORTED_JAVA = (17, 21)
JAVA_HELP = (
    "Spark 4.2 needs Java 17 or 21: install it (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) "
    "and put it on PATH or set JAVA_HOME"
)


class JavaError(RuntimeError):
    """Java is missing or of a version Spark cannot run on, or Delta's jars are missing."""


FUNCTIONS_JAR = "lakehouse-functions.jar"  # the project's JVM functions (spark_jobs/jvm), built by `make`
STRICT_JSON_FUNCTION = "lakehouse_strict_json"  # (line, text columns) -> quarantine reason or null
RESCUED_FIELDS_FUNCTION = "lakehouse_rescued_fields"  # (line, schema columns) -> the other fields as JSON, or null


def delta_jars(settings: Settings) -> list[Path]:
    """Delta Lake's JVM jars and the project's functions in the project's cache (made once by `make`); JavaError
    naming what is missing."""
    jars = sorted(settings.jars_dir.glob("*.jar"))
    if not any(j.name.startswith("delta-spark") for j in jars):
        raise JavaError(f"Delta Lake's jars are missing in {settings.jars_dir}: run `make` (it fetches them once "
                        "with Maven, see include/jars/pom.xml) or set LAKEHOUSE_JARS_DIR")
    if not any(j.name == FUNCTIONS_JAR for j in jars):
        raise JavaError(f"{FUNCTIONS_JAR} is missing in {settings.jars_dir}: run `make` (it compiles spark_jobs/jvm "
                        "with the JDK's javac) or set LAKEHOUSE_JARS_DIR")
    return jars


def java_major_version() -> int:
    """The major version of the Java that Spark will start; raises JavaError with what to install."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no `java` on PATH"
        raise JavaError(f"{where}. {JAVA_HELP}")
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaError(f"could not run {java} -version ({exc}). {JAVA_HELP}") from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if not match:
        raise JavaError(f"could not read the version of {java}. {JAVA_HELP}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def check_java() -> None:
    major = java_major_version()
    if major not in SUPPORTED_JAVA:
        raise JavaError(f"found Java {major}. {JAVA_HELP}")


def under_spark_submit() -> bool:
    """True when this Python process was started by spark-submit (the JVM is already up)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_spark(settings: Settings, app_name: str = "lakehouse", jit: str = "tiered", read_only: bool = False,
              live: bool = False):
    """The SparkSession for this process, created once, with Delta Lake (jars from the project's cache); `jit`: the
    JIT compilers of the driver's JVM when this process starts it (ResourcesSpec.jit); `read_only`: every statement
    that would change a table or the catalog refused (`lakehouse query`; READ_ONLY_EXTENSION); `live`: a live
    driver's, serving its metrics unless LAKEHOUSE_DRIVER_METRICS is off (driver_metrics_confs)."""
    from pyspark.sql import SparkSession

    # Python workers (pandas UDFs) must run this interpreter, which has the project's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.update(settings.s3.environment())  # the S3 credentials of the JVM this process may start
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    jars = delta_jars(settings)
    builder = SparkSession.builder.appName(app_name)
    if not under_spark_submit():  # under spark-submit the master, memory and --jars come from its command line
        check_java()
        builder = (
            builder.master(settings.spark_master)
            .config("spark.driver.memory", settings.spark_driver_memory)
            .config("spark.jars", ",".join(str(j) for j in jars))
            .config("spark.driver.extraJavaOptions", driver_java_options(settings, jit))
        )
    confs = lakehouse_confs(settings)
    if read_only:
        confs["spark.sql.extensions"] += f",{READ_ONLY_EXTENSION}"
    if live and settings.driver_metrics:
        confs |= driver_metrics_confs()
    for key, value in confs.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark_log_level)
    if not spark.sparkContext.master.startswith("local"):  # executors in other JVMs: they import from the archive
        archive = python_archive(Path(tempfile.gettempdir()) / "lakehouse-python")
        spark.sparkContext.addPyFile(str(archive))
        log.info("executors import the project's code from %s (%s)", archive.name, spark.sparkContext.master)
    if under_spark_submit() and not spark._jvm.org.apache.spark.util.Utils.classIsLoadable(DELTA_EXTENSION):
        spark.stop()
        listed = ",".join(str(j) for j in jars)
        raise JavaError(f"Delta Lake's classes are not on this spark-submit's class path: pass its jars, "
                        f"spark-submit --jars {listed} ... (the DAGs do)")
    register_functions(spark)
    return spark


METRICS_NAMESPACE = "lakehouse"  # spark.metrics.namespace: metric names without the application's id
PROMETHEUS_SERVLET_PATH = "/metrics/prometheus"
PROMETHEUS_SINK = "spark.metrics.conf.*.sink.prometheusServlet"


def driver_metrics_confs() -> dict[str, str]:
    """A live driver's Spark metrics for Prometheus: the UI on a free port (drivers share a host), its
    PrometheusServlet, the streaming queries' metrics (input and processing rates, latency, watermark, state rows
    and bytes, named by the query: the job id), a stable namespace; the UI keeps little history (a long-lived driver's
    memory)."""
    sink = PROMETHEUS_SINK
    return {
        "spark.ui.enabled": "true", "spark.ui.port": "0",
        f"{sink}.class": "org.apache.spark.metrics.sink.PrometheusServlet", f"{sink}.path": PROMETHEUS_SERVLET_PATH,
        "spark.metrics.namespace": METRICS_NAMESPACE, "spark.sql.streaming.metricsEnabled": "true",
        "spark.ui.retainedJobs": "100", "spark.ui.retainedStages": "100", "spark.ui.retainedTasks": "10000",
        "spark.sql.ui.retainedExecutions": "50", "spark.sql.streaming.ui.retainedProgressUpdates": "60",
        "spark.sql.streaming.ui.retainedQueries": "50",
    }


def driver_metrics_url(spark) -> str | None:
    """Where this driver serves its Prometheus metrics (its UI's address and the servlet's path); None when it does
    not (not a live driver, LAKEHOUSE_DRIVER_METRICS off)."""
    context = spark.sparkContext
    if context.getConf().get(f"{PROMETHEUS_SINK}.class") is None or not context.uiWebUrl:
        return None
    return f"{context.uiWebUrl.rstrip('/')}{PROMETHEUS_SERVLET_PATH}"


def lakehouse_confs(settings: Settings) -> dict[str, str]:
    """The Spark confs of every session the lakehouse builds (its drivers, the SQL endpoint's): Delta, the tuning
    below, the storage's and, when its metastore answers, the catalog's."""
    confs = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta replays its log (after every commit, too) with this many tasks: the default (50), or even 4, costs
        # a micro-batch seconds per table on few cores; the tables' logs are small.
        "spark.databricks.delta.snapshotPartitions": "1",
        # A table the lakehouse creates checkpoints its log every 100 commits, not Delta's 10: the commit that writes
        # a checkpoint replays the table's state and writes it whole, in the micro-batch (on S3 3-5 s: every tenth
        # batch of a live job was its slowest, the live p95). A sink's `delta.checkpointInterval` overrides it.
        "spark.databricks.delta.properties.defaults.checkpointInterval": str(CHECKPOINT_INTERVAL),
        # Delta writes a checksum file beside each commit, listing every file of the table while it has fewer than 50:
        # a compacted live table's were 20-45 KB a commit, 15-30 times the commit (bench/soak.py), kept as long as the
        # log (30 days: ~2 GB per table at a commit a minute). Without the list: about 3 KB.
        ALL_FILES_IN_CHECKSUM: "false",
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.executorEnv.PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "false",
        # A micro-batch is cached only while its writes read it (spark_jobs.batch_writer): compressing the
        # cache costs more time than its memory saves (bench/backfill_vs_batch.py).
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        "spark.ui.showConsoleProgress": "false",
        # Compiled code per JVM: Spark keeps 100 classes, fewer than a group driver's queries and their tables'
        # Delta log replays and checkpoints use, so it compiled the same ones again (bench/live_fleet.py: Janino
        # 16 % of the payments group's JVM samples, 9 % with this; a Delta checkpoint's 42 compiles became 11).
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        "spark.sql.warehouse.dir": str(settings.layout.spark_warehouse),
    }
    if settings.spark_executor_java_options:  # executors of a cluster (in local mode they are the driver's JVM)
        confs["spark.executor.extraJavaOptions"] = settings.spark_executor_java_options

    return confs | storage_confs(settings) | catalog_confs(settings)


def storage_confs(settings: Settings) -> dict[str, str]:
    """Where and how Spark reads and writes the lakehouse: on S3 through Hadoop's S3A (endpoint, region; the
    credentials from the environment, the driver's and, on a cluster, the executors'), Delta commits with S3's
    conditional create (spark_jobs/jvm/lakehouse/ConditionalS3LogStore.java), and checkpoint files put whole, the
    offset and commit logs only if absent (ConditionalCheckpointFileManager.java: a local disk keeps Spark's default
    manager); on a local disk, the checkpoint manager's file system without the processes Hadoop starts for a
    permission or a link (NioRawLocalFileSystem.java)."""
    confs = {
        "spark.delta.logStore.s3a.impl": "lakehouse.ConditionalS3LogStore",
        "spark.sql.streaming.checkpointFileManagerClass": "lakehouse.ConditionalCheckpointFileManager",
        LOCAL_FILE_CONTEXT: "lakehouse.NioLocalFs",
        **{f"spark.hadoop.{key}": value for key, value in settings.s3.hadoop_options().items()},
    }
    if under_spark_submit():  # set inside the running JVM: never on a command line
        confs |= {f"spark.executorEnv.{key}": value for key, value in settings.s3.environment().items()}
    return confs


@contextmanager
def session_confs(spark, confs: Mapping[str, str]) -> Iterator[None]:
    """`confs` set on the session for the block, then back to what they were (unset when they were not set)."""
    before = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def register_functions(spark) -> None:
    """The project's JVM functions, in this session's function registry."""
    from pyspark.sql.types import StringType

    spark.udf.registerJavaFunction(STRICT_JSON_FUNCTION, "lakehouse.StrictJsonReason", StringType())
    spark.udf.registerJavaFunction(RESCUED_FIELDS_FUNCTION, "lakehouse.RescuedFields", StringType())


def query_session(spark):
    """A session of its own for one streaming query beside others in the same driver (a group): the jobs' session
    settings (shuffle partitions, state store) differ, and each query fixes its own when it starts."""
    session = spark.newSession()
    register_functions(session)
    return session


SHIPPED_PACKAGES = ("include", "spark_jobs")  # what executors import: transforms, processors, their registry types


def python_archive(directory: Path) -> Path:
    """A zip of the project's packages, made from this driver's source and named by its content: what a cluster's
    executors import (SparkContext.addPyFile, as `--py-files`), never the source tree by accident."""
    files = sorted(f for package in SHIPPED_PACKAGES for f in (REPO_ROOT / package).rglob("*")
                   if f.is_file() and "__pycache__" not in f.parts)
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(REPO_ROOT)).encode() + b"\0" + f.read_bytes())
    target = directory / f"lakehouse-python-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".{target.name}.{os.getpid()}"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files:
            archive.write(f, str(f.relative_to(REPO_ROOT)))
    partial.replace(target)
    return target


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
READ_ONLY_EXTENSION = "lakehouse.ReadOnlySql"  # spark_jobs/jvm/lakehouse/ReadOnlySql.java
CHECKPOINT_INTERVAL = 100  # commits between Delta log checkpoints of the tables the lakehouse creates
ALL_FILES_IN_CHECKSUM = "spark.databricks.delta.allFilesInCrc.enabled"
# The FileContext API's `file:` scheme (Spark's checkpoint manager writes a local checkpoint through it). Not the
# FileSystem API's `fs.file.impl`: spark-submit opens local files through that before the project's jar is loaded.
LOCAL_FILE_CONTEXT = "spark.hadoop.fs.AbstractFileSystem.file.impl"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CODEGEN_CACHE_ENTRIES = 1000  # generated classes a JVM keeps compiled (Spark's default: 100)
