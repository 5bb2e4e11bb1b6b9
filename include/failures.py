"""How a process of the product ends: its exit code, a contract (spark-submit passes a job driver's on; the backfill
operators, the supervisor and the CLI read it), and the one line a failure a user can fix is reported with.

0 finished or stopped on request; 1 failed; 2 bad input (unknown job, bad trigger, invalid registry, missing Java, a
checkpoint that must be acted on first); 75 refused, another process holds the job's checkpoint lease (try again
later). Below both the engine (spark_jobs) and the control plane (include/ops, the CLI, Airflow), which share it."""

from __future__ import annotations

import sys
from enum import IntEnum

from include.cdc.database import CdcError
from include.kafka.broker import BrokerError
from include.records.lease import LeaseHeld, LeaseLost
from include.registry import RegistryError
from include.spark_session import JavaError


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    REFUSED = 75  # EX_TEMPFAIL: the checkpoint lease is held by another process


def classify_failure(exc: Exception) -> tuple[ExitCode, str] | None:
    """The exit code and the one line of a failure a user can fix; None for anything else."""
    if isinstance(exc, LeaseHeld | LeaseLost):  # another process holds it (or took it over): not this one's
        return ExitCode.REFUSED, str(exc)
    if isinstance(exc, BrokerError | CdcError):  # a server down or a topic missing: nothing the job can do about it
        return ExitCode.FAILED, str(exc)
    if isinstance(exc, KeyError):
        return ExitCode.BAD_INPUT, str(exc.args[0] if exc.args else exc)
    if isinstance(exc, RegistryError | JavaError | ValueError):
        return ExitCode.BAD_INPUT, str(exc)
    return None


def report_failure(command: str, exc: Exception) -> int:
    """For a failure a user can fix: write one line naming it to stderr and return its exit code.
    Anything else is re-raised with its traceback."""
    known = classify_failure(exc)
    if known is None:
        raise exc
    code, message = known
    sys.stderr.write(f"{command}: {message}\n")
    return code
