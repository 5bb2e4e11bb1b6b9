"""Admission of live drivers: at most LAKEHOUSE_LIVE_DRIVERS of them on this host (a group's driver, or a job's
alone), and their JVMs started one at a time, so that a fleet's start never runs the machine out of memory or its
starts past their timeout. A start beyond capacity is refused with the reason; the supervisor reports it as
`waiting` and tries again on its next run."""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from include.records import groups, lease
from include.registry import Registry, Trigger
from include.settings import Settings

log = logging.getLogger(__name__)

START_WAIT_SECONDS = 300.0  # for the JVM starts queued before this one


class CapacityFull(RuntimeError):
    """Every live driver slot of this host is in use."""


def live_drivers(settings: Settings, registry: Registry) -> dict[str, int | None]:
    """The live units whose driver runs now (a group's lease held, or a job alone holding its lease with a
    live trigger), with the driver's pid."""
    running: dict[str, int | None] = {}
    for unit in registry.live_units():
        if unit not in registry.jobs:
            if groups.running(settings, unit):
                running[unit] = groups.driver_pid(settings, unit)
        else:
            owner = lease.holder(settings, unit)
            if owner is not None and Trigger.names_live(owner.trigger):
                running[unit] = owner.pid
    return running


def admit(settings: Settings, registry: Registry, unit: str) -> None:
    """Raise CapacityFull, naming the drivers that hold the slots, unless one more live driver fits."""
    running = live_drivers(settings, registry)
    running.pop(unit, None)
    if len(running) >= settings.live_drivers:
        holders = ", ".join(f"{u} (pid {pid})" for u, pid in running.items())
        raise CapacityFull(f"waiting for capacity: {len(running)} of {settings.live_drivers} live driver slots in use "
                           f"by {holders} (LAKEHOUSE_LIVE_DRIVERS)")


@contextmanager
def one_start_at_a_time(settings: Settings) -> Iterator[None]:
    """Hold this host's start slot while a driver's JVM starts: starts queue instead of landing at once."""
    path = settings.layout.live_start_lock
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + START_WAIT_SECONDS
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise CapacityFull(f"waiting for capacity: another live driver has been starting for over "
                                       f"{START_WAIT_SECONDS:.0f} s") from None
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)
