"""Delta's app transactions: a commit recorded as (app id, batch id), so that the same batch committed again (a replay
after a crash) writes nothing. Appends record it through their own command (spark_jobs/jvm DeltaBatchAppend); a
MERGE reads it from the session confs set here (:func:`recorded`)."""

from __future__ import annotations

from contextlib import AbstractContextManager

from pyspark.sql import DataFrame

from include.spark_session import session_confs

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def recorded(spark, app_id: str, batch_id: int) -> AbstractContextManager:
    """Session confs under which a Delta write commits (app_id, batch_id): the streaming query's own session, so that
    they touch no other writer."""
    return session_confs(spark, {TXN_APP_ID: app_id, TXN_VERSION: str(batch_id)})


def append_batch(rows: DataFrame, path: str, app_id: str, batch_id: int, read_version: int) -> int:
    """Append `rows` in one Delta commit that records (app_id, batch_id), as the `txnAppId` / `txnVersion` write
    options would, through the same Delta command but without its own "written already?" lookup: Delta 4.4
    answers it by reconstructing the table's state, a Spark job that costs a small batch twice its write
    (bench/micro_batch_cost.py). The caller answered it from the log at `read_version` (`delta_store.batch_check`)
    and holds the job's lease; a commit of this app id after that version (another holder's) makes Delta refuse
    this one (spark_jobs/jvm/lakehouse/DeltaBatchAppend.java). Returns the table's version holding the batch."""
    committed = rows.sparkSession._jvm.lakehouse.DeltaBatchAppend.append(rows._jdf, path, app_id, batch_id,
                                                                         read_version)
    return committed if committed >= 0 else read_version
