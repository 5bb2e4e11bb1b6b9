"""`lakehouse state <job>`: what a job's state store holds, read from its checkpoint with Spark's `state-metadata`
and `statestore` data sources (the job may be stopped; a running job's last committed batch is read).

Per operator: its stores (a transformWithState operator: one per state variable; a stream-stream join: one
per side), rows and keys in all and per partition, the skew ratio (max / median keys per partition, the
median floored at 1), bytes on disk per partition (RocksDB: the version's snapshot and the SST files it
references, plus changelogs since), the registered timers, and, with ``changes``, the state change feed
between two batches (Spark reads it from changelogs: `state_store.changelog_checkpointing: true`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from include import checkpoints
from include.checkpoints.state_files import partition_files, skew
from include.registry import Registry
from include.settings import Settings
from include.storage.paths import StoragePath

TIMER_PREFIX = "$"  # transformWithState's internal variables (timers, row counters) start with it
EXAMPLES = 20  # timers and changes listed per store


class StateUnavailable(ValueError):
    """The job has no state to read (stateless, or never ran)."""


def readable_state(settings: Settings, registry: Registry, job_id: str,
                   changes: tuple[int, int] | None = None) -> tuple[StoragePath, int]:
    """`job_id`'s checkpoint and last committed batch, once its state can be read and `changes` lies within it:
    checked from the checkpoint's files, without Spark (StateUnavailable, or ValueError for `changes`)."""
    job = registry.job(job_id)
    checkpoint = settings.layout.checkpoint(job.id)
    if not job.stateful:
        raise StateUnavailable(f"job {job.id!r} ({job.transform_kind}) keeps no state")
    batch = checkpoints.latest_committed_batch(checkpoint)
    if batch is None or not (checkpoint / "state").is_dir():
        raise StateUnavailable(f"job {job.id!r} has no committed state yet (checkpoint {checkpoint}): run it first")
    if changes and not 0 <= changes[0] <= changes[1] <= batch:
        raise ValueError(f"--changes {changes[0]}:{changes[1]}: batches must be in 0..{batch} (the last committed "
                         "batch), the first not after the second")
    return checkpoint, batch


def inspect_state(spark: SparkSession, settings: Settings, registry: Registry, job_id: str,
                  changes: tuple[int, int] | None = None) -> dict[str, Any]:
    """The report on `job_id`'s state (see the module's docstring)."""
    job = registry.job(job_id)
    checkpoint, batch = readable_state(settings, registry, job_id, changes)
    spark.streams.active  # noqa: B018 -- creates the state store coordinator, which the state reader needs
    operators = []
    for meta in spark.read.format("state-metadata").load(str(checkpoint)).collect():
        operators.append(_operator(spark, checkpoint, meta.asDict(), batch, changes))
    return {"job": job.id, "checkpoint": str(checkpoint), "batch": batch, "operators": operators}


def _stores(meta: dict) -> list[tuple[str, dict[str, str]]]:
    """(label, reader options) of each store of an operator."""
    name = meta["operatorName"]
    if name.startswith("transformWithState"):
        variables = json.loads(meta["operatorProperties"] or "{}").get("stateVariables", [])
        return [(f"variable {v['stateName']} ({v['stateVariableType']})", {"stateVarName": v["stateName"]})
                for v in variables if not v["stateName"].startswith(TIMER_PREFIX)]
    if name == "symmetricHashJoin":
        return [(f"{side} side", {"joinSide": side}) for side in ("left", "right")]
    return [(f"store {meta['stateStoreName']}", {"storeName": meta["stateStoreName"]})]


def _operator(spark: SparkSession, checkpoint: StoragePath, meta: dict, batch: int,
              changes: tuple[int, int] | None) -> dict[str, Any]:
    partitions = meta["numPartitions"]
    if meta["operatorName"] == "symmetricHashJoin" and meta["stateStoreName"] != "left-keyToNumValues":
        return {}  # a join has four stores per operator in the metadata: reported once, per side
    disk = [partition_files(checkpoint / "state" / str(meta["operatorId"]) / str(p), batch + 1).bytes
            for p in range(partitions)]
    stores = []
    for label, options in _stores(meta):
        reader = spark.read.format("statestore").option("operatorId", meta["operatorId"]).options(**options)
        stores.append({"store": label, **_distribution(reader.load(str(checkpoint)), partitions)})
        if changes:
            stores[-1]["changes"] = _changes(reader, checkpoint, changes)
    report: dict[str, Any] = {
        "operator_id": meta["operatorId"], "operator": meta["operatorName"], "partitions": partitions,
        "batches": [meta["minBatchId"], meta["maxBatchId"]], "stores": stores,
        "rows": sum(s["rows"] for s in stores), "bytes_per_partition": disk, "bytes": sum(disk),
    }
    if meta["operatorName"].startswith("transformWithState"):
        report["timers"] = _timers(spark, checkpoint, meta["operatorId"])
    return report


def _distribution(frame, partitions: int) -> dict[str, Any]:
    counts = {r["partition_id"]: (r["rows"], r["keys"]) for r in frame.groupBy("partition_id").agg(
        F.count(F.lit(1)).alias("rows"), F.count_distinct("key").alias("keys")).collect()}
    keys = [counts.get(p, (0, 0))[1] for p in range(partitions)]
    return {"rows": sum(r for r, _ in counts.values()), "keys": sum(keys), "keys_per_partition": keys,
            "skew": skew(keys)}


def _timers(spark: SparkSession, checkpoint: StoragePath, operator_id: int) -> dict[str, Any]:
    frame = (spark.read.format("statestore").option("operatorId", operator_id)
             .option("readRegisteredTimers", "true").load(str(checkpoint)))
    rows = frame.orderBy("expiration_timestamp_ms").collect()
    listed = [{"key": _plain(r["key"]), "expires": _iso(r["expiration_timestamp_ms"])} for r in rows[:EXAMPLES]]
    return {"count": len(rows), "keys": len({json.dumps(_plain(r["key"]), default=str) for r in rows}),
            "next": listed}


def _changes(reader, checkpoint: StoragePath, changes: tuple[int, int]) -> dict[str, Any]:
    try:
        frame = (reader.option("readChangeFeed", "true").option("changeStartBatchId", changes[0])
                 .option("changeEndBatchId", changes[1]).load(str(checkpoint)))
        rows = frame.orderBy("batch_id").collect()
    except Exception as exc:  # e.g. snapshot-only checkpoints, or a store Spark has no change feed for
        reason = spark_error(exc)
        return {"unavailable": f"{reason} (the state change feed is read from changelogs: it needs "
                               "`state_store.changelog_checkpointing: true` for the job, or `live` for the batches "
                               "of its live runs)"}
    per_batch: dict[str, dict[str, int]] = {}
    for r in rows:
        kinds = per_batch.setdefault(str(r["batch_id"]), {})
        kinds[r["change_type"]] = kinds.get(r["change_type"], 0) + 1
    examples = [{"batch": r["batch_id"], "change": r["change_type"], "key": _plain(r["key"]),
                 "value": _plain(r["value"]) if "value" in r else None} for r in rows[:EXAMPLES]]
    return {"from_batch": changes[0], "to_batch": changes[1], "per_batch": per_batch, "examples": examples}


def spark_error(exc: Exception) -> str:
    """The first line of Spark's own error (``[ERROR_CLASS] ...``) in an exception, else its first line."""
    text = str(exc)
    found = re.search(r"\[[A-Z][A-Z_.]+\][^\n]*", text)
    return (found.group(0) if found else text.strip().splitlines()[0])[:400]


def _plain(value: Any) -> Any:
    """A Row (struct) as a dict, recursively; timestamps as ISO text."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def render(report: dict[str, Any]) -> str:
    """The report as text: an operator per block, a store per line."""
    lines = [f"{report['job']}: state at batch {report['batch']} ({report['checkpoint']})"]
    for op in report["operators"]:
        lines.append(f"  operator {op['operator_id']} {op['operator']}: {op['partitions']} partitions, "
                     f"{op['rows']} rows, {op['bytes']} bytes on disk "
                     f"(per partition: {', '.join(str(b) for b in op['bytes_per_partition'])})")
        for store in op["stores"]:
            lines.append(f"    {store['store']}: {store['rows']} rows, {store['keys']} keys, per partition "
                         f"{store['keys_per_partition']}, skew {store['skew']}")
            change = store.get("changes")
            if change and "unavailable" in change:
                lines.append(f"      changes: unavailable: {change['unavailable']}")
            elif change:
                per_batch = "; ".join(f"batch {b}: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
                                      for b, kinds in change["per_batch"].items()) or "none"
                lines.append(f"      changes {change['from_batch']}..{change['to_batch']}: {per_batch}")
        if "timers" in op:
            timers = op["timers"]
            upcoming = ", ".join(f"{json.dumps(t['key'])} at {t['expires']}" for t in timers["next"][:3])
            lines.append(f"    timers: {timers['count']} on {timers['keys']} keys"
                         + (f"; next: {upcoming}" if upcoming else ""))
    return "\n".join(lines)


def state_operators(spark: SparkSession, checkpoint: StoragePath) -> list[dict]:
    """Spark's `state-metadata` of the checkpoint, with each store's key and value schema (`statestore`) and
    the partitions that hold the state of the last committed batch (Spark's operator metadata keeps the
    count the operator was first written with, also after an offline repartition)."""
    if not (checkpoint / "state").is_dir():
        return []
    rows = [r.asDict() for r in spark.read.format("state-metadata").load(str(checkpoint)).collect()]
    batch = checkpoints.latest_committed_batch(checkpoint)
    for row in rows:
        operator = checkpoint / "state" / str(row["operatorId"])
        version = (batch if batch is not None else -1) + 1  # state version = batch id + 1
        row["partitionsAtLatestBatch"] = sum(
            1 for part in operator.iterdir() if part.name.isdigit()
            and any(f.name.split(".")[0] == str(version) for f in part.iterdir() if f.is_file()))
        try:
            schema = (spark.read.format("statestore").option("operatorId", row["operatorId"])
                      .option("storeName", row["stateStoreName"]).load(str(checkpoint)).schema)
            row["keySchema"] = schema["key"].dataType.simpleString()
            row["valueSchema"] = schema["value"].dataType.simpleString()
        except Exception as exc:  # e.g. a join's stores, read per side: the metadata is still worth showing
            row["keySchema"] = row["valueSchema"] = f"? ({type(exc).__name__})"
    return rows
