"""How each job of a several-job driver run ended (`lakehouse run <job> <job>... --outcomes DIR`), one JSON file per
job: the backfill DAG's `run_jobs` task runs the selected jobs in one Spark application, and each job's own task
reads its outcome here instead of starting a driver of its own.

Statuses: `finished`, `stopped` (a stop request, at a batch boundary), `failed`, `refused` (another process holds
its checkpoint lease), `not_run` (an upstream job failed in this run, or the run was stopped first).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from include.storage.files import read_json, write_json_atomically
from include.storage.paths import StoragePath

RAN = ("finished", "stopped")  # the job ran to its end in the shared driver: its own task has nothing left to do


@dataclass(frozen=True)
class Outcome:
    job: str
    status: str
    detail: str = ""  # the failure's or the refusal's one line, or why it did not run
    summary: str = ""  # the job's run summary line (batches, rows in and out per table, duration)
    at: str = ""

    @property
    def ran(self) -> bool:
        return self.status in RAN


def clear(directory: StoragePath) -> None:
    """Forget the outcomes of an earlier try of the same run."""
    directory.rmtree()


def record(directory: StoragePath, outcome: Outcome) -> None:
    stamped = Outcome(**{**asdict(outcome), "at": datetime.now(UTC).isoformat()})
    write_json_atomically(directory / f"{outcome.job}.json", asdict(stamped))


def read(directory: StoragePath, job_id: str) -> Outcome | None:
    data = read_json(directory / f"{job_id}.json")
    return Outcome(**data) if data else None
