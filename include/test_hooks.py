"""Test-only fault injection: SIGKILL the job's process group at a named point.

Set ``LAKEHOUSE_TEST_KILL_AT=<job>:<point>:<batch_id>``; points are ``before_commit`` (batch computed,
Delta not yet written), ``after_commit`` (Delta written, Spark's commit log not yet) and
``between_batches`` (batch fully committed, next not started). Unset in production.
"""

from __future__ import annotations

import logging
import os
import signal

KILL_POINTS = ("before_commit", "after_commit", "between_batches")
log = logging.getLogger(__name__)


def maybe_kill(job_id: str, point: str, batch_id: int) -> None:
    spec = os.environ.get("LAKEHOUSE_TEST_KILL_AT")
    if not spec:
        return
    job, wanted_point, wanted_batch = spec.split(":")
    if (job, wanted_point, int(wanted_batch)) == (job_id, point, batch_id):
        log.warning("test hook: SIGKILL at job=%s point=%s batch=%s", job_id, point, batch_id)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.killpg(os.getpgrp(), signal.SIGKILL)
