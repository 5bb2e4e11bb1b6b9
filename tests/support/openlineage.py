"""OpenLineage events read back with OpenLineage's own Python client: its classes built from an event's JSON (their
validators run: the run id a UUID, the event time an ISO time with its time, the state one of the spec's), so that
what the product emits is what the client itself would write."""

from __future__ import annotations

import json
from pathlib import Path

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated.column_lineage_dataset import (
    ColumnLineageDatasetFacet,
    Fields,
    InputField,
    Transformation,
)
from openlineage.client.generated.parent_run import Job as ParentJob
from openlineage.client.generated.parent_run import ParentRunFacet, Root, RootJob, RootRun
from openlineage.client.generated.parent_run import Run as ParentRun
from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields


def _facets(raw: dict) -> dict:
    facets = {}
    if "schema" in raw:
        facets["schema"] = SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=f["name"], type=f.get("type"))
                                                      for f in raw["schema"]["fields"]])
    if "columnLineage" in raw:
        facets["columnLineage"] = ColumnLineageDatasetFacet(fields={
            column: Fields(inputFields=[InputField(i["namespace"], i["name"], field=i["field"], transformations=[
                Transformation(type=t["type"], subtype=t.get("subtype")) for t in i.get("transformations", [])])
                for i in said["inputFields"]]) for column, said in raw["columnLineage"]["fields"].items()})
    return facets


def _run_facets(raw: dict) -> dict:
    if "parent" not in raw:
        return {}
    parent, root = raw["parent"], raw["parent"]["root"]
    return {"parent": ParentRunFacet(
        run=ParentRun(runId=parent["run"]["runId"]), job=ParentJob(parent["job"]["namespace"], parent["job"]["name"]),
        root=Root(run=RootRun(runId=root["run"]["runId"]), job=RootJob(root["job"]["namespace"], root["job"]["name"])))}


def parse(text: str) -> RunEvent:
    """One event's JSON as the client's RunEvent (ValueError / TypeError when it is not one)."""
    raw = json.loads(text)
    return RunEvent(eventTime=raw["eventTime"], producer=raw["producer"], eventType=RunState(raw["eventType"]),
                    run=Run(runId=raw["run"]["runId"], facets=_run_facets(raw["run"].get("facets", {}))), job=Job(raw["job"]["namespace"], raw["job"]["name"]),
                    inputs=[InputDataset(d["namespace"], d["name"], facets=_facets(d.get("facets", {})))
                            for d in raw.get("inputs", [])],
                    outputs=[OutputDataset(d["namespace"], d["name"], facets=_facets(d.get("facets", {})))
                             for d in raw.get("outputs", [])])


def read_events(directory: Path) -> list[RunEvent]:
    """Every event the drivers wrote under `directory` (LAKEHOUSE_LINEAGE=file: `<local>/_lineage/`), parsed, in
    time order."""
    lines = [line for path in sorted(directory.glob("openlineage-*.jsonl")) for line in path.read_text().splitlines()
             if line.strip()]
    return sorted((parse(line) for line in lines), key=lambda e: e.eventTime)
