"""Test helpers: landing files in arrival order, gold rows as oracle-shaped dicts, running the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from include import delta_store
from include.generator import GeneratorConfig, write_landing
from include.settings import Settings

LAKEHOUSE = [sys.executable, "-m", "include.cli"]
REPO = Path(__file__).resolve().parent.parent


def generate(settings: Settings, **kwargs):
    config = GeneratorConfig(**{"events": 3000, "seed": 11, "files": 6, **kwargs})
    return write_landing(settings.landing_dir("clickstream"), "clickstream", config)


def arrival_order(files: list[Path]) -> list[Path]:
    return sorted(files, key=lambda p: p.stat().st_mtime)


def gold_rows(settings: Settings, table: str, key: str = "user_id") -> dict[tuple, tuple]:
    """{(start, end, key): (event_count, total_value)} of a windowed or session gold table."""
    rows = delta_store.read_table(settings.table_path(table)).to_pylist()
    result = {}
    for r in rows:
        start, end = (r["session_start"], r["session_end"]) if "session_start" in r else (r["window_start"], r["window_end"])
        k = (int(start.timestamp()), int(end.timestamp()), r[key])
        assert k not in result, f"duplicate window row {k} in {table}"
        result[k] = (r["event_count"], r["total_value"])
    return result


def lineage(registry, landing_source: str = "clickstream") -> list[str]:
    """The jobs, in order, whose inputs all derive from one landing source (what the oracle models)."""
    jobs: list[str] = []
    for job_id in registry.order:
        sources = registry.job(job_id).sources
        if all(s.name == landing_source if s.kind == "landing" else registry.writer_of(s.name).id in jobs
               for s in sources):
            jobs.append(job_id)
    return jobs


def run_cli(args: list[str], env: dict, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        LAKEHOUSE + args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
        start_new_session=True, **kwargs,
    )


def problems_of(raw: dict) -> list[str]:
    """The registry validation problems of a raw registry document (which must be invalid)."""
    import pytest

    from include.registry import RegistryError, build_registry

    with pytest.raises(RegistryError) as err:
        build_registry(raw)
    return err.value.problems
