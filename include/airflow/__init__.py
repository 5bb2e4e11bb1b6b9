"""The Airflow side of the lakehouse, kept light for DAG parsing (no pyspark, great_expectations or deltalake
at import time):

- :mod:`.environment`: the environment Airflow runs in for this project (home, DAGs, connections).
- :mod:`.operators`: the spark-submit operator of a registry job (the one launch path).
- :mod:`.callbacks`: default_args and the failure callback that records `_ops/alerts`.
- :mod:`.assets`: the Airflow Asset of each Delta table.
- :mod:`.docs`: the Markdown shown in the UI for jobs and quality tasks.
- :mod:`.tasks`: task bodies (supervise a live job, validate tables).
- `connections.json`, `plugins/`: static assets Airflow reads.
"""

from __future__ import annotations

from include.registry import Registry, load_registry
from include.settings import Settings, load_settings


def load() -> tuple[Settings, Registry]:
    """The settings and the validated registry, as every DAG file and task needs them."""
    settings = load_settings()
    return settings, load_registry(settings.registry_path)
