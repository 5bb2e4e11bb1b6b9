"""How a process of the product starts another of the product's commands: the `lakehouse` entry point (pyproject's
`[project.scripts]`) of the environment this process runs in, as a person starts it, and as `airflow_command()`
starts Airflow's (include/airflow/environment.py)."""

from __future__ import annotations

import sys
from pathlib import Path


def lakehouse_command() -> list[str]:
    """The `lakehouse` command beside this Python (the virtualenv's bin directory)."""
    return [str(Path(sys.executable).parent / "lakehouse")]
