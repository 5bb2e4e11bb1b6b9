"""Fault injection: SIGKILL a job's (or a checkpoint action's) process group at a commit point or a step, or hold
it there until the test lets it go.

Installed into a job process through the production seam (``spark_jobs.batch_hooks``) with
``LAKEHOUSE_BATCH_HOOKS=tests.support.kill_hooks:kill_at`` and
``LAKEHOUSE_TEST_KILL_AT=<job>:<point>:<batch_id>``; see :func:`kill_env` and :func:`pause_env`. A checkpoint
action's points are ``before_step`` and ``after_step`` (its effect applied, not yet recorded in the journal),
with the step's index for the batch id.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)


def kill_env(job_id: str, point: str, batch_id: int) -> dict[str, str]:
    """Environment variables that make a job process SIGKILL itself at (job, point, batch)."""
    return {
        "LAKEHOUSE_BATCH_HOOKS": f"{__name__}:kill_at",
        "LAKEHOUSE_TEST_KILL_AT": f"{job_id}:{point}:{batch_id}",
    }


def kill_at(job_id: str, point: str, batch_id: int) -> None:
    job, wanted_point, wanted_batch = os.environ["LAKEHOUSE_TEST_KILL_AT"].split(":")
    if (job, wanted_point, int(wanted_batch)) == (job_id, point, batch_id):
        log.warning("test hook: SIGKILL at job=%s point=%s batch=%s", job_id, point, batch_id)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.killpg(os.getpgrp(), signal.SIGKILL)


def pause_env(job_id: str, point: str, index: int, gate: Path) -> dict[str, str]:
    """Environment variables that make a process wait at (job, point, index) until `gate` exists; it creates
    `<gate>.waiting` while it waits."""
    return {
        "LAKEHOUSE_BATCH_HOOKS": f"{__name__}:pause_at",
        "LAKEHOUSE_TEST_PAUSE_AT": f"{job_id}:{point}:{index}:{gate}",
    }


def pause_at(job_id: str, point: str, index: int) -> None:
    job, wanted_point, wanted_index, gate = os.environ["LAKEHOUSE_TEST_PAUSE_AT"].split(":", 3)
    if (job, wanted_point, int(wanted_index)) != (job_id, point, index):
        return
    waiting = Path(f"{gate}.waiting")
    waiting.touch()
    while not Path(gate).exists():
        time.sleep(0.1)
    waiting.unlink()


def fail_env(job_id: str, point: str, batch_id: int, marker: Path) -> dict[str, str]:
    """Environment variables that make a job's query fail once at (job, point, batch): the batch raises while
    `marker` does not exist, and creates it (the replayed batch then goes through)."""
    return {
        "LAKEHOUSE_BATCH_HOOKS": f"{__name__}:fail_once_at",
        "LAKEHOUSE_TEST_FAIL_AT": f"{job_id}:{point}:{batch_id}:{marker}",
    }


def fail_once_at(job_id: str, point: str, batch_id: int) -> None:
    job, wanted_point, wanted_batch, marker = os.environ["LAKEHOUSE_TEST_FAIL_AT"].split(":", 3)
    if (job, wanted_point, int(wanted_batch)) == (job_id, point, batch_id) and not Path(marker).exists():
        Path(marker).touch()
        raise RuntimeError(f"test hook: job {job_id} fails at {point} of batch {batch_id}")
