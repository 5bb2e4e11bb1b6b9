"""The catalog as a client sees it, below everything that builds a Spark session: whether a metastore answers (one
Thrift call, :mod:`.thrift`, no Thrift library), the confs of a session on it, and every table's name and its
registration (:mod:`.tables`, which each job does as it starts). The metastore the product runs is include/catalog,
above."""

from __future__ import annotations

import logging

from include.catalog_client.thrift import ThriftError, get_all_databases
from include.settings import Settings
from include.settings import metastore_host_port as host_port

log = logging.getLogger(__name__)

CLIENT_TIMEOUT = "20s"  # a driver's wait for one metastore call


def answers(uri: str, timeout: float = 3.0) -> bool:
    """A metastore at `uri` answers a `get_all_databases` call."""
    host, port = host_port(uri)
    try:
        get_all_databases(host, port, timeout)
    except ThriftError:
        return False
    return True


_warned: set[str] = set()  # the URIs this process said it runs without


def session_confs(settings: Settings) -> dict[str, str]:
    """The Spark confs of a session on the catalog, when its metastore answers (the one configured, or the local
    default's); {} otherwise, with one warning per process when one was configured: jobs run without the catalog
    (it is never on a micro-batch's path) and `lakehouse catalog sync` names their tables later."""
    uri = settings.metastore_uri
    if answers(uri, timeout=2.0):
        # a metastore that stops answering mid-call (its own database gone) fails a call in seconds, not Hive's 600
        return {"spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": uri,
                "spark.hadoop.hive.metastore.client.socket.timeout": CLIENT_TIMEOUT}
    if settings.metastore_uri_set and uri not in _warned:
        _warned.add(uri)
        log.warning("no catalog answers at %s (LAKEHOUSE_METASTORE_URI): running without it; `lakehouse catalog "
                    "sync` registers the tables once it is back", uri)
    return {}
