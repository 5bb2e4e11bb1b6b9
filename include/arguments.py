"""Argument types shared by the command lines (`lakehouse`, the spark-submit entry points) and the
checkpoint request: each parses one text or raises argparse's ArgumentTypeError with one readable line."""

from __future__ import annotations

import argparse
from datetime import datetime

from include.registry import MAX_SHUFFLE_PARTITIONS, Trigger


def positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def partition_count(text: str) -> int:
    """A shuffle / state partition count: 1 .. MAX_SHUFFLE_PARTITIONS, checked before any checkpoint is written."""
    value = positive_int(text)
    if value > MAX_SHUFFLE_PARTITIONS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SHUFFLE_PARTITIONS}, got {text}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def timestamp(text: str) -> datetime:
    """An ISO-8601 time with a UTC offset (`2026-11-23T10:00:00Z`)."""
    try:
        moment = datetime.fromisoformat(str(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 timestamp: {text!r} (e.g. 2026-11-23T10:00:00Z)") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"needs a UTC offset: {text!r} (e.g. 2026-11-23T10:00:00Z)")
    return moment


def batch_range(text: str) -> tuple[int, int]:
    first, sep, last = text.partition(":")
    if not (sep and first.isdigit() and last.isdigit()):
        raise argparse.ArgumentTypeError(f"expected B1:B2 (batch ids, e.g. 3:5), got {text!r}")
    return int(first), int(last)


def trigger(text: str) -> Trigger:
    try:
        return Trigger.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
