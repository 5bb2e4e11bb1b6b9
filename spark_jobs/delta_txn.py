"""Delta's app transactions: a commit recorded as (app id, batch id), so that the same batch committed again (a replay
after a crash) writes nothing. Appends record it through their own command (spark_jobs/jvm DeltaBatchAppend); a
MERGE reads it from the session confs set here."""

from __future__ import annotations

from contextlib import AbstractContextManager

from include.spark_session import session_confs

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def recorded(spark, app_id: str, batch_id: int) -> AbstractContextManager:
    """Session confs under which a Delta write commits (app_id, batch_id): the streaming query's own session, so that
    they touch no other writer."""
    return session_confs(spark, {TXN_APP_ID: app_id, TXN_VERSION: str(batch_id)})
