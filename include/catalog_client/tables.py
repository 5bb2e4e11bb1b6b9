"""Every table of the lakehouse by name in the catalog: the sink tables and their quarantines as `<first segment of
the path>.<the rest>` (`gold/user_activity_5m` -> `gold.user_activity_5m`), the operational tables as `ops.<name>`;
each an external Delta table whose location is the table's URI (a path, or `s3a://`).

Registration goes through a Spark session on the catalog (`spark.sql.catalogImplementation=hive`): Spark writes the
entry Spark's readers expect (its provider, a placeholder schema; the real one is in the Delta log). It never drops a
table and never changes an entry the registry does not name; an entry of ours whose location moved (a lakehouse moved
to another root) is pointed at the new one, unless its old location still holds another lakehouse's Delta table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from include.catalog_client import answers
from include.records.alerts import ALERTS_TABLE
from include.records.batch_ledger import LEDGER_TABLE
from include.records.checkpoint_audit import AUDIT_TABLE
from include.records.maintenance_log import MAINTENANCE_TABLE
from include.records.quality_results import RESULTS_TABLE
from include.records.query_progress import PROGRESS_TABLE
from include.registry import Registry
from include.settings import Settings
from include.storage.paths import StoragePath

log = logging.getLogger(__name__)

OPS_DATABASE = "ops"
OPS_TABLES = (PROGRESS_TABLE, LEDGER_TABLE, AUDIT_TABLE, RESULTS_TABLE, ALERTS_TABLE, MAINTENANCE_TABLE)


@dataclass(frozen=True)
class NamedTable:
    """A lakehouse table and its name in the catalog."""

    name: str  # database.table
    location: StoragePath

    @property
    def database(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def uri(self) -> str:
        """The location as Spark writes it (s3a:// on S3)."""
        return self.location.uri


def catalog_name(table: str) -> str:
    """`gold/user_activity_5m` -> `gold.user_activity_5m`: the database is the path's first segment, the table the
    rest (further segments joined with `_`)."""
    database, _, rest = table.partition("/")
    if not database or not rest:
        raise ValueError(f"table {table!r} has no database segment (<database>/<table>)")
    return f"{database}.{rest.replace('/', '_')}"


def named_tables(settings: Settings, registry: Registry) -> list[NamedTable]:
    """Every table the registry's jobs write (sinks and quarantines) and the operational tables, by name."""
    return [NamedTable(catalog_name(t), settings.layout.table(t)) for t in registry.tables_written()] + ops_tables(
        settings)


def ops_tables(settings: Settings) -> list[NamedTable]:
    return [NamedTable(f"{OPS_DATABASE}.{name}", settings.layout.ops_table(name)) for name in OPS_TABLES]


def is_delta_table(location: StoragePath) -> bool:
    log_dir = location / "_delta_log"
    return log_dir.is_dir() and any(log_dir.glob("*.json"))


def _session_catalog(spark, name: str):
    """Spark's own catalog of the session (its entries only: no Delta table is opened) and `name`'s identifier."""
    jvm = spark._jvm
    database, table = name.split(".", 1)
    identifier = jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(table, jvm.scala.Option.apply(database))
    return spark._jsparkSession.sessionState().catalog(), identifier


def registered_location(spark, name: str) -> str | None:
    """The location the catalog records for `name`, or None when it has no such table (its entry only: a Delta table
    whose location moved away is still found)."""
    catalog, identifier = _session_catalog(spark, name)
    if not catalog.tableExists(identifier):
        return None
    return catalog.getTableMetadata(identifier).location().toString()


def repoint(spark, name: str, uri: str) -> None:
    """`name`'s entry pointed at `uri`, as ALTER TABLE SET LOCATION does, without opening the table at its old
    location (which may be gone: a moved lakehouse)."""
    from py4j.protocol import Py4JError

    catalog, identifier = _session_catalog(spark, name)
    table = catalog.getTableMetadata(identifier)
    location = spark._jvm.scala.Option.apply(spark._jvm.java.net.URI(uri if "://" in uri else f"file:{uri}"))
    defaults = []  # the rest of withNewStorage's parameters at their defaults (Spark's own command does the same)
    while True:
        try:
            defaults.append(getattr(table, f"withNewStorage$default${len(defaults) + 2}")())
        except Py4JError:
            break
    catalog.alterTable(table.withNewStorage(location, *defaults))


def same_location(recorded: str, uri: str) -> bool:
    """Spark records `file:/x` for `/x`, and `s3a://b/k` as it is."""
    def plain(value: str) -> str:
        return value.removeprefix("file://").removeprefix("file:").rstrip("/")

    return plain(recorded) == plain(uri)


def register(spark, settings: Settings, tables: list[NamedTable]) -> list[str]:
    """Register or correct `tables` (those whose Delta log exists) in the session's catalog; one line per change
    or per entry left alone, nothing for an entry already right."""
    changes = []
    databases = set()
    for table in tables:
        if not is_delta_table(table.location):
            continue  # registered when its job creates it, or by the next sync
        if table.database not in databases:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {table.database}")
            databases.add(table.database)
        recorded = registered_location(spark, table.name)
        if recorded is None:
            spark.sql(f"CREATE TABLE IF NOT EXISTS {table.name} USING DELTA LOCATION '{table.uri}'")
            changes.append(f"registered {table.name} at {table.uri}")
        elif same_location(recorded, table.uri):
            continue
        elif is_delta_table(settings.path(recorded)) and not str(settings.path(recorded)).startswith(
                str(settings.root)):
            changes.append(f"left {table.name} alone: it names the Delta table at {recorded}, not this lakehouse's "
                           f"{table.uri} (drop that entry to name ours)")
        else:
            repoint(spark, table.name, table.uri)
            changes.append(f"moved {table.name} from {recorded} to {table.uri}")
    for line in changes:
        log.info("catalog: %s", line)
    return changes


def on_catalog(spark) -> bool:
    """The session was built on the catalog (include/catalog_client: session_confs)."""
    return spark.conf.get("spark.sql.catalogImplementation", "in-memory") == "hive"


def register_or_warn(spark, settings: Settings, tables: list[NamedTable]) -> None:
    """`tables` named, when the session is on the catalog: at a job's start (never in a micro-batch: its tables and the
    operational ones), after a full maintenance (every table); a catalog that fails here is one warning, and the job
    or the maintenance goes on (`lakehouse catalog sync` later)."""
    if not on_catalog(spark):
        return
    try:
        if not answers(settings.metastore_uri, timeout=2.0):  # at once, not after Hive's retries (~45 s)
            raise ConnectionError(f"no metastore answers at {settings.metastore_uri}")
        register(spark, settings, tables)
    except Exception as exc:  # noqa: BLE001 - the catalog's failure must not stop a job
        log.warning("catalog: could not register %s (%s); going on without, `lakehouse catalog sync` registers them "
                    "later", ", ".join(t.name for t in tables), str(exc).splitlines()[0][:300])
