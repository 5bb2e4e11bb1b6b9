"""`lakehouse checkpoint verify`: after an action, each job's plan is `resume` again and, unless asked not to, an
available-now run resumes from its checkpoint and commits what is pending (after a rollback: the undone batches
again, on the same input)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from include.checkpoints.plan import STARTABLE
from include.checkpoints.request import verify_request
from include.records import checkpoint_audit
from include.registry import Registry, Trigger
from include.settings import Settings
from spark_jobs.checkpoint_actions.base import ActionContext, ActionRefused, audit_row, job_state
from spark_jobs.streaming_query import run_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def verify(spark: SparkSession | None, settings: Settings, registry: Registry, jobs: list[str], *,
           run: bool = True, actor: str = "") -> list[dict]:
    """Check the jobs, upstream first; audited as mode `verify`. A job that fails stops the check."""
    actor = actor or checkpoint_audit.default_actor()
    ctx = ActionContext(settings, registry, verify_request(jobs, run, actor), spark)
    rows = []
    try:
        for job_id in [j for j in registry.order if j in jobs]:
            job = registry.job(job_id)
            rows.append(row := audit_row(ctx, job, "verify", actor))
            plan = json.loads(row["plan"])
            if plan["mode"] not in STARTABLE:
                raise ActionRefused(f"job {job_id!r}: its plan is {plan['mode']}, not resume: `lakehouse checkpoint "
                                    f"plan {job_id}` says why")
            if run:  # takes the job's lease: refused (LeaseHeld, naming the holder) while the job runs
                run_job(spark, settings, registry, job_id, Trigger(available_now=True))
            row.update(outcome="done", **job_state(settings, job, "after"))
            before, after = row["batch_before"], row["batch_after"]
            ran = ("no run" if not run else "an available-now run found nothing new" if after == before
                   else f"an available-now run committed batches {0 if before is None else before + 1}..{after}")
            row["detail"] = f"plan {plan['mode']}; {ran}; last committed batch {after}"
            log.info("job=%s: verified: %s", job_id, row["detail"])
    except Exception as exc:
        if rows and rows[-1]["outcome"] != "done":
            rows[-1].update(outcome="failed", detail=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        checkpoint_audit.record(settings, rows)
    return rows
