"""Applying checkpoint plans (`lakehouse checkpoint <mode> <job>...`): full-refresh, reset-checkpoint,
repartition, rollback (spark_jobs/rollback.py); and reading the state operators for `lakehouse checkpoint inspect`.

Guardrails: nothing is touched while a target job holds its lease (the holder is named); a job with
`reset_allowed: false` refuses the destructive modes; a full refresh whose downstream jobs would be left
inconsistent needs `--cascade`. A checkpoint is never deleted in place: each action moves (full-refresh,
reset-checkpoint) or copies (repartition) it aside as `_checkpoints/<job>.reset-<n>`, the `--keep` most
recent kept. Every action, dry runs included, is a row in `_ops/checkpoint_audit`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from include import checkpoints
from include.checkpoints.plan import (
    downstream_jobs,
    plan_job,
    read_fingerprint,
    write_fingerprint,
    write_start_position,
)
from include.ops import checkpoint_audit, lease
from include.registry import JobSpec, Registry, Trigger
from include.settings import Settings
from spark_jobs import rollback

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ACTION_HELP = {
    "full-refresh": "empty the sink tables (history kept), new checkpoint, reprocess all source data",
    "reset-checkpoint": "keep the sink table, new checkpoint at a source position",
    "repartition": "move the state to the registry's shuffle partitions (nothing reprocessed)",
    "rollback": "checkpoint and tables back to what batch B committed (_ops/batch_ledger); a re-run repeats it",
}
APPLIED_MODES = tuple(ACTION_HELP)
COMMAND_HELP = {**ACTION_HELP, "verify": "after an action: the plan is `resume` and an available-now run resumes from "
                                         "the checkpoint and commits (--no-run: the plan and last batch only)"}
DESTRUCTIVE = ("full-refresh", "reset-checkpoint", "rollback")


class ActionRefused(ValueError):
    """The action would leave something inconsistent, or the registry forbids it."""


@dataclass(frozen=True)
class Request:
    mode: str
    jobs: tuple[str, ...]
    cascade: bool = False
    dry_run: bool = False
    partitions: int | None = None
    from_version: int | None = None
    from_timestamp: str | None = None
    from_latest: bool = False
    to_batch: int | None = None
    keep: int = 5
    actor: str = ""

    def starting(self) -> dict[str, str]:
        """Delta source options of a reset's new checkpoint."""
        if self.from_version is not None:
            return {"startingVersion": str(self.from_version)}
        if self.from_timestamp is not None:
            return {"startingTimestamp": self.from_timestamp}
        return {"startingVersion": "latest"}


def apply(spark: SparkSession | None, settings: Settings, registry: Registry, request: Request) -> list[dict]:
    """Apply `request` to its jobs (and, with --cascade, their downstream jobs); returns the audit rows.
    A dry run needs no Spark session (`spark` None), and notes jobs that run now instead of refusing."""
    if request.mode not in APPLIED_MODES:
        raise ActionRefused(f"unknown mode {request.mode!r} (known: {', '.join(APPLIED_MODES)})")
    jobs = _targets(registry, request)
    # {job: {table: version}} a rollback restores, found while checking (empty for the other modes)
    restore = {job_id: _check_allowed(settings, registry, registry.job(job_id), request) for job_id in jobs}
    actor = request.actor or checkpoint_audit.default_actor()
    rows = [_audit_row(settings, registry, registry.job(j), request, actor) for j in jobs]
    if request.dry_run:
        for row in rows:
            running = " (it runs now: it must be stopped first)" if lease.is_held(settings, row["job"]) else ""
            row.update(outcome="dry-run",
                       detail=f"would {_describe(settings, registry, registry.job(row['job']), request, restore[row['job']])}"
                              f"{running}")
        checkpoint_audit.record(settings, rows)
        return rows
    try:
        for row in rows:
            job = registry.job(row["job"])
            row["detail"] = _describe(settings, registry, job, request, restore[job.id])
            row["archived_to"] = str(_reset(spark, settings, registry, job, request, restore[job.id]))
        if request.mode == "full-refresh":  # rebuild, upstream first, from all source data
            from spark_jobs.runner import run_job

            for row in rows:
                run_job(spark, settings, registry, row["job"], Trigger(available_now=True))
        for row in rows:
            row.update(outcome="done", **_state(settings, registry.job(row["job"]), "after"))
    except Exception as exc:
        for row in rows:
            if row["outcome"] != "done":
                row.update(outcome="failed", detail=f"{row['detail']}; failed: {type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        checkpoint_audit.record(settings, [r for r in rows if r["outcome"]])
        for job_id in jobs:
            _prune(settings, job_id, request.keep)
    return rows


def verify(spark: SparkSession | None, settings: Settings, registry: Registry, jobs: list[str], *,
           run: bool = True, actor: str = "") -> list[dict]:
    """Check the jobs after an action, upstream first: each plan is `resume` again and, with `run`, an
    available-now run resumes from the checkpoint and commits what is pending (after a rollback: the undone
    batches again, on the same input). Audited as mode `verify`; a job that fails stops the check."""
    from spark_jobs.runner import run_job

    actor = actor or checkpoint_audit.default_actor()
    rows = []
    try:
        for job_id in [j for j in registry.order if j in jobs]:
            job = registry.job(job_id)
            request = Request("verify", (job_id,), actor=actor)
            rows.append(row := _audit_row(settings, registry, job, request, actor))
            plan = json.loads(row["plan"])
            if plan["mode"] != "resume":
                raise ActionRefused(f"job {job_id!r}: its plan is {plan['mode']}, not resume: `lakehouse checkpoint "
                                    f"plan {job_id}` says why")
            if run:  # takes the job's lease: refused (LeaseHeld, naming the holder) while the job runs
                run_job(spark, settings, registry, job_id, Trigger(available_now=True))
            row.update(outcome="done", **_state(settings, job, "after"))
            before, after = row["batch_before"], row["batch_after"]
            ran = ("no run" if not run else "an available-now run found nothing new" if after == before
                   else f"an available-now run committed batches {0 if before is None else before + 1}..{after}")
            row["detail"] = f"plan resume; {ran}; last committed batch {after}"
            log.info("job=%s: verified: %s", job_id, row["detail"])
    except Exception as exc:
        if rows and rows[-1]["outcome"] != "done":
            rows[-1].update(outcome="failed", detail=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        checkpoint_audit.record(settings, rows)
    return rows


def _targets(registry: Registry, request: Request) -> list[str]:
    jobs = [registry.job(j).id for j in request.jobs]
    if request.mode == "full-refresh":
        downstream = [d for j in jobs for d in downstream_jobs(registry, j) if d not in jobs]
        if downstream and not request.cascade:
            raise ActionRefused(
                f"full-refresh of {', '.join(jobs)} rebuilds tables that {', '.join(dict.fromkeys(downstream))} "
                "read: their state and tables would no longer match; add --cascade to rebuild them too")
        jobs += downstream
    return [j for j in registry.order if j in jobs]


def _check_allowed(settings: Settings, registry: Registry, job: JobSpec, request: Request) -> dict[str, int]:
    """Raise unless `request` may act on `job`; for a rollback, the {table: version} it restores."""
    if lease.is_held(settings, job.id) and not request.dry_run:
        raise lease.LeaseHeld(f"{lease.describe_holder(job.id, lease.read_lease(settings, job.id))}; stop it first "
                              f"(lakehouse stop {job.id} --wait 120)")
    if request.mode in DESTRUCTIVE and not job.reset_allowed:
        raise ActionRefused(f"job {job.id!r} has reset_allowed: false in the registry: {request.mode} would discard "
                            "its checkpoint; change the registry first if this is intended")
    checkpoint = settings.layout.checkpoint(job.id)
    if request.mode == "reset-checkpoint":
        if any(s.kind == "landing" for s in job.sources):
            raise ActionRefused(f"job {job.id!r} reads landing files, which have no versions to start from: use "
                                "full-refresh (it keeps no state worth keeping) or move new files in only")
        if request.from_version is not None and len(job.sources) > 1:
            raise ActionRefused(f"job {job.id!r} reads {len(job.sources)} tables: --from-version names a version "
                                "of one table; use --from-timestamp or --from-latest")
        if sum((request.from_version is not None, request.from_timestamp is not None, request.from_latest)) != 1:
            raise ActionRefused("reset-checkpoint needs exactly one of --from-version, --from-timestamp, --from-latest")
    if request.mode == "repartition":
        wanted = request.partitions or job.state_store.shuffle_partitions
        if wanted != job.state_store.shuffle_partitions:
            raise ActionRefused(f"job {job.id!r}: the registry says state_store.shuffle_partitions: "
                                f"{job.state_store.shuffle_partitions}; set it to {wanted} first, so the job runs "
                                "with the repartitioned state")
        if checkpoints.shuffle_partitions(checkpoint) is None:
            raise ActionRefused(f"job {job.id!r} has no checkpoint at {checkpoint}: nothing to repartition")
        if not job.stateful:
            raise ActionRefused(f"job {job.id!r} keeps no state: its shuffle partitions need no repartition")
    if request.mode == "rollback":
        shared = [t for t in job.tables_written() if len(registry.writers_of(t)) > 1]
        if shared:
            others = sorted({w.id for t in shared for w in registry.writers_of(t)} - {job.id})
            raise ActionRefused(f"job {job.id!r} shares {', '.join(shared)} with {', '.join(others)}: restoring the "
                                "table would undo their rows too; use full-refresh (it removes this job's rows only)")
        if len(request.jobs) != 1 or request.to_batch is None:
            raise ActionRefused("rollback takes one job and --to-batch B (batch ids are per job)")
        return rollback.rollback_versions(settings, registry, job, request.to_batch)
    return {}


def _audit_row(settings, registry, job: JobSpec, request: Request, actor: str) -> dict:
    plan = plan_job(job, registry, settings.layout.checkpoint(job.id))
    return {"at": datetime.now(UTC), "actor": actor, "job": job.id, "mode": request.mode, "dry_run": request.dry_run,
            "outcome": "", "detail": "", "plan": json.dumps(plan.as_dict(), default=str), "archived_to": None,
            **_state(settings, job, "before"), "batch_after": None, "versions_after": None}


def _state(settings: Settings, job: JobSpec, when: str) -> dict:
    from include.storage import delta as delta_store

    versions = {t: delta_store.latest_version(settings.layout.table(t)) for t in job.tables_written()
                if delta_store.table_exists(settings.layout.table(t))}
    return {f"batch_{when}": checkpoints.latest_committed_batch(settings.layout.checkpoint(job.id)),
            f"versions_{when}": json.dumps(versions)}


def _describe(settings: Settings, registry: Registry, job: JobSpec, request: Request, versions: dict[str, int]) -> str:
    checkpoint = settings.layout.checkpoint(job.id)
    if request.mode == "full-refresh":
        emptied = ", ".join(t if own_rows(registry, job, t) is None else f"its rows of {t} ({own_rows(registry, job, t)})"
                            for t in job.tables_written())
        return (f"move {checkpoint} aside, empty {emptied} (a new Delta version each; the "
                "history is kept) and rebuild them from all source data (available-now)")
    if request.mode == "rollback":
        return (f"copy {checkpoint} aside; restore {', '.join(f'{t} to version {v}' for t, v in versions.items())}; "
                f"remove batches {request.to_batch + 1}..{checkpoints.latest_committed_batch(checkpoint)} from the "
                "checkpoint: running the job again re-runs them on the same input")
    if request.mode == "repartition":
        return (f"copy {checkpoint} aside and repartition its state from {checkpoints.shuffle_partitions(checkpoint)} "
                f"to {job.state_store.shuffle_partitions} partitions (nothing is reprocessed)")
    return f"move {checkpoint} aside; keep {job.sink.table}; " + _position_effect(settings, job, request)


def _position_effect(settings: Settings, job: JobSpec, request: Request) -> str:
    """What a reset to the requested position may miss or repeat, per source table, in plain words."""
    from include.storage import delta as delta_store

    checkpoint = settings.layout.checkpoint(job.id)
    batch = checkpoints.latest_committed_batch(checkpoint)
    offsets = [json.loads(o) for o in checkpoints.source_offsets(checkpoint, batch)] if batch is not None else []
    parts = []
    for source, offset in zip(job.sources, offsets or [{}] * len(job.sources), strict=False):
        read_to = offset.get("reservoirVersion")
        latest = delta_store.latest_version(settings.layout.table(source.name))
        done = f"the old checkpoint had read {source.name} up to version {read_to}" if read_to is not None \
            else f"the old checkpoint had not read {source.name}"
        if request.from_latest:
            effect = f"versions after {read_to if read_to is not None else -1} up to {latest} are NOT read (missed)"
        elif request.from_timestamp is not None:
            effect = (f"it starts at the first version committed at or after {request.from_timestamp}: versions "
                      "between the old position and that one are missed, versions before the old position read again")
        else:
            start = request.from_version
            if read_to is None or start > read_to:
                effect = f"versions {read_to if read_to is not None else 0}..{start - 1} are NOT read (missed)"
            else:
                effect = f"versions {start}..{read_to} are read again: their rows are written to {job.sink.table} again"
        parts.append(f"{done}; from now on {effect}")
    return "; ".join(parts)


def _reset(spark: SparkSession, settings: Settings, registry: Registry, job: JobSpec, request: Request,
           versions: dict[str, int]) -> Path | None:
    checkpoint = settings.layout.checkpoint(job.id)
    if request.mode == "rollback":
        archived = _archive(settings, job.id, copy=True)
        rollback.restore_tables(spark, settings, versions)
        rollback.truncate_checkpoint(checkpoint, job, request.to_batch)
        log.info("job=%s: rolled back to batch %d (%s)", job.id, request.to_batch, versions)
        return archived
    if request.mode == "repartition":
        from spark_jobs.runner import configure_session

        archived = _archive(settings, job.id, copy=True)
        configure_session(spark, job, job.state_store.shuffle_partitions)  # the state store the job writes with
        spark.streams.active  # noqa: B018 - starts the state store coordinator, as a first query would
        spark._streamingCheckpointManager.repartition(str(checkpoint), job.state_store.shuffle_partitions)
        recorded = read_fingerprint(checkpoint)
        if recorded is not None:
            write_fingerprint(checkpoint, {**recorded, "shuffle_partitions": job.state_store.shuffle_partitions})
        log.info("job=%s: state repartitioned to %d partitions", job.id, job.state_store.shuffle_partitions)
        return archived
    archived = _archive(settings, job.id, copy=False)
    if request.mode == "full-refresh":
        for table in job.tables_written():
            _empty(spark, settings.layout.table(table), own_rows(registry, job, table))
    else:
        write_start_position(checkpoint, request.starting())
    return archived


def _archive(settings: Settings, job_id: str, copy: bool) -> Path | None:
    """Move (or copy) the job's checkpoint to the next `<job>.reset-<n>`; None when there is none."""
    checkpoint = settings.layout.checkpoint(job_id)
    if not checkpoint.exists():
        return None
    existing = settings.layout.archived_checkpoints(job_id)
    target = settings.layout.archived_checkpoint(job_id, int(existing[-1].name.rsplit("-", 1)[1]) + 1 if existing
                                                 else 1)
    if copy:
        shutil.copytree(checkpoint, target)
    else:
        checkpoint.rename(target)
    log.info("job=%s: checkpoint %s %s to %s", job_id, checkpoint, "copied" if copy else "moved", target)
    return target


def _prune(settings: Settings, job_id: str, keep: int) -> None:
    for old in settings.layout.archived_checkpoints(job_id)[:-keep] if keep > 0 else []:
        shutil.rmtree(old)
        log.info("job=%s: removed old checkpoint %s (keeping the %d most recent)", job_id, old, keep)


def own_rows(registry: Registry, job: JobSpec, table: str) -> str | None:
    """The SQL condition on the rows of `table` that `job` wrote, when other jobs write it too (alert processors
    sharing a table: their alert types); None when the job is its only writer."""
    types = registry.own_alert_types(job, table)
    return None if types is None else f"alert_type IN ({', '.join(repr(t) for t in types)})"


def _empty(spark: SparkSession, path: Path, where: str | None = None) -> None:
    """Delete every row (`where`: those rows) as a new Delta version (history kept); an append-only table is
    opened for it."""
    from include.storage import delta as delta_store
    from spark_jobs.tables import appends_opened

    if not delta_store.table_exists(path):
        return
    with appends_opened(spark, path):
        spark.sql(f"DELETE FROM delta.`{path}`" + (f" WHERE {where}" if where else ""))


def state_operators(spark: SparkSession, checkpoint: Path) -> list[dict]:
    """Spark's `state-metadata` of the checkpoint, with each store's key and value schema (`statestore`) and
    the partitions that hold the state of the last committed batch (Spark's operator metadata keeps the
    count the operator was first written with, also after an offline repartition)."""
    if not (Path(checkpoint) / "state").is_dir():
        return []
    rows = [r.asDict() for r in spark.read.format("state-metadata").load(str(checkpoint)).collect()]
    batch = checkpoints.latest_committed_batch(checkpoint)
    for row in rows:
        operator = Path(checkpoint) / "state" / str(row["operatorId"])
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


def add_action_arguments(parser: argparse.ArgumentParser, mode: str) -> argparse.ArgumentParser:
    """The arguments of `lakehouse checkpoint <mode>` (and of `spark_jobs/checkpoint.py <mode>`)."""
    from spark_jobs.entrypoint import partition_count, positive_int

    parser.add_argument("jobs", nargs="+")
    parser.add_argument("--actor", default="", help="who asks (default: cli:<user>; the DAG: its run)")
    if mode == "verify":
        parser.add_argument("--no-run", action="store_true", help="check the plan only; run nothing")
        return parser
    parser.add_argument("--dry-run", action="store_true", help="say what would happen; change nothing")
    parser.add_argument("--keep", type=positive_int, default=5, help="old checkpoints kept aside (default 5)")
    if mode == "full-refresh":
        parser.add_argument("--cascade", action="store_true", help="also rebuild every downstream job")
    if mode == "repartition":
        parser.add_argument("--partitions", type=partition_count, help="(default: the registry's shuffle_partitions)")
    if mode == "reset-checkpoint":
        position = parser.add_mutually_exclusive_group(required=True)
        position.add_argument("--from-version", type=int, help="a version of the job's source table")
        position.add_argument("--from-timestamp", help="the first version committed at or after this time")
        position.add_argument("--from-latest", action="store_true", help="only what is committed from now on")
    if mode == "rollback":
        parser.add_argument("--to-batch", type=int, required=True, help="the batch whose result to go back to")
    return parser


def run_action(settings: Settings, args: argparse.Namespace) -> int:
    """Apply the checkpoint action `args` describes, in this process; prints one line per job."""
    from include.registry import load_registry
    from include.spark_session import get_spark

    registry = load_registry(settings.registry_path)
    mode = args.checkpoint_command
    if mode == "verify":
        for job_id in args.jobs:
            registry.job(job_id)  # an unknown job: KeyError naming the known ones
        spark = None if args.no_run else get_spark(settings, app_name="lakehouse-checkpoint")
        rows = verify(spark, settings, registry, list(args.jobs), run=not args.no_run, actor=args.actor)
        for row in rows:
            sys.stdout.write(f"{row['job']}: verify {row['outcome']}: {row['detail']}\n")
        return 0
    request = Request(
        mode=mode, jobs=tuple(args.jobs), cascade=getattr(args, "cascade", False), dry_run=args.dry_run,
        partitions=getattr(args, "partitions", None), from_version=getattr(args, "from_version", None),
        from_timestamp=getattr(args, "from_timestamp", None), from_latest=getattr(args, "from_latest", False),
        to_batch=getattr(args, "to_batch", None), keep=args.keep, actor=args.actor,
    )
    spark = None if request.dry_run else get_spark(settings, app_name="lakehouse-checkpoint")
    for row in apply(spark, settings, registry, request):
        sys.stdout.write(f"{row['job']}: {mode} {row['outcome']}: {row['detail']}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`spark-submit spark_jobs/checkpoint.py <mode> <job>... [options]` (the checkpoint_reset DAG)."""
    from include.logging_setup import configure_logging
    from include.ops.launch import report_failure
    from include.settings import load_settings

    parser = argparse.ArgumentParser(prog="spark_jobs/checkpoint.py", description=main.__doc__)
    modes = parser.add_subparsers(dest="checkpoint_command", required=True)
    for mode, text in COMMAND_HELP.items():
        add_action_arguments(modes.add_parser(mode, help=text), mode)
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        settings.require_writable_root()
    except ValueError as exc:
        return report_failure(f"lakehouse checkpoint {args.checkpoint_command}", exc)
    configure_logging(settings)
    try:
        return run_action(settings, args)
    except Exception as exc:
        return report_failure(f"lakehouse checkpoint {args.checkpoint_command}", exc)
