"""The dependency graph of raw registry jobs: which tables each writes and reads, and their order."""

from __future__ import annotations

from typing import Any


def declared_tables(job: Any) -> list[str]:
    """The tables a raw job writes: sink.table, then sink.quarantine_table."""
    sink = job.get("sink") if isinstance(job, dict) else None
    if not isinstance(sink, dict):
        return []
    return [t for t in (sink.get("table"), sink.get("quarantine_table")) if isinstance(t, str)]


def read_tables(job: Any) -> list[str]:
    """The Delta tables a raw job reads: source.table, and transform.right.table of a join."""
    if not isinstance(job, dict):
        return []
    transform = job.get("transform")
    sections = [job.get("source"), transform.get("right") if isinstance(transform, dict) else None]
    return [s["table"] for s in sections if isinstance(s, dict) and isinstance(s.get("table"), str)]


def dependency_order(raw_jobs: dict, writers: dict[str, list[str]], problems: list[str]) -> list[str]:
    """Topological order of jobs (upstream first: every writer of a table before its readers); reports cycles
    into `problems`."""
    deps: dict[str, list[str]] = {
        job_id: [w for t in read_tables(job) for w in writers.get(t, [])] for job_id, job in raw_jobs.items()
    }
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(job_id: str, trail: list[str]) -> None:
        if state.get(job_id) == "done":
            return
        if state.get(job_id) == "visiting":
            cycle = trail[trail.index(job_id):] + [job_id]
            problems.append(f"job {job_id!r}: reading its source tables forms a cycle: {' -> '.join(cycle)}")
            return
        state[job_id] = "visiting"
        for upstream in deps[job_id]:
            visit(upstream, trail + [job_id])
        state[job_id] = "done"
        order.append(job_id)

    for job_id in raw_jobs:
        visit(job_id, [])
    return order
