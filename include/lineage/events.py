"""OpenLineage run events of the product's job runs, built with OpenLineage's Python client from the registry's
lineage (include/lineage/graph.py): a START when a run begins, a COMPLETE or FAIL when it ends.

Naming: a job is `<LAKEHOUSE_LINEAGE namespace "lakehouse">/<job id>`; a table is named as the catalog names it
(`silver.clickstream`) in the namespace of the lakehouse's storage (its root's URI: `file:///...`, `s3://bucket/...`);
a landing directory by its path under that root; a Kafka topic by its name in `kafka://<bootstrap server>`, as
OpenLineage's naming spec says. Each dataset carries its schema; each written table its columns' lineage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated.column_lineage_dataset import (
    ColumnLineageDatasetFacet,
    Fields,
    InputField,
    Transformation,
)
from openlineage.client.generated.error_message_run import ErrorMessageRunFacet
from openlineage.client.generated.job_type_job import JobTypeJobFacet
from openlineage.client.generated.parent_run import Job as ParentJob
from openlineage.client.generated.parent_run import ParentRunFacet, Root, RootJob, RootRun
from openlineage.client.generated.parent_run import Run as ParentRun
from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields

from include.catalog_client.tables import catalog_name
from include.lineage.graph import ROWS, ColumnLineage, dataset_of, job_lineage
from include.registry import Registry
from include.settings import Settings

JOB_NAMESPACE = "lakehouse"
PARENT_VARIABLE, ROOT_PARENT_VARIABLE = "OPENLINEAGE_PARENT_ID", "OPENLINEAGE_ROOT_PARENT_ID"  # OpenLineage's names
PRODUCER = "https://github.com/lakehouse-pipeline/lakehouse/blob/main/include/lineage/events.py"
# transformation kind of a column -> OpenLineage's (type, subtype)
TRANSFORMATIONS = {"identity": ("DIRECT", "IDENTITY"), "window": ("DIRECT", "TRANSFORMATION"),
                   "aggregation": ("DIRECT", "AGGREGATION"), "join": ("INDIRECT", "JOIN"),
                   "scd": ("INDIRECT", "SORT"), "processor": ("DIRECT", "TRANSFORMATION")}


def dataset_name(settings: Settings, dataset: str) -> tuple[str, str]:
    """(namespace, name) of a dataset of the lineage graph."""
    if dataset.startswith("kafka:"):
        return f"kafka://{settings.kafka_bootstrap.split(',')[0]}", dataset.removeprefix("kafka:")
    root = settings.root.uri.rstrip("/") if hasattr(settings.root, "uri") else str(settings.root)
    if not root.startswith(("s3://", "s3a://", "file://")):
        root = f"file://{root}"
    return root.replace("s3a://", "s3://", 1), dataset if dataset.startswith("landing/") else catalog_name(dataset)


def _schema(columns: dict[str, str]) -> SchemaDatasetFacet:
    return SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=name, type=kind, ordinal_position=i + 1)
                                      for i, (name, kind) in enumerate(columns.items())])


def _column_lineage(settings: Settings, columns: dict[str, ColumnLineage]) -> ColumnLineageDatasetFacet:
    fields = {}
    for name, found in columns.items():
        kind, subtype = TRANSFORMATIONS[found.transformation]
        inputs = [InputField(*dataset_name(settings, s.dataset), field=s.column,
                             transformations=[Transformation(type=kind, subtype=subtype)])
                  for s in found.sources if s.column != ROWS]
        if inputs:
            fields[name] = Fields(inputFields=inputs)
    return ColumnLineageDatasetFacet(fields=fields)


def job_datasets(settings: Settings, registry: Registry, job_id: str) -> tuple[list[InputDataset],
                                                                               list[OutputDataset]]:
    """What the job reads and writes, as OpenLineage datasets: each with its schema, each written table with its
    columns' lineage (the drivers' events and the Airflow operators' lineage both say it so)."""
    lineage, job = job_lineage(registry, job_id), registry.job(job_id)
    read: dict[str, dict[str, str]] = {}
    for source in job.sources:
        read.setdefault(dataset_of(source), registry.table_schemas.get(source.name, {}) if source.kind == "delta"
                        else source.schema)
    inputs = [InputDataset(*dataset_name(settings, d), facets={"schema": _schema(columns)})
              for d, columns in read.items()]
    outputs = [OutputDataset(*dataset_name(settings, table),
                             facets={"schema": _schema(registry.table_schemas[table]),
                                     **({"columnLineage": _column_lineage(settings, lineage.columns[table])}
                                        if lineage.columns.get(table) else {})})
               for table in lineage.outputs]
    return inputs, outputs


def run_event(settings: Settings, registry: Registry, job_id: str, state: str, run_id: str, *, live: bool,
              error: str | None = None) -> RunEvent:
    """The event of the job's run `run_id` in `state` (START, COMPLETE, FAIL, ABORT), with its datasets
    (:func:`job_datasets`); a FAIL carries its error's first lines."""
    inputs, outputs = job_datasets(settings, registry, job_id)
    run_facets = {"errorMessage": ErrorMessageRunFacet(message=error[:4000], programmingLanguage="PYTHON")} \
        if error else {}
    parent = parent_facet(os.environ)
    if parent is not None:
        run_facets["parent"] = parent
    job_facets = {"jobType": JobTypeJobFacet(processingType="STREAMING" if live else "BATCH",
                                             integration="LAKEHOUSE", jobType="JOB")}
    return RunEvent(eventTime=datetime.now(UTC).isoformat(), producer=PRODUCER, eventType=RunState(state),
                    run=Run(runId=run_id, facets=run_facets), job=Job(JOB_NAMESPACE, job_id, facets=job_facets),
                    inputs=inputs, outputs=outputs)


def _run_address(text: str | None) -> tuple[str, str, str] | None:
    """`namespace/job name/run id` (OpenLineage's convention for a parent) split, or None."""
    parts = (text or "").split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def parent_facet(environment: Mapping[str, str]) -> ParentRunFacet | None:
    """The run that started this driver, as the Airflow task that submitted it says (OPENLINEAGE_PARENT_ID and
    OPENLINEAGE_ROOT_PARENT_ID, `namespace/job/run id`, the provider's `lineage_parent_id` and
    `lineage_root_parent_id`: include/airflow/operators.py); None when not started by one."""
    parent = _run_address(environment.get(PARENT_VARIABLE))
    if parent is None:
        return None
    root = _run_address(environment.get(ROOT_PARENT_VARIABLE)) or parent
    return ParentRunFacet(run=ParentRun(runId=parent[2]), job=ParentJob(namespace=parent[0], name=parent[1]),
                          root=Root(run=RootRun(runId=root[2]), job=RootJob(namespace=root[0], name=root[1])))
