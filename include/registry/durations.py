"""Durations ("10 minutes"), sizes ("64 MB") and triggers ("available-now", "processing-time=10 seconds",
"on-upstream-commit") of the registry."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_DURATION = re.compile(r"^\s*(\d+)\s*(second|minute|hour|day)s?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def parse_duration(text: Any) -> int:
    """Seconds in a duration such as ``"10 minutes"``; raises ValueError on anything else."""
    match = _DURATION.match(str(text)) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"bad duration {text!r} (expected e.g. '30 seconds', '10 minutes', '1 hour')")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|mb|gb)?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}


def parse_size(value: Any) -> int:
    """Bytes in a size such as ``"64 MB"`` or ``1048576``; raises ValueError on anything else."""
    match = _SIZE.match(str(value)) if isinstance(value, int | str) and not isinstance(value, bool) else None
    size = int(match.group(1)) * _UNIT_BYTES[(match.group(2) or "b").lower()] if match else 0
    if size < 1:
        raise ValueError(f"bad size {value!r} (expected a positive number of bytes, or e.g. '64 MB', '1 GB')")
    return size


MAX_TRIGGER_SECONDS = 24 * 3600
ON_UPSTREAM_COMMIT = "on-upstream-commit"
UPSTREAM_POLL_SECONDS = 1  # how often a job on its upstream's commits looks for one (a listing of the table's log)


@dataclass(frozen=True)
class Trigger:
    """`available-now`, `processing-time=<duration>`, or `on-upstream-commit`: a live run whose batches start when
    a table it reads has a new commit (Spark polls the tables every UPSTREAM_POLL_SECONDS), not on a clock of its
    own: a downstream job's rows land a batch after its upstream's instead of on its next tick."""

    available_now: bool
    interval_seconds: int = 0  # processing-time only
    on_upstream_commit: bool = False

    @classmethod
    def parse(cls, text: str) -> Trigger:
        text = str(text).strip()
        if text == "available-now":
            return cls(available_now=True)
        if text == ON_UPSTREAM_COMMIT:
            return cls(available_now=False, on_upstream_commit=True)
        if text.startswith("processing-time="):
            seconds = parse_duration(text.split("=", 1)[1])
            if not 0 < seconds <= MAX_TRIGGER_SECONDS:
                raise ValueError(f"processing-time interval must be between 1 second and 24 hours, got {text!r} "
                                 "(for runs further apart, schedule available-now runs)")
            return cls(available_now=False, interval_seconds=seconds)
        raise ValueError(f"bad trigger {text!r} (expected 'available-now', 'processing-time=10 seconds' or "
                         f"'{ON_UPSTREAM_COMMIT}')")

    @staticmethod
    def names_live(text: str | None) -> bool:
        """Whether a trigger as written (a lease's, a progress row's) is a live one."""
        return bool(text) and (text.startswith("processing-time") or text == ON_UPSTREAM_COMMIT)

    @property
    def spark_interval(self) -> str:
        """The processing-time interval Spark's trigger gets (live triggers only)."""
        return f"{UPSTREAM_POLL_SECONDS if self.on_upstream_commit else self.interval_seconds} seconds"

    def __str__(self) -> str:
        if self.available_now:
            return "available-now"
        return ON_UPSTREAM_COMMIT if self.on_upstream_commit else f"processing-time={self.interval_seconds} seconds"
