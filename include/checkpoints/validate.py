"""Checks of a job's checkpoint and Delta logs before it starts, so that a damaged file gives one line that
names it and says what to do, instead of a Spark stack trace or a silent restart from zero.

What is checked (cheaply, without Spark):
- `metadata`, `offsets/<n>` and `commits/<n>`: readable UTF-8 in Spark's format (a version line, then JSON);
  the offset log has no gap, and every committed batch has its offsets;
- the state of a stateful job: every partition directory the offsets fix, and the files of the version the
  next batch loads (changelogs back to a snapshot); a compressed state file must end with its end mark
  (a truncated file does not);
- a landing job's file-source log points into this lakehouse (a copied lakehouse does not: Spark keeps
  absolute paths);
- the Delta log of every table the job reads or writes: `_last_checkpoint` and each JSON commit after it.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import PurePosixPath

from include.checkpoints.reader import batch_ids, latest_committed_batch, shuffle_partitions
from include.registry import JobSpec
from include.settings import Settings
from include.storage.paths import StoragePath, storage_path

LZ4_MAGIC = b"LZ4Block"
_STATE_FILE = re.compile(r"^(\d+)\.(changelog|zip|delta|snapshot)$")


class CheckpointDamaged(ValueError):
    """A checkpoint or Delta log file is missing, truncated or unreadable."""


def check_job_files(settings: Settings, job: JobSpec) -> None:
    """Raise CheckpointDamaged naming the first damaged file of `job`'s checkpoint or Delta tables."""
    checkpoint = settings.layout.checkpoint(job.id)
    if (checkpoint / "offsets").is_dir():
        _check_logs(checkpoint, job)
        if job.stateful:
            _check_state(checkpoint, job)
        if any(s.kind == "landing" for s in job.sources):
            _check_landing_paths(settings, checkpoint, job)
    for table in [*job.tables_written(), *(s.name for s in job.sources if s.kind == "delta")]:
        _check_delta_log(settings.layout.table(table), job)


def _recovery(job: JobSpec, checkpoint: StoragePath) -> str:
    modes = [f"`lakehouse checkpoint full-refresh {job.id} --cascade` rebuilds it from all its input"]
    if all(s.kind == "delta" for s in job.sources):
        modes.append(f"`lakehouse checkpoint reset-checkpoint {job.id} --from-latest` keeps its table and goes on "
                      "from new data")
    return f"restore the file from a backup or an archived copy ({checkpoint}.reset-<n>), or: " + "; ".join(modes)


def _damaged(job: JobSpec, checkpoint: StoragePath, path: StoragePath, what: str) -> CheckpointDamaged:
    return CheckpointDamaged(f"job {job.id!r}: checkpoint file {path} {what}; {_recovery(job, checkpoint)}")


def _read_log_file(job: JobSpec, checkpoint: StoragePath, path: StoragePath, first_json_line: int) -> list[str]:
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise _damaged(job, checkpoint, path, "is not text (garbage or a partial write)") from None
    if len(lines) < first_json_line + 1 or not re.fullmatch(r"v\d+", lines[0]):
        raise _damaged(job, checkpoint, path, "is truncated or not in Spark's format (a version line, then JSON)")
    for line in lines[first_json_line:]:
        if line == "-":
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError:
            raise _damaged(job, checkpoint, path, f"has a line that is not JSON: {line[:80]!r}") from None
    return lines


def _check_logs(checkpoint: StoragePath, job: JobSpec) -> None:
    metadata = checkpoint / "metadata"
    offsets = batch_ids(checkpoint / "offsets")
    try:
        json.loads(metadata.read_text(encoding="utf-8").splitlines()[0])["id"]
    except FileNotFoundError:
        if not offsets and not batch_ids(checkpoint / "commits"):
            # a start stopped before its first batch (its offset log made, its query id not yet, seen on S3 when the
            # cluster's task was killed): no batch ran under any id, and Spark writes a new one
            return
        raise _damaged(job, checkpoint, metadata, "is missing (it holds the query id)") from None
    except (UnicodeDecodeError, IndexError, KeyError, TypeError, json.JSONDecodeError):
        raise _damaged(job, checkpoint, metadata, "is unreadable (it holds the query id)") from None
    for previous, batch in zip(offsets, offsets[1:], strict=False):
        if batch != previous + 1:
            raise _damaged(job, checkpoint, checkpoint / "offsets" / str(previous + 1), "is missing (the offset log "
                           f"jumps from batch {previous} to {batch})")
    for batch in offsets:
        _read_log_file(job, checkpoint, checkpoint / "offsets" / str(batch), 1)
    for batch in batch_ids(checkpoint / "commits"):
        _read_log_file(job, checkpoint, checkpoint / "commits" / str(batch), 1)
        if offsets and not offsets[0] <= batch <= offsets[-1]:
            raise _damaged(job, checkpoint, checkpoint / "offsets" / str(batch), f"is missing while batch {batch} "
                           "is committed")


def _check_state(checkpoint: StoragePath, job: JobSpec) -> None:
    committed = latest_committed_batch(checkpoint)
    if committed is not None and shuffle_partitions(checkpoint) is not None:
        check_state_version(checkpoint, job, committed + 1)  # what batch `committed` wrote: the next batch loads


def check_state_version(checkpoint: StoragePath, job: JobSpec, version: int) -> None:
    """Raise CheckpointDamaged unless every state store of the checkpoint can load `version`."""
    partitions = shuffle_partitions(checkpoint) or 0
    state = checkpoint / "state"
    operators = [d for d in state.iterdir() if d.name.isdigit()] if state.is_dir() else []
    if not operators:
        raise _damaged(job, checkpoint, state, f"is missing: the job keeps state (version {version} is needed)")
    for operator in operators:
        for partition in range(partitions):
            directory = operator / str(partition)
            if not directory.is_dir():
                raise _damaged(job, checkpoint, directory, "is missing (a state partition)")
            for store in [directory, *(d for d in directory.iterdir() if d.is_dir() and not d.name.startswith("_"))]:
                _check_store_files(job, checkpoint, store, version)


def _check_store_files(job: JobSpec, checkpoint: StoragePath, store: StoragePath, version: int) -> None:
    files: dict[int, dict[str, StoragePath]] = {}
    for path in store.iterdir():
        match = _STATE_FILE.match(path.name)
        if match:
            files.setdefault(int(match.group(1)), {})[match.group(2)] = path
    if not files:
        return  # not a store directory (e.g. a join's partition holding its four stores)
    snapshots = [v for v, kinds in files.items() if v <= version and {"zip", "snapshot"} & set(kinds)]
    base = max(snapshots, default=0)
    for needed in range(base + 1, version + 1):
        if needed not in files:
            raise _damaged(job, checkpoint, store / f"{needed}.changelog", f"is missing (state version {version} "
                           f"needs every change since {'snapshot ' + str(base) if base else 'the start'})")
    for needed in range(base, version + 1):
        for kind, path in files.get(needed, {}).items():
            if kind == "zip" and not zipfile.is_zipfile(path if path.is_local else io.BytesIO(path.read_bytes())):
                raise _damaged(job, checkpoint, path, "is truncated (not a complete zip file)")
            if kind != "zip" and not _complete_lz4(path):
                raise _damaged(job, checkpoint, path, "is truncated (no end mark)")


def _complete_lz4(path: StoragePath) -> bool:
    """A file of Spark's lz4 codec ends with an empty block (the end mark); files of other codecs pass."""
    if path.is_local:
        with path.open("rb") as handle:
            head = handle.read(len(LZ4_MAGIC))
            size = handle.seek(0, 2)
            handle.seek(max(size - 21, 0))
            tail = handle.read()
    else:
        data = path.read_bytes()  # state files are small; a ranged read would save little
        head, size, tail = data[:len(LZ4_MAGIC)], len(data), data[-21:]
    if head != LZ4_MAGIC:
        return True
    if size < 21 + len(LZ4_MAGIC):
        return False
    return tail[: len(LZ4_MAGIC)] == LZ4_MAGIC and tail[9:] == b"\0" * 12


def _check_landing_paths(settings: Settings, checkpoint: StoragePath, job: JobSpec) -> None:
    log_dir = checkpoint / "sources" / "0"
    entries = sorted((p for p in log_dir.iterdir() if p.name.split(".")[0].isdigit()),
                     key=lambda p: int(p.name.split(".")[0])) if log_dir.is_dir() else []
    if not entries:
        return
    lines = _read_log_file(job, checkpoint, entries[-1], 1)
    recorded = storage_path(json.loads(lines[-1])["path"], settings.s3).parent
    source = next(s for s in job.sources if s.kind == "landing")
    landing = settings.layout.landing(source.path)
    if _within(recorded, landing):
        return
    old_root = recorded
    for _ in PurePosixPath(source.path).parts:
        old_root = old_root.parent
    keep = (f"Run it at its old path (`ln -s {settings.root} {old_root}` and LAKEHOUSE_ROOT={old_root})"
            if settings.root.is_local and old_root.is_local else f"Run it where it was (LAKEHOUSE_ROOT={old_root})")
    raise CheckpointDamaged(
        f"job {job.id!r}: checkpoint {checkpoint} records landing files under {recorded}, but this lakehouse "
        f"reads {landing}: the lakehouse was moved, and Spark's file-source checkpoints keep absolute paths. {keep}, "
        f"or rebuild with `lakehouse checkpoint full-refresh {job.id} --cascade` (docs/operations/moving.md)"
    )


def _within(path: StoragePath, directory: StoragePath) -> bool:
    """Whether `path` is `directory` or lies under it (local paths with their symbolic links resolved)."""
    if path.is_local and directory.is_local:
        path, directory = path.resolve(), directory.resolve()
        return path == directory or directory in path.parents
    return str(path) == str(directory) or str(path).startswith(str(directory).rstrip("/") + "/")


def _check_delta_log(table: StoragePath, job: JobSpec) -> None:
    log = table / "_delta_log"
    if not log.is_dir():
        return
    last_checkpoint = log / "_last_checkpoint"
    start = -1
    if last_checkpoint.exists():
        try:
            start = int(json.loads(last_checkpoint.read_text(encoding="utf-8"))["version"])
        except (UnicodeDecodeError, KeyError, TypeError, ValueError):
            raise CheckpointDamaged(f"job {job.id!r}: Delta log file {last_checkpoint} is unreadable; delete it (Delta "
                                    "then lists the log) or restore it from a backup") from None
    for commit in sorted(log.glob("*.json")):
        if not commit.stem.isdigit() or int(commit.stem) <= start:
            continue
        try:
            for line in commit.read_bytes().decode("utf-8").splitlines():
                json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise CheckpointDamaged(
                f"job {job.id!r}: Delta log file {commit} is truncated or corrupt (table {table}); restore it from a "
                f"backup, or, if it is the latest commit and was never completed, move it aside: the table then ends "
                f"at version {int(commit.stem) - 1}"
            ) from None
