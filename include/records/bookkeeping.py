"""The live supervisor's bookkeeping per job in `_ops/supervisor/<job>.json`: consecutive restarts,
next allowed restart, batch at the last restart, stopped-by-request."""

from __future__ import annotations

from include.settings import Settings
from include.storage.files import read_json, write_json_atomically


def read_state(settings: Settings, job_id: str) -> dict:
    """The supervisor's bookkeeping for a job ({} when there is none)."""
    return read_json(settings.layout.supervisor_state(job_id)) or {}


def update_state(settings: Settings, job_id: str, **changes) -> dict:
    """Merge `changes` into the job's bookkeeping (a value of None removes the key); atomic write."""
    state = read_state(settings, job_id)
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    write_json_atomically(settings.layout.supervisor_state(job_id), state)
    return state
