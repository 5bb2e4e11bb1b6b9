"""reset-checkpoint: keep the sink table, move the checkpoint aside, and start a new one at a position of the
job's source tables (a version, a timestamp, or the latest) or of its Kafka topics (the earliest offsets, a
timestamp, or the latest): what lies between the old position and the new one is missed or read again, and the
description says which."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from include import checkpoints
from include.checkpoints.plan import write_start_position
from include.registry import JobSpec
from include.storage.paths import StoragePath
from spark_jobs.checkpoint_actions.base import (
    ActionContext,
    ActionRefused,
    ModeAction,
    Prepared,
    Step,
    move_aside,
    put_back_text,
    restore_tables_text,
)


class ResetCheckpoint(ModeAction):
    mode = "reset-checkpoint"

    def check(self, ctx: ActionContext, job: JobSpec) -> dict[str, Any]:
        kind, value = ctx.request.position
        if any(s.kind == "landing" for s in job.sources):
            raise ActionRefused(f"job {job.id!r} reads landing files, which have no versions to start from: use "
                                "full-refresh (it keeps no state worth keeping) or move new files in only")
        if any(s.kind == "kafka" for s in job.sources):
            return {"starting": kafka_position(ctx, job, kind, value)}
        if kind == "earliest":
            raise ActionRefused(f"job {job.id!r} reads Delta tables: --from-earliest is for Kafka sources; use "
                                "--from-version (e.g. 0), --from-timestamp or --from-latest")
        if kind == "version" and len(job.sources) > 1:
            raise ActionRefused(f"job {job.id!r} reads {len(job.sources)} tables: --from-version names a version "
                                "of one table; use --from-timestamp or --from-latest")
        for source in job.sources:
            check_position(ctx.settings.layout.table(source.name), source.name, kind, value, job.id)
        return {"starting": starting_options(kind, value)}

    def describe(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        return f"move {ctx.checkpoint(job.id)} aside; keep {job.sink.table}; " + position_effect(ctx, job)

    def undo(self, ctx: ActionContext, job: JobSpec, prepared: Prepared) -> str:
        return (f"{put_back_text(ctx, prepared)}; once the new checkpoint has run, also "
                f"{restore_tables_text(ctx.settings, job)}")

    def steps(self, ctx: ActionContext, prepared: list[Prepared]) -> list[Step]:
        return [Step(item.job, "move the checkpoint aside and record where the new one starts",
                     lambda item=item: reset(ctx, item)) for item in prepared]


def reset(ctx: ActionContext, prepared: Prepared) -> None:
    move_aside(ctx.settings, prepared)
    write_start_position(ctx.checkpoint(prepared.job), prepared.data["starting"])


def kafka_position(ctx: ActionContext, job: JobSpec, kind: str, value: Any) -> dict[str, str]:
    """Kafka reader options of a new checkpoint at the position, once the broker and the topics answer."""
    from include.kafka.broker import BrokerError
    from include.kafka.connection import bootstrap_servers
    from include.kafka.offsets import require_topics, starting_options

    if kind == "version":
        raise ActionRefused(f"job {job.id!r} reads a Kafka topic, which has no versions: use --from-earliest, "
                            "--from-timestamp or --from-latest")
    for source in job.sources:
        try:
            require_topics(bootstrap_servers(ctx.settings, source.kafka.connection), source.kafka.topics)
        except BrokerError as exc:
            raise ActionRefused(f"job {job.id!r}: {exc}") from None
    return starting_options(value if kind == "timestamp" else kind)


def check_position(table: StoragePath, name: str, kind: str, value: Any, job_id: str) -> None:
    """Refuse a position Delta's streaming source could not start from: a version the table does not have (or its
    log no longer keeps), a time after its latest commit."""
    from include.storage import delta as delta_store

    if not delta_store.table_exists(table):
        raise ActionRefused(f"job {job_id!r}: its source table {name} does not exist yet: nothing to start from")
    commits = sorted(int(p.stem) for p in (table / "_delta_log").glob("*.json") if p.stem.isdigit())
    first, latest = commits[0], commits[-1]
    if kind == "version" and not first <= value <= latest:
        kept = f"versions {first}..{latest}" if first else f"versions 0..{latest}"
        raise ActionRefused(f"job {job_id!r}: --from-version {value}: {name} has {kept} in its log; choose one of "
                            "them, or --from-latest")
    if kind == "timestamp":
        moment = datetime.fromisoformat(value)
        committed = {v: datetime.fromtimestamp((table / "_delta_log" / f"{v:020d}.json").stat().st_mtime, UTC)
                     for v in (first, latest)}
        if moment > committed[latest]:
            raise ActionRefused(f"job {job_id!r}: --from-timestamp {value}: no version of {name} was committed at or "
                                f"after it (its latest, version {latest}, at {committed[latest].isoformat()}); use "
                                "--from-latest to read only what comes next")
        if first > 0 and moment < committed[first]:
            raise ActionRefused(f"job {job_id!r}: --from-timestamp {value}: {name}'s log keeps versions from "
                                f"{first} (committed {committed[first].isoformat()}) only; choose a later time")


def starting_options(kind: str, value: Any) -> dict[str, str]:
    """Delta source options of a new checkpoint starting at the position."""
    if kind == "version":
        return {"startingVersion": str(value)}
    if kind == "timestamp":
        return {"startingTimestamp": str(value)}
    return {"startingVersion": "latest"}


def position_effect(ctx: ActionContext, job: JobSpec) -> str:
    """What a reset to the requested position may miss or repeat, per source table, in plain words."""
    from include.storage import delta as delta_store

    kind, value = ctx.request.position
    if any(s.kind == "kafka" for s in job.sources):
        return kafka_effect(ctx, job, kind, value)
    checkpoint = ctx.checkpoint(job.id)
    batch = checkpoints.latest_committed_batch(checkpoint)
    offsets = [json.loads(o) for o in checkpoints.source_offsets(checkpoint, batch)] if batch is not None else []
    parts = []
    for source, offset in zip(job.sources, offsets or [{}] * len(job.sources), strict=False):
        unread = next_unread(offset)  # the first version the old checkpoint had not read (whole)
        latest = delta_store.latest_version(ctx.settings.layout.table(source.name))
        done = (f"the old checkpoint had read {source.name} up to version {unread - 1}" if unread
                else f"the old checkpoint had not read {source.name}")
        if kind == "latest":
            effect = (f"versions {unread}..{latest} are NOT read (missed)" if unread <= latest
                      else "nothing committed so far is missed (it had read every version)")
        elif kind == "timestamp":
            effect = (f"it starts at the first version committed at or after {value}: versions "
                      "between the old position and that one are missed, versions before the old position read again")
        elif value > unread:
            effect = f"versions {unread}..{value - 1} are NOT read (missed)"
        elif value == unread:
            effect = "it goes on where the old one stopped: nothing is missed or read twice"
        else:
            effect = (f"versions {value}..{unread - 1} are read again: their rows are written to {job.sink.table} "
                      "again")
        parts.append(f"{done}; from now on {effect}")
    return "; ".join(parts)


def kafka_effect(ctx: ActionContext, job: JobSpec, kind: str, value: Any) -> str:
    """What a reset of a Kafka job to the position may miss or repeat, against what the old checkpoint had read."""
    from include.kafka.offsets import checkpoint_offsets

    read = checkpoint_offsets(ctx.checkpoint(job.id))
    done = ("the old checkpoint had read " + "; ".join(f"{topic} up to offsets {offsets}" for topic, offsets in
                                                       read.items()) if read else "the old checkpoint had read nothing")
    effect = {
        "earliest": "every message still on the topic is read: messages the old checkpoint had read and the topic "
                    f"still holds are written to {job.sink.table} again (a re-created topic holds new messages only)",
        "latest": "only messages produced from now on are read: those not read yet are missed",
        "timestamp": f"each partition is read from its first message produced at or after {value}: messages between "
                     "the old position and that one are missed, those after it read again",
    }[kind]
    return f"{done}; from now on {effect}"


END_INDEX = 2**63 - 1  # Delta's offset index once a version's files are all read


def next_unread(offset: dict) -> int:
    """The first version a Delta source offset has not read in full (0 for a source never read)."""
    if "reservoirVersion" not in offset:
        return 0
    version, index = int(offset["reservoirVersion"]), int(offset.get("index", -1))
    return version + 1 if index == END_INDEX else version
