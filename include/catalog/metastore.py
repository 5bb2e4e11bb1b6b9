"""The catalog's server: a Hive Metastore service (Thrift) run from the jars pyspark ships (`hive-metastore-2.3.10`,
DataNucleus, Derby): `lakehouse catalog up | down | status`.

It listens on `LAKEHOUSE_METASTORE_URI` (thrift://127.0.0.1:9083 by default). Its database is Derby under
`<local dir>/_catalog/metastore_db` (one JVM owns it; every driver talks Thrift to it). Its files (hive-site.xml, log,
pid file) live beside it. Whether a metastore *answers* is asked with its own protocol (include/catalog_client/thrift.py),
never inferred from a pid, so that a team's own metastore at that URI is used as it is.
"""

from __future__ import annotations

import logging
import os
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from include.catalog_client import answers
from include.catalog_client.thrift import ThriftError, get_all_databases
from include.daemons import DaemonFiles, java, port_taken, spark_home
from include.settings import Settings, postgres_address
from include.settings import metastore_host_port as host_port

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 180.0  # the first start creates Derby's schema (DataNucleus): about a minute on 2 cores
STOP_TIMEOUT_SECONDS = 30.0
METASTORE_HEAP = "-Xmx512m"
METASTORE_JIT = "-XX:TieredStopAtLevel=1"  # C1 alone, as the broker: a small server starts on less CPU
METASTORE_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
SCHEMA_TOOL_CLASS = "org.datanucleus.store.schema.SchemaTool"
# what the metastore's own object store sets for DataNucleus (Hive 2.3's defaults): the schema SchemaTool creates must
# name its tables, columns and keys as the metastore will
HIVE_DATANUCLEUS = {"datanucleus.identifierFactory": "datanucleus1",
                    "datanucleus.rdbms.useLegacyNativeValueStrategy": "true", "datanucleus.storeManagerType": "rdbms"}
LOG_CONFIG = Path(__file__).with_name("metastore_log4j2.properties")
# from the project's jar cache: S3A (an S3 root), PostgreSQL's JDBC driver (LAKEHOUSE_METASTORE_DB)
METASTORE_JARS = ("hadoop-aws-*.jar", "bundle-*.jar", "analyticsaccelerator-s3-*.jar", "postgresql-*.jar")


class CatalogError(RuntimeError):
    """The catalog cannot be started or reached; the message is one line saying why."""


@dataclass(frozen=True)
class MetastoreFiles(DaemonFiles, daemon="the Hive metastore", log="metastore.log", pid="metastore.pid"):
    """Where `lakehouse catalog up` keeps the metastore's files (Layout.catalog)."""

    @property
    def conf(self) -> Path:
        """The directory of its hive-site.xml (on its class path)."""
        return self.home / "conf"

    @property
    def derby(self) -> Path:
        return self.home / "metastore_db"

    @property
    def warehouse(self) -> Path:
        """The default location of databases the metastore creates (the lakehouse's tables are external: their data
        stays where the pipelines write it)."""
        return self.home / "warehouse"


def databases(uri: str, timeout: float = 5.0) -> list[str]:
    """The catalog's databases; CatalogError (one line) when no metastore answers."""
    host, port = host_port(uri)
    try:
        return get_all_databases(host, port, timeout)
    except ThriftError as exc:
        raise CatalogError(str(exc)) from None


def hive_site(files: MetastoreFiles, settings: Settings) -> str:
    """The metastore's configuration: its database (Derby under its home, or PostgreSQL when LAKEHOUSE_METASTORE_DB
    names one), the schema created on first start, Hive's asynchronous logging off (it needs the LMAX disruptor, which
    pyspark does not ship: the JVM dies without this); on an S3 root, S3A's options (it checks a table's location when
    it names it; the credentials come from its environment)."""
    properties = {
        **_connection(files, settings),
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": files.warehouse.as_uri(),
        "hive.async.log.enabled": "false",
        **settings.s3.hadoop_options(),
    }
    rows = "\n".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
                     for k, v in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}\n</configuration>\n'


def _connection(files: MetastoreFiles, settings: Settings) -> dict[str, str]:
    """The metastore's database: PostgreSQL when LAKEHOUSE_METASTORE_DB names one, else Derby under its home."""
    if settings.metastore_db:
        database = postgres_address(settings.metastore_db)
        return {"javax.jdo.option.ConnectionURL": database.jdbc_url,
                "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
                "javax.jdo.option.ConnectionUserName": database.user,
                "javax.jdo.option.ConnectionPassword": database.password,
                # HikariCP checks a pooled connection before lending it: a PostgreSQL restarted under the metastore
                # costs its next call a new connection, not an error (BoneCP, DataNucleus' default, is absent)
                "datanucleus.connectionPoolingType": "HikariCP"}
    return {"javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={files.derby};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver"}


def backend(settings: Settings) -> str:
    """`derby (<path>)` or `postgresql (host:port/database)`: where the catalog `up` starts keeps its tables."""
    if settings.metastore_db:
        database = postgres_address(settings.metastore_db)
        return f"postgresql ({database.host}:{database.port}/{database.database})"
    return f"derby ({MetastoreFiles(settings.layout.catalog).derby})"


def _java_path() -> str:
    try:
        return java("the Hive metastore")
    except RuntimeError as exc:
        raise CatalogError(str(exc)) from None


def _classpath(files: MetastoreFiles, settings: Settings) -> str:

    cached = [str(j) for pattern in METASTORE_JARS for j in sorted(settings.jars_dir.glob(pattern))]
    return ":".join([f"{spark_home() / 'jars'}/*", *cached, str(files.conf)])


def create_schema(files: MetastoreFiles, settings: Settings) -> None:
    """On PostgreSQL, every table of the metastore's model created before it serves a call (DataNucleus' SchemaTool
    over the model the hive-metastore jar carries, package.jdo; idempotent: what exists stays). Left to the metastore,
    a table is created on its first use, and on PostgreSQL that DDL can wait for a lock the transaction of another
    call holds while that call waits in the JVM for the DDL's lock: seen as a cluster's first CREATE DATABASE that
    never answered. (Derby's schema is still created on the first start: one JVM owns it.)"""

    [jar] = sorted((spark_home() / "jars").glob("hive-metastore-*.jar"))[-1:]
    model = files.home / "package.jdo"
    with zipfile.ZipFile(jar) as archive:
        model.write_bytes(archive.read("package.jdo"))
    properties = files.conf / "schema.properties"  # it holds the database's password: owner-only
    properties.touch(mode=0o600)
    properties.chmod(0o600)
    properties.write_text("".join(f"{key}={value}\n" for key, value in {
        "javax.jdo.PersistenceManagerFactoryClass": "org.datanucleus.api.jdo.JDOPersistenceManagerFactory",
        **_connection(files, settings), **HIVE_DATANUCLEUS}.items()))
    result = subprocess.run([_java_path(), METASTORE_JIT, "-cp", _classpath(files, settings), SCHEMA_TOOL_CLASS,
                             "-create", "-api", "JDO", "-props", str(properties), str(model)],
                            capture_output=True, text=True, timeout=START_TIMEOUT_SECONDS)
    with files.log.open("a") as log_file:
        log_file.write(result.stdout + result.stderr)
    if result.returncode != 0 or "completed successfully" not in result.stdout:
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        raise CatalogError(f"the metastore's schema could not be created in {backend(settings)}: "
                           f"{(lines or ['no output'])[-1][:300]}; log: {files.log}")


def command(files: MetastoreFiles, settings: Settings, port: int) -> list[str]:
    return [_java_path(), METASTORE_HEAP, METASTORE_JIT, f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
            f"-Dderby.stream.error.file={files.home / 'derby.log'}", "-cp", _classpath(files, settings), METASTORE_CLASS,
            "-p", str(port)]


def up(settings: Settings) -> tuple[bool, str]:
    """Start the metastore in the background unless one answers at the URI; wait until it answers.
    Returns (started, message); raises CatalogError saying why it cannot start."""
    uri = settings.metastore_uri
    host, port = host_port(uri)
    if answers(uri):
        return False, f"a metastore already answers at {uri}"
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise CatalogError(f"no metastore answers at {uri}, and `lakehouse catalog up` starts one on this host only "
                           "(127.0.0.1 or localhost): start that one, or point LAKEHOUSE_METASTORE_URI here")
    if port_taken("127.0.0.1", port):
        raise CatalogError(f"port {port} on {host} is taken by another program (the metastore needs it): free it, or "
                           "set LAKEHOUSE_METASTORE_URI to another thrift://host:port")
    files = prepared(settings)
    if settings.metastore_db:
        create_schema(files, settings)
    process = files.daemon.start_and_wait(  # outlives this command
        command(files, settings, port), lambda: answers(uri, timeout=2.0), CatalogError, what="the metastore",
        where=f" at {uri}", timeout=START_TIMEOUT_SECONDS, stop_timeout=STOP_TIMEOUT_SECONDS, poll=0.5,
        env={**os.environ, **settings.s3.environment()}, cwd=files.home)
    return True, f"catalog up at {uri} (pid {process.pid}; {backend(settings)}; log {files.log})"


def prepared(settings: Settings) -> MetastoreFiles:
    """The metastore's directories and hive-site.xml (it may hold the database's password: owner-only)."""
    files = MetastoreFiles(settings.layout.catalog)
    files.conf.mkdir(parents=True, exist_ok=True)
    files.warehouse.mkdir(parents=True, exist_ok=True)
    site = files.conf / "hive-site.xml"
    site.touch(mode=0o600)
    site.chmod(0o600)
    site.write_text(hive_site(files, settings))
    return files


def serve(settings: Settings) -> None:
    """The metastore in the foreground, in place of this process (a container's command: docker-compose.yaml), on
    the URI's port, every interface."""
    _, port = host_port(settings.metastore_uri)
    files = prepared(settings)
    if settings.metastore_db:
        create_schema(files, settings)
    os.chdir(files.home)
    argv = command(files, settings, port)
    os.execve(argv[0], argv, {**os.environ, **settings.s3.environment()})


def down(settings: Settings) -> str:
    """Stop the metastore `up` started, waiting until it has exited."""
    return MetastoreFiles(settings.layout.catalog).daemon.stop_saying(
        "catalog stopped", "no metastore started by `lakehouse catalog up` runs", STOP_TIMEOUT_SECONDS)


def status(settings: Settings) -> dict:
    """`uri`, `up`, `backend` (`derby (...)` or `postgresql (...)` for the one `catalog up` runs here, `external` for
    another that answers), `warehouse` (its databases' default location, for the one run here), `databases` (when it
    answers)."""
    uri = settings.metastore_uri
    files = MetastoreFiles(settings.layout.catalog)
    try:
        names = sorted(databases(uri, timeout=3.0))
    except CatalogError:
        names = None
    ours = files.daemon.running_pid() is not None or names is None
    return {"uri": uri, "up": names is not None, "backend": backend(settings) if ours else "external",
            "warehouse": files.warehouse.as_uri() if ours else None, "databases": names}


def render(info: dict) -> str:
    """`lakehouse catalog status`'s lines."""
    if not info["up"]:
        return f"no catalog answers at {info['uri']} (start one: lakehouse catalog up)"
    lines = [f"catalog answers at {info['uri']} ({info['backend']}): {len(info['databases'])} database(s)"]
    return "\n".join([*lines, *(f"  {name}" for name in info["databases"])])
