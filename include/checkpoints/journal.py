"""The journal of a checkpoint action: what it was asked, what its checks decided, and which of its steps are done.

Written before the action touches anything (`_checkpoints/_actions/<id>.json`), updated after each step, and
removed when the last step is done. While a journal names a job, the job does not start (the message names the
action, what it has done, and `lakehouse checkpoint resume-action <job>`, which runs the steps not done yet), its
plan is `action pending`, and no other action takes it. Every step is written so that running it again after a
crash in its middle gives what running it once gives (spark_jobs.checkpoint_actions).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from include.settings import Settings
from include.storage.paths import StoragePath


class ActionPending(ValueError):
    """A checkpoint action on the job started and did not finish: the job may not start."""


@dataclass
class Journal:
    id: str
    request: dict[str, Any]  # CheckpointRequest's fields: mode, jobs, keep, actor, options
    targets: list[str]
    prepared: list[dict[str, Any]]  # per target: job, archive_to, data
    steps: list[dict[str, Any]]  # job, name, done
    started_at: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    path: StoragePath | None = None

    @property
    def mode(self) -> str:
        return self.request["mode"]

    def save(self) -> None:
        """Write the journal whole (a crash leaves the old one or the new one, never half of one)."""
        body = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "path"}
        self.path.write_text(json.dumps(body, indent=1, default=str))

    def mark_done(self, index: int) -> None:
        self.steps[index]["done"] = True
        self.save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def progress(self) -> str:
        """`done: a, b; not done: c` over the steps."""
        done = [f"{s['job']}: {s['name']}" for s in self.steps if s["done"]]
        todo = [f"{s['job']}: {s['name']}" for s in self.steps if not s["done"]]
        return f"done: {'; '.join(done) or 'nothing yet'}; not done: {'; '.join(todo) or 'nothing'}"

    def describe(self, job_id: str | None = None) -> str:
        """One line: the action, when and by whom, how far it got, and how to finish it (naming `job_id`)."""
        return (f"checkpoint action {self.mode} of {', '.join(self.targets)} (id {self.id}, started {self.started_at} "
                f"by {self.request.get('actor') or '?'}, pid {self.pid} on {self.host}) did not finish: "
                f"{self.progress()}. Finish it with `lakehouse checkpoint resume-action {job_id or self.targets[0]}`")


def actions_dir(checkpoints_dir: StoragePath) -> StoragePath:
    """Where the journals live: `_actions/` beside the checkpoints (a checkpoint moved aside keeps none)."""
    return checkpoints_dir / "_actions"


def start(settings: Settings, request: dict[str, Any], targets: list[str], prepared: list[dict[str, Any]],
          steps: list[tuple[str, str]]) -> Journal:
    """Record a new action (before it touches anything)."""
    now = datetime.now(UTC)
    action_id = f"{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    journal = Journal(action_id, request, list(targets), prepared,
                      [{"job": job, "name": name, "done": False} for job, name in steps],
                      now.isoformat(timespec="seconds"),
                      path=actions_dir(settings.layout.checkpoints) / f"{action_id}.json")
    journal.save()
    return journal


def pending(checkpoints_dir: StoragePath) -> list[Journal]:
    """Every unfinished action of the lakehouse whose checkpoints live in `checkpoints_dir`, oldest first."""
    found = []
    for path in sorted(actions_dir(checkpoints_dir).glob("*.json")):
        try:
            body = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ActionPending(f"checkpoint action journal {path} is unreadable ({exc}): restore it, or move it aside "
                                "once you have checked the jobs it names by hand") from exc
        found.append(Journal(**body, path=path))
    return found


def pending_for(settings: Settings, job_id: str) -> Journal | None:
    """The unfinished action that names `job_id`, if any."""
    return pending_for_checkpoint(settings.layout.checkpoint(job_id), job_id)


def pending_for_checkpoint(checkpoint: StoragePath, job_id: str) -> Journal | None:
    """The same, found from the job's checkpoint path."""
    return next((j for j in pending(checkpoint.parent) if job_id in j.targets), None)


def refuse_if_pending(settings: Settings, job_id: str, inside: str | None = None) -> None:
    """Raise ActionPending when an unfinished action (other than `inside`, the one running now) names the job."""
    journal = pending_for(settings, job_id)
    if journal is not None and journal.id != inside:
        raise ActionPending(f"job {job_id!r} may not start: {journal.describe(job_id)}")
