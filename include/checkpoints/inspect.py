"""`lakehouse checkpoint inspect`: what a job's checkpoint holds, read without touching it.

Everything here is read from files (offset and commit logs, the fingerprint, the sink tables' Delta
logs); the state operators come from Spark's `state-metadata` / `statestore` sources, read by the
caller (spark_jobs.checkpoint_actions) and passed in.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from include.checkpoints import reader
from include.checkpoints.plan import plan_job, read_fingerprint
from include.registry import JobSpec, Registry
from include.settings import Settings
from include.storage.paths import StoragePath


def committed_versions(table: StoragePath, app_id: str) -> dict[int, int]:
    """{batch id: Delta version} of the commits of `table` that carry `app_id`'s transaction."""
    found: dict[int, int] = {}
    for log in sorted((table / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            txn = json.loads(line).get("txn") if '"txn"' in line else None
            if txn and txn.get("appId") == app_id:
                found[int(txn["version"])] = int(log.stem)
    return found


def inspect(settings: Settings, registry: Registry, job: JobSpec,
            state_operators: list[dict] | None = None) -> dict[str, Any]:
    """A report of `job`'s checkpoint (the checkpoint may be missing: `exists` is then false)."""
    checkpoint = settings.layout.checkpoint(job.id)
    files = list(checkpoint.rglob_files()) if checkpoint.is_dir() else []
    last_offsets, last_committed = reader.latest_offsets_batch(checkpoint), reader.latest_committed_batch(checkpoint)
    conf = reader.stored_conf(checkpoint)
    watermark = reader.committed_watermark_ms(checkpoint)
    query_id, app_id = reader.query_id(checkpoint), reader.writer_app_id(checkpoint, job.id)
    sinks = []
    for table in job.tables_written():
        versions = committed_versions(settings.layout.table(table), app_id) if app_id else {}
        upto = [b for b in versions if last_committed is not None and b <= last_committed]
        batch = max(upto) if upto else None
        sinks.append({"table": table, "last_batch_written": batch,
                      "delta_version": versions[batch] if batch is not None else None})
    plan = plan_job(job, registry, checkpoint, settings=settings)
    return {
        "job": job.id,
        "checkpoint": str(checkpoint),
        "exists": (checkpoint / "offsets").is_dir(),
        "query_id": query_id,
        "last_offsets_batch": last_offsets,
        "last_committed_batch": last_committed,
        "uncommitted_batch": last_offsets if last_offsets is not None and last_offsets != last_committed else None,
        "source_offsets": [json.loads(o) for o in reader.source_offsets(checkpoint, last_offsets)]
        if last_offsets is not None else [],
        "shuffle_partitions": {"recorded": reader.shuffle_partitions(checkpoint),
                               "configured": job.state_store.shuffle_partitions},
        "pinned_confs": conf,
        "watermark": datetime.fromtimestamp(watermark / 1000, UTC).isoformat() if watermark else None,
        "files": len(files),
        "bytes": sum(size for _, size in files),
        "fingerprint_recorded": read_fingerprint(checkpoint) is not None,
        "plan": plan.as_dict(),
        "sinks": sinks,
        "state_operators": state_operators,
    }


def render(report: dict[str, Any]) -> str:
    """The report as a person reads it."""
    if not report["exists"]:
        return f"{report['job']}: no checkpoint at {report['checkpoint']} (the job starts from its inputs' beginning)"
    partitions = report["shuffle_partitions"]
    lines = [
        f"job                 {report['job']}",
        f"checkpoint          {report['checkpoint']} ({report['files']} files, {report['bytes']} bytes)",
        f"query id            {report['query_id']}",
        f"last batch          committed {report['last_committed_batch']}"
        + (f", batch {report['uncommitted_batch']} planned but not committed" if report["uncommitted_batch"] is not None
           else ""),
        f"watermark           {report['watermark'] or '-'}",
        f"shuffle partitions  recorded {partitions['recorded']}, configured {partitions['configured']}",
        f"plan                {report['plan']['mode']}" + (f": {report['plan']['command']}" if report['plan']['command']
                                                             else ""),
    ]
    for i, offset in enumerate(report["source_offsets"]):
        lines.append(f"source {i} offset     {json.dumps(offset, sort_keys=True)}")
    for sink in report["sinks"]:
        lines.append(f"sink {sink['table']:<28} batch {sink['last_batch_written']} -> Delta version {sink['delta_version']}")
    for op in report["state_operators"] or []:
        lines.append(f"state operator {op['operatorId']}    {op['operatorName']} ({op['stateStoreName']}): "
                     f"{op['partitionsAtLatestBatch']} partitions at the last batch (first written with "
                     f"{op['numPartitions']}), batches {op['minBatchId']}..{op['maxBatchId']}; "
                     f"key {op.get('keySchema', '?')}, value {op.get('valueSchema', '?')}")
    return "\n".join(lines)
