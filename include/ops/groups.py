"""Groups of live jobs (the registry's `group`): one driver per group, a streaming query per job
(spark_jobs/group_driver.py). What the supervisor needs to know of a group's driver, without Spark."""

from __future__ import annotations

from include.records import lease
from include.settings import Settings
from include.storage.paths import StoragePath


def driver_pid(settings: Settings, group: str) -> int | None:
    """The pid of the group's running driver on this host (the holder of the group's lease), or None."""
    path = settings.layout.group_lease(group)
    if not lease.is_held(settings, group, path):
        return None
    owner = lease.read_lease(settings, group, path) or {}
    return owner.get("pid") if owner.get("host") == settings.host_name else None


def running(settings: Settings, group: str) -> bool:
    return lease.is_held(settings, group, settings.layout.group_lease(group))


def outcomes(settings: Settings, group: str) -> StoragePath:
    """Where the group's driver records how each of its jobs ended (include/records/run_outcomes.py)."""
    return settings.layout.run_outcomes(f"group-{group}")
