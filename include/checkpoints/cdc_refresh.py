"""What a full refresh of a CDC job reads again, and whether its database must be read again first.

A CDC chain keeps every change twice: on its table's topic (until retention deletes the oldest messages) and in its
bronze table (raw and complete: never deleted). A rebuilt `apply_changes` job reads bronze again, which holds every
change captured: nothing is asked of the database. A rebuilt bronze job reads its topic again from the earliest
offsets: while the topic holds every message since the connector's first snapshot, that is every change; once
retention has deleted some, the changes of rows that have not changed since are gone from it, and only a new
snapshot (`op: r`) brings those rows back. The full refresh then takes one first (include/cdc/chain.py `snapshot`):
its rows order before every change (spark_jobs/cdc_parse.py), so a change already on the topic is never overwritten
by them, and the type 2 history leaves out a later snapshot's row of a key whose changes it holds: a new snapshot
duplicates nothing.
"""

from __future__ import annotations

from include.cdc.capture import lost_messages
from include.cdc.connectors import connector_name
from include.kafka.connection import bootstrap_servers
from include.registry import JobSpec
from include.registry.cdc import ApplyChanges
from include.settings import Settings

NEW_SNAPSHOT = "new_snapshot"  # in a full refresh's prepared data: the logical databases to read again first


def refresh_reads(settings: Settings, job: JobSpec) -> tuple[list[str], str]:
    """For a full refresh of `job`: the logical databases whose connectors must take a new snapshot before it is
    rebuilt, and what the rebuild reads, in a phrase ('' for a job that is not part of a CDC chain). BrokerError
    when the broker of a `cdc:` source does not answer (its topics' first offsets decide)."""
    captured = [source for source in job.sources if source.cdc is not None]
    if not captured:
        if isinstance(job.transform, ApplyChanges):
            return [], (f"{job.source.name} keeps every change captured: the rebuild reads it, the topic is not read "
                        "again and nothing is asked of the database")
        return [], ""
    lost: dict[str, int] = {}
    for source in captured:
        lost.update(lost_messages(bootstrap_servers(settings, source.kafka.connection), [source.cdc.topic]))
    if not lost:
        topics = ", ".join(source.cdc.topic for source in captured)
        return [], (f"{topics} still holds every message since the connector's first snapshot: the rebuild reads "
                    "them all, nothing is asked of the database")
    databases = list(dict.fromkeys(s.cdc.database for s in captured if s.cdc.topic in lost))
    gone = ", ".join(f"{topic} its first {count} messages" for topic, count in lost.items())
    return databases, (f"retention deleted from {gone}: the connector {', '.join(map(connector_name, databases))} "
                       "takes a new snapshot first (the tables read again, ordered before every change: nothing is "
                       "duplicated), then the rebuild reads the topic")
