"""Markdown shown in the Airflow UI for the jobs' tasks and the quality tasks."""

from __future__ import annotations

from include.ops.launch import SPARK_CONN_ID
from include.registry import JobSpec, Registry
from include.settings import REPO_ROOT, Settings

DATA_DOCS_URL_PREFIX = "/lakehouse-data-docs"  # where the plugin serves LAKEHOUSE_ROOT/_reports/data_docs/
HEALTH_URL_PREFIX = "/lakehouse-health"  # where it serves LAKEHOUSE_ROOT/_reports/health/
DOCS_URL_PREFIX = "/lakehouse-docs"  # where it serves the documentation site `make docs` builds
DOCS_SITE = REPO_ROOT / "site"  # `make docs`' default DOCS_DIR (mkdocs.yml's site_dir)


def docs_link(page: str, title: str) -> str:
    """A Markdown link to a page of the documentation as the Airflow API server serves it (`docs/<page>.md`, an
    optional `#anchor`), for the DAGs' and tasks' docs."""
    name, _, anchor = page.partition("#")
    return f"[{title}]({DOCS_URL_PREFIX}/{name.removesuffix('.md')}.html{'#' + anchor if anchor else ''})"


def with_docs(doc: str, page: str, title: str) -> str:
    """A DAG's or task's Markdown doc ending with a link to its page of the documentation."""
    return f"{doc.rstrip()}\n\n**Documentation**: {docs_link(page, title)} (also under Browse → Lakehouse documentation)\n"


def data_docs_path(page: str = "index.html") -> str:
    """The URL path (on the Airflow API server) of a page of the Data Docs folder."""
    return f"{DATA_DOCS_URL_PREFIX}/{page.lstrip('/')}"


def data_docs_url(page: str = "index.html") -> str:
    """The page's full URL, from Airflow's `[api] base_url` (what a person opens from a task log)."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/") + data_docs_path(page)


def job_doc(settings: Settings, registry: Registry, job: JobSpec, trigger: str) -> str:
    """Markdown shown in the Airflow UI for a job's task."""
    source = " and ".join(
        f"landing files `{settings.layout.landing(s.path)}`" if s.kind == "landing"
        else f"Kafka topic(s) `{s.path}` (connection `{s.kafka.connection}`)" if s.kind == "kafka"
        else f"new commits of Delta table `{s.name}`"
        for s in job.sources
    )
    writes = ", ".join(f"`{t}` (`{settings.layout.table(t)}`)" for t in job.tables_written())
    upstream = ", ".join(registry.upstream(job.id)) or "none"
    return f"""### `{job.id}`

{job.description}

- **Runs**: `spark-submit spark_jobs/entrypoints/run_job.py {job.id} --trigger "{trigger}"` on connection `{SPARK_CONN_ID}`
- **Reads**: {source} (upstream jobs: {upstream})
- **Writes**: {writes}, mode `{job.sink.mode}`, each micro-batch committed exactly once
- **Checkpoint**: `{settings.layout.checkpoint(job.id)}` (state store: {job.state_store.provider})

**Recovering**: a failed run can simply be cleared and rerun: the job resumes from its checkpoint
and a replayed micro-batch writes nothing twice. If another process holds the job's checkpoint
lease the run is refused with the holder's pid; stop that writer (`lakehouse stop {job.id}`) first.
"""


QUALITY_DOC = """Validates the gold tables with their Great Expectations suites (derived from the registry).
Windows and sessions: window size and alignment / session bounds (at least the gap), keys, counts,
no future rows, uniqueness, freshness, reconciliation with silver. Joins: the join bound of matched
rows, unmatched rows without right-side values, keys, uniqueness per (left key, right key),
freshness. Bronze: how many rows carried fields the source's schema does not name (`_rescued`), and which
field names (a warning by default: a producer changed). New Delta versions only, unless `full`. A **blocking** failure fails this task (and is
recorded in `_ops/alerts`); **warnings** are recorded in `_ops/dq_results` only. The report (Data Docs)
is one click away: the URL at the end of the task log (a new tab), the task's "Data quality report" link
under Details → Extra Links (this run's result: the table's validation, or a page listing each table's;
Airflow opens it in the same tab and the report links back), or *Browse → Data quality reports*."""
