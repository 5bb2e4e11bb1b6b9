"""Batch hooks: a seam to observe a job's batches at its commit points (no-op unless installed).

Points: ``before_commit`` (batch computed, Delta not yet written), ``between_tables`` (a job writing two tables
with MERGE, spark_jobs/cdc_sink.py: the first written, the second not yet), ``after_commit`` (Delta written,
Spark's commit log not yet) and ``between_batches`` (batch fully committed, next not started); and in a
checkpoint action, ``before_step`` and ``after_step`` (its effect applied, the journal not yet updated), with
the step's index in place of the batch id. A hook is ``hook(job_id, point, batch_id)``. The entry point installs the hook named by
``LAKEHOUSE_BATCH_HOOKS`` (``module:function``), which is how the test suite injects its faults
from `tests/` without test code in this package.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

POINTS = ("before_commit", "between_tables", "after_commit", "between_batches", "before_step", "after_step")
BatchHook = Callable[[str, str, int], None]

log = logging.getLogger(__name__)
_installed: list[BatchHook] = []


def install(hook: BatchHook) -> None:
    _installed.append(hook)


def install_named(spec: str) -> None:
    """Install the hook ``module:function``; raises ValueError naming what could not be found."""
    module_name, _, attribute = spec.partition(":")
    try:
        hook = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"LAKEHOUSE_BATCH_HOOKS={spec!r}: expected an importable 'module:function' ({exc})") from exc
    log.warning("batch hook installed: %s", spec)
    install(hook)


def fire(job_id: str, point: str, batch_id: int) -> None:
    for hook in _installed:
        hook(job_id, point, batch_id)
