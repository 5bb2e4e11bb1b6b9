"""The session settings a job's streaming query starts with: no-data batches, shuffle partitions, the state store and
its encoding, and the heap its state lives in. A new query copies them when it starts; Spark pins most of them in the
checkpoint."""

from __future__ import annotations

from pyspark.sql import SparkSession

from include.registry import (
    PROCESSORS,
    JobSpec,
    SessionAggregate,
    StatefulProcess,
    StreamJoin,
    Trigger,
    WindowAggregate,
)
from include.registry.operations import jvm_memory_bytes
from include.spark_session import HDFS_PROVIDER, ROCKSDB_PROVIDER

STATE_ENCODING = "spark.sql.streaming.stateStore.encodingFormat"


def emits_on_watermark(job: JobSpec) -> bool:
    """Some of the job's output is emitted when the watermark passes it: closed windows and sessions, the
    unmatched rows of an outer join, event-time timers."""
    transform = job.transform
    if isinstance(transform, StreamJoin):
        return transform.how != "inner"
    if isinstance(transform, StatefulProcess):
        return PROCESSORS[transform.processor].time_mode == "EventTime"
    return isinstance(transform, (WindowAggregate, SessionAggregate))


def runs_no_data_batches(job: JobSpec, trigger: Trigger | None) -> bool:
    """Whether the run lets Spark plan batches without new input (for what a watermark or a timer has made due).

    Spark runs one after every batch of a processing-time stateful processor (its timers may be due): under
    available-now that never ends, so such a run takes batches with new input only. On its upstream's commits, a
    job that emits nothing on the watermark would run one a second after each batch only to drop expired state,
    which its next batch drops as well."""
    if trigger is not None and trigger.available_now and job.processing_time_timers:
        return False
    return not (trigger is not None and trigger.on_upstream_commit and not emits_on_watermark(job))


def configure_session(spark: SparkSession, job: JobSpec, shuffle_partitions: int, trigger: Trigger | None = None) -> None:
    """Session confs a new query picks up (Spark pins most of them in the checkpoint)."""
    state = job.state_store
    conf = spark.conf
    conf.set("spark.sql.streaming.noDataMicroBatches.enabled", str(runs_no_data_batches(job, trigger)).lower())
    conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        ROCKSDB_PROVIDER if state.provider == "rocksdb" else HDFS_PROVIDER,
    )
    conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
        str(state.changelog_in(trigger)).lower(),
    )
    conf.set("spark.sql.streaming.minBatchesToRetain", str(state.min_batches_to_retain))


def state_encoding(job: JobSpec) -> dict[str, str]:
    """A processor's new checkpoint encodes its state in Avro, whose schema may evolve (fields added or removed, types
    widened) without a new checkpoint; the encoding is pinned in each checkpoint (older ones keep UnsafeRow). Set
    only while the query starts (it copies the session then): Spark refuses Avro for other operators
    (aggregations), which later queries of the same session may run."""
    return {STATE_ENCODING: "avro"} if isinstance(job.transform, StatefulProcess) else {}


def state_memory_bytes(spark: SparkSession) -> int | None:
    """The heap the job's state lives in, as the health check measures it: in local mode the driver's JVM (its
    executors run there), else an executor's (spark.executor.memory)."""
    context = spark.sparkContext
    if context.master.startswith("local"):
        return int(context._jvm.java.lang.Runtime.getRuntime().maxMemory())
    return jvm_memory_bytes(context.getConf().get("spark.executor.memory", "1g"))
