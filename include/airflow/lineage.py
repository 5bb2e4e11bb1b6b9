"""What the product's operators tell Airflow's OpenLineage provider (apache-airflow-providers-openlineage: it calls
an operator's `get_openlineage_facets_on_complete` / `_on_failure` when a task ends, and sends the task's events
where its `[openlineage]` section says): the datasets of the jobs a task ran, or a checkpoint action reset, as the
drivers' own events name them (include/lineage/events.py), and a quality task's tables with their checks' latest
results as `dataQualityAssertions`. Imported by the operators when the provider asks (OpenLineage's client is not
loaded while the DAGs are parsed)."""

from __future__ import annotations

import logging

from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.providers.openlineage.plugins.macros import lineage_parent_id, lineage_root_parent_id
from openlineage.client.event_v2 import InputDataset
from openlineage.client.generated.data_quality_assertions_dataset import (
    Assertion,
    DataQualityAssertionsDatasetFacet,
)

from include.lineage.events import PARENT_VARIABLE, ROOT_PARENT_VARIABLE, dataset_name, job_datasets
from include.records.quality_results import RESULTS_TABLE
from include.registry import load_registry
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)


def jobs_lineage(settings: Settings, job_ids: list[str]) -> OperatorLineage:
    """The datasets the jobs read and write (each once, in registry order)."""
    registry = load_registry(settings.registry_path)
    inputs, outputs = {}, {}
    for job_id in (j for j in registry.order if j in set(job_ids)):
        read, written = job_datasets(settings, registry, job_id)
        inputs.update({(d.namespace, d.name): d for d in read})
        outputs.update({(d.namespace, d.name): d for d in written})
    return OperatorLineage(inputs=list(inputs.values()), outputs=list(outputs.values()))


def quality_lineage(settings: Settings, tables: list[str]) -> OperatorLineage:
    """The validated tables, each with its checks' latest recorded results (`_ops/dq_results`) as assertions."""
    path = settings.layout.ops_table(RESULTS_TABLE)
    columns = ["table", "expectation", "severity", "success", "validated_at"]
    rows = delta_store.read_table(path, columns=columns).to_pylist() if delta_store.table_exists(path) else []
    latest: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["table"], row["expectation"])
        if row["table"] in tables and (key not in latest or row["validated_at"] >= latest[key]["validated_at"]):
            latest[key] = row
    inputs = []
    for table in tables:
        assertions = [Assertion(assertion=check, success=bool(row["success"]), severity=row["severity"])
                      for (name, check), row in sorted(latest.items()) if name == table]
        inputs.append(InputDataset(*dataset_name(settings, table), inputFacets={
            "dataQualityAssertions": DataQualityAssertionsDatasetFacet(assertions=assertions)} if assertions else {}))
    return OperatorLineage(inputs=inputs)


def parent_environment(task_instance) -> dict[str, str]:
    """The task as the parent of the runs its driver sends (include/lineage/events.py `parent_facet`): the ids Airflow's
    OpenLineage provider gives the task's and the DAG run's own events; empty when they cannot be made (lineage
    never fails a task)."""
    try:
        return {PARENT_VARIABLE: lineage_parent_id(task_instance),
                ROOT_PARENT_VARIABLE: lineage_root_parent_id(task_instance)}
    except Exception as exc:  # noqa: BLE001 - the provider's own failure, whatever it is, only costs the facet
        log.warning("no OpenLineage parent for the driver's runs: %s", exc)
        return {}
