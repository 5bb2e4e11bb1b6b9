"""Groups of live jobs (the registry's `group`): one driver per group, a streaming query per job
(spark_jobs/group_driver.py). What the supervisor needs to know of a group's driver, without Spark: its lease."""

from __future__ import annotations

from include.records import lease
from include.settings import Settings
from include.storage.paths import StoragePath


def driver(settings: Settings, group: str) -> lease.Owner | None:
    """The group's running driver (the holder of the group's lease), or None."""
    return lease.holder(settings, group, settings.layout.group_lease(group))


def driver_pid(settings: Settings, group: str) -> int | None:
    """The pid of the group's running driver on this host, or None."""
    owner = driver(settings, group)
    return owner.pid if owner is not None and owner.on(settings.host_name) else None


def running(settings: Settings, group: str) -> bool:
    return lease.is_held(settings, group, settings.layout.group_lease(group))


def outcomes(settings: Settings, group: str) -> StoragePath:
    """Where the group's driver records how each of its jobs ended (include/records/run_outcomes.py)."""
    return settings.layout.run_outcomes(f"group-{group}")
