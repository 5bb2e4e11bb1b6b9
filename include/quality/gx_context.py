"""The Great Expectations side: the file data context, running a suite on a frame, Data Docs.

The project config is committed at ``include/gx/great_expectations.yml``. GE writes its datasources
back into its config and keeps its stores next to it, so every run copies the config to
``LAKEHOUSE_ROOT/_reports/gx/gx/`` and opens the context there: nothing is ever written into the repo.
The Data Docs site is ``LAKEHOUSE_ROOT/_reports/data_docs/``. Validation definitions and checkpoints refer
to the datasources of the run that made them, so they are dropped and rebuilt by every run; suites
and validation results (the report's history) are kept. Runs on one lakehouse are serialized
(the ``data_quality`` DAG validates tables in parallel tasks): a file lock on a local root, a lease on S3.

GE writes to local directories: on an S3 root a run works in a copy of both folders under this host's directory
(`_work/`), pulled from the root before it and pushed back after it (include/storage/mirror.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from include.quality.suites import Check
from include.records import lease
from include.registry.checks import BLOCKING
from include.settings import PACKAGE_DIR, Settings
from include.storage import mirror

log = logging.getLogger(__name__)

GX_CONFIG = PACKAGE_DIR / "gx" / "great_expectations.yml"
DOCS_DIR_VARIABLE = "${LAKEHOUSE_DATA_DOCS_DIR}"
DERIVED_STORES = ("validation_definitions", "checkpoints")
AIRFLOW_TASK_META = "lakehouse_airflow_task"  # a validation result's Airflow task (UI path), if one ran it
KEEP_VALIDATIONS_PER_SUITE = 50  # older validation results (and their Data Docs pages) are pruned
QUALITY_LOCK_WAIT_SECONDS = 600.0  # how long a quality run waits for another to finish


def workspace(settings: Settings) -> tuple[Path, Path]:
    """The local folders GE works in, (its project, the Data Docs): the lakehouse's own on a local root; on S3 a
    working copy under this host's directory."""
    if settings.root.is_local:
        return Path(str(settings.layout.gx_project)), Path(str(settings.layout.data_docs))
    base = settings.layout.work / f"gx-{hashlib.sha1(str(settings.root).encode()).hexdigest()[:12]}"
    return base / "gx", base / "data_docs"


def docs_dir(settings: Settings) -> Path:
    """Where GE writes the Data Docs (the root's own folder, or its working copy on S3)."""
    return workspace(settings)[1]


@contextmanager
def _exclusive(settings: Settings, project: Path) -> Iterator[None]:
    """One quality run at a time on the lakehouse: a file lock on a local root, a lease beside the report on S3."""
    if settings.root.is_local:
        with open(project / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        return

    deadline = time.monotonic() + QUALITY_LOCK_WAIT_SECONDS
    while True:
        try:
            held = lease.acquire(settings, "quality run", path=settings.layout.reports / "gx.lease")
            break
        except lease.LeaseHeld as holder:
            if time.monotonic() > deadline:
                raise lease.LeaseHeld(f"another quality run holds the report: {holder}") from None
            time.sleep(1.0)
    try:
        with lease.renewing([held]):
            yield
    finally:
        held.release()


@contextmanager
def open_context(settings: Settings) -> Iterator[Any]:
    """A GE file context on this lakehouse's copy of the project config, held under an exclusive lock."""
    project, docs = workspace(settings)
    (project / "gx").mkdir(parents=True, exist_ok=True)
    docs.mkdir(parents=True, exist_ok=True)
    with _exclusive(settings, project):
        if not settings.root.is_local:
            mirror.pull(settings.layout.gx_project, project)
            mirror.pull(settings.layout.data_docs, docs)
        config = GX_CONFIG.read_text().replace(DOCS_DIR_VARIABLE, str(docs))
        (project / "gx").mkdir(parents=True, exist_ok=True)
        (project / "gx" / "great_expectations.yml").write_text(config)
        for derived in DERIVED_STORES:  # they name this run's datasources; rebuilt from the registry
            shutil.rmtree(project / "gx" / derived, ignore_errors=True)
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
        import great_expectations as gx

        yield gx.get_context(mode="file", project_root_dir=str(project))
        if not settings.root.is_local:
            mirror.push(project, settings.layout.gx_project)
            mirror.push(docs, settings.layout.data_docs)


def _expectation(check: Check, observed: dict[str, Any] | None):
    """The GE expectation of `check`; table checks carry this run's observed details in the text
    (the validation page shows the description, the suite page also the notes)."""
    import great_expectations.expectations as gxe
    from great_expectations.expectations.metadata_types import FailureSeverity

    description = f"{check.name} ({check.severity}): {check.description}"
    if observed:
        description += ". Observed: " + ", ".join(f"{k} {json_value(v)}" for k, v in observed.items())
    return getattr(gxe, check.expectation)(
        **check.kwargs,
        meta={"check": check.name, "severity": check.severity},
        description=description.replace("<", "&lt;"),
        severity=FailureSeverity.CRITICAL if check.severity == BLOCKING else FailureSeverity.WARNING,
        notes=[f"{k}: {json_value(v)}" for k, v in observed.items()] if observed else None,
    )


def run_suite(context, *, name: str, frame, spark: bool, checks: list[Check], observed: dict[str, dict[str, Any]],
              batch_metadata: dict[str, Any], run_name: str, docs: Path,
              run_time: datetime) -> tuple[list[tuple[Check, bool, Any]], str | None]:
    """Validate `frame` against `checks` through a GE checkpoint, then update the Data Docs.

    `observed` holds, per check name, details computed before validation (table checks) to show in
    the report.
    Returns (check, success, observed value) per check, in order, and the validation result's Data Docs
    page (relative to the docs folder).
    """
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    datasource = (context.data_sources.add_or_update_spark("lakehouse_spark") if spark
                  else context.data_sources.add_or_update_pandas("lakehouse_pandas"))
    asset = datasource.add_dataframe_asset(name, batch_metadata=batch_metadata)
    batch = asset.add_batch_definition_whole_dataframe("latest")
    suite = context.suites.add_or_update(gx.ExpectationSuite(
        name=name, expectations=[_expectation(c, observed.get(c.name)) for c in checks]))
    definition = context.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch,
                                                                                       suite=suite))
    checkpoint = context.checkpoints.add_or_update(gx.Checkpoint(
        name=name, validation_definitions=[definition], result_format="SUMMARY", actions=[]))
    outcome = checkpoint.run(batch_parameters={"dataframe": frame},
                             run_id=RunIdentifier(run_name=run_name, run_time=run_time))
    # A dataframe batch has no asset name for the report's "Data asset:": the table's, before the page is built.
    for identifier, validation in outcome.run_results.items():
        validation.meta["batch_spec"] = {**(validation.meta.get("batch_spec") or {}),
                                         "data_asset_name": batch_metadata.get("table", name)}
        if batch_metadata.get("airflow_task"):  # the Airflow task that validated: the page links back to it
            validation.meta[AIRFLOW_TASK_META] = batch_metadata["airflow_task"]
        context.validation_results_store.set(identifier, validation)
    context.build_data_docs(resource_identifiers=[*outcome.run_results, ExpectationSuiteIdentifier(name=name)])
    by_check = {(r.expectation_config.meta["check"], r.expectation_config.kwargs["column"]): r
                for validation in outcome.run_results.values() for r in validation.results}
    missing = [c.name for c in checks if (c.name, c.column) not in by_check]
    if missing:
        raise RuntimeError(f"suite {name}: no result for {missing}")
    pages = [result_page(context, identifier, docs) for identifier in outcome.run_results]
    return [(c, bool(r.success), _observed(c, r)) for c in checks for r in [by_check[(c.name, c.column)]]], \
        next((p for p in pages if p), None)


def result_page(context, identifier, docs: Path) -> str | None:
    """The Data Docs page of one validation result, relative to the docs folder `docs` (None if not built)."""
    for site in context.get_docs_sites_urls(resource_identifier=identifier, only_if_exists=True):
        url = urlparse(site.get("site_url") or "")
        path = Path(unquote(url.path)).resolve()
        if url.scheme == "file" and docs.resolve() in path.parents:
            return path.relative_to(docs.resolve()).as_posix()
    return None


def _error(info: dict | None) -> str | None:
    """The message of an exception GE caught while evaluating an expectation (top level or per metric)."""
    candidates = [info or {}] + [v for v in (info or {}).values() if isinstance(v, dict)]
    raised = [c for c in candidates if c.get("raised_exception")]
    return str(raised[0].get("exception_message"))[:500] if raised else None


def _observed(check: Check, result) -> Any:
    error = _error(result.exception_info)
    if error:
        return {"error": error}
    observed = result.result.get("observed_value")
    if observed is not None:
        return observed.item() if hasattr(observed, "item") else observed  # numpy scalars
    return {"column": check.column, "unexpected_count": result.result.get("unexpected_count"),
            "unexpected_percent": result.result.get("unexpected_percent"),
            "unexpected_sample": (result.result.get("partial_unexpected_list") or [])[:5]}


def prune_validations(settings: Settings, keep: int = KEEP_VALIDATIONS_PER_SUITE) -> int:
    """Delete all but the newest `keep` validation results per suite; the next Data Docs index build
    drops their pages. Returns how many were deleted."""
    store = workspace(settings)[0] / "gx" / "validations"
    pruned = 0
    for suite in (p for p in store.iterdir() if p.is_dir()) if store.is_dir() else ():
        # validations/<suite>/<run_name>/<run_time>/<batch>.json; run_time sorts chronologically
        runs = sorted({p.parent for p in suite.glob("*/*/*.json")}, key=lambda p: p.name, reverse=True)
        for old in runs[keep:]:
            shutil.rmtree(old)
            if not any(old.parent.iterdir()):
                old.parent.rmdir()
            pruned += 1
    if pruned:
        log.info("pruned %d old validation results", pruned)
    return pruned


def ensure_index(context, settings: Settings):
    """The Data Docs index (where the lakehouse keeps it), built when no validation has built it yet."""
    if not (docs_dir(settings) / "index.html").exists():
        context.build_data_docs()
    return settings.layout.data_docs / "index.html"


def json_value(value: Any) -> str:
    return json.dumps(value, default=str)
