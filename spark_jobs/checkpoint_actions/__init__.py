"""Applying checkpoint actions (`lakehouse checkpoint <mode> <job>...`, the `checkpoint_reset` DAG's `apply`):
one module per mode (:mod:`.full_refresh`, :mod:`.reset_checkpoint`, :mod:`.repartition`, :mod:`.rollback`),
the request's grammar in include.checkpoints.request, and :mod:`.verify` for the check after an action.

Guardrails: nothing is touched while a target job holds its lease (the holder is named); a job with
`reset_allowed: false` refuses the destructive modes; a full refresh whose downstream jobs would be left
inconsistent needs `--cascade`. A checkpoint is never deleted in place: each action moves (full-refresh,
reset-checkpoint) or copies (repartition, rollback) it aside as `_checkpoints/<job>.reset-<n>`, the `--keep`
most recent kept. Every action, dry runs included, is a row in `_ops/checkpoint_audit`.
"""

from __future__ import annotations

from spark_jobs.checkpoint_actions.apply import ACTIONS, apply, main, parse_request, run_request
from spark_jobs.checkpoint_actions.base import ActionRefused
from spark_jobs.checkpoint_actions.verify import verify

__all__ = ["ACTIONS", "ActionRefused", "apply", "main", "parse_request", "run_request", "verify"]
