"""Fault injection for the exactly-once tests: SIGKILL the job's process group at a commit point.

Installed into a job process through the production seam (``spark_jobs.batch_hooks``) with
``LAKEHOUSE_BATCH_HOOKS=tests.support.kill_hooks:kill_at`` and
``LAKEHOUSE_TEST_KILL_AT=<job>:<point>:<batch_id>``; see :func:`kill_env`.
"""

from __future__ import annotations

import logging
import os
import signal

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
