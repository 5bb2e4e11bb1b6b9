"""Markdown shown in the Airflow UI: every DAG's and task's doc (the DAG file says which tasks run in which order,
this module what each one is), the links from them into the documentation and the Data Docs."""

from __future__ import annotations

from include.checkpoints.request import MODES
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


# ------------------------------------------------------------------------------------------------ lakehouse_backfill


def backfill_doc(settings: Settings, registry: Registry) -> str:
    """The `lakehouse_backfill` DAG's doc."""
    return f"""
# lakehouse_backfill

Catches every streaming job up with an **available-now** trigger: each job processes what has
landed since its last run, in dependency order ({" → ".join(registry.order)}), and stops.
`run_jobs` runs them all in **one Spark application** (one driver start, not one per job); each job's own task
then shows how its job ended, with its summary line, and runs the job itself (a driver of its own) when `run_jobs`
did not finish it, or on a retry.

- **Schedule**: hourly, no catch-up, one active run at a time.
- **Touches**: the Delta tables under `{settings.root}` (each is an Airflow Asset updated by the
  task that writes it) and each job's checkpoint under `{settings.layout.checkpoint("<job>")}`.
- **Ends with** `quality_check`: the Great Expectations suites of the tables it wrote (gold; the SCD tables; bronze's rescued fields); a blocking
  failure fails the run (the task's "Data quality report" link opens the report). `health_report`
  rebuilds the pipeline-health report (Browse → "Pipeline health report").
- **Which button**: Trigger → *Single run*. Airflow's *Backfill* (a run per date in a range) is not needed:
  the jobs keep their place in checkpoints, so one run catches up on everything that landed, whatever the dates.
- **Manual runs**: set the `jobs` param to run a subset (the others are skipped; jobs downstream of a
  skipped job still run on what their upstream table already holds).
- **Recovering**: clear the failed task. Jobs resume from their checkpoints and every micro-batch is
  committed exactly once, so a rerun never duplicates rows. Failures are recorded in `_ops/alerts`.
"""


SELECT_JOBS_DOC = ("Applies the run's `jobs` param (empty: every job): the jobs left out are skipped here, so they never "
                   "wait for a Spark pool slot.")

RUN_JOBS_DOC = ("Runs the selected jobs in **one Spark application**, one after another in dependency order: one driver "
                "start instead of one per job. Its log has every job's batches; each job's own task then shows how its "
                "job ended (and its summary line). A job it did not finish (failed, refused, or the driver lost) runs in "
                "its own task, in a driver of its own, so a retry or a cleared job task never needs this one.")


def health_report_doc(settings: Settings) -> str:
    """The `health_report` task's doc (the backfill and live DAGs)."""
    return f"""Rebuilds the pipeline-health report, `{settings.layout.health_report_index}`: per job, charts
of state rows, batch duration against the trigger interval, input and processing rates, watermark delay and rows
dropped by the watermark, with its health problems flagged. Served at `/lakehouse-health/` (Browse → "Pipeline
health report")."""


# ---------------------------------------------------------------------------------------------------- lakehouse_live


def live_doc(settings: Settings, registry: Registry) -> str:
    """The `lakehouse_live` DAG's doc."""
    units = registry.live_units()
    live_jobs = ", ".join(job_id for members in units.values() for job_id in members)
    groups = ", ".join(f"{u} ({len(m)} jobs)" for u, m in units.items() if u not in registry.jobs) or "none"
    return f"""
# lakehouse_live

Keeps the live jobs ({live_jobs}) running with their **live** triggers (`processing-time=<interval>`,
or `on-upstream-commit`: a batch as soon as a table the job reads commits).
A registry **group** runs as one driver (one Spark application, one JVM) with a streaming query per job; its task
(`supervise_<group>`) sees to each of its jobs, a line per job in its log. A job without a group runs alone
(`supervise_<job>`). Groups here: {groups}.
Every 5 minutes each task checks each of its jobs, then watches them for {settings.live_watch_seconds} s
(`LAKEHOUSE_LIVE_WATCH_SECONDS`, every 10 s, from their leases): a job that crashes or fails is restarted within
about 10 s once its backoff allows, not at the next run; a stall is seen by the next run's check. The check: is it running (checkpoint lease + heartbeat), is it
healthy (batches not stalled, batch duration within the trigger interval, input rate not above
processing rate, state not only growing, watermark advancing), and acts per the job's
`supervision` policy in the registry: start it, restart it with exponential backoff, or alert.

- **One writer per checkpoint, always**: a job holds a lease on its checkpoint while it runs; a second
  start (overlapping runs, a restarted scheduler or worker) is refused and reported as `refused`.
- **Stopping**: trigger this DAG with the `stop` param listing jobs: they stop at a batch boundary
  and stay stopped (supervision does not restart them) until started again with the `start` param.
- **Touches**: `_ops/heartbeats/`, `_ops/supervisor/`, `_ops/alerts`, job logs in `_ops/logs/` under
  `{settings.root}`.
- **State health**: a running job whose state health is breached (state growing with no removals, watermark
  stuck, rows dropped by the watermark, state memory near the executor memory, partition skew; thresholds in
  its `supervision.health`) gets an `_ops/alerts` row and its task **fails** (no retry) while it lasts; the
  job keeps running. `health_report` rebuilds the pipeline-health report (Browse → "Pipeline health report").
- **Recovering**: a job that exhausted its restarts is `gave_up` and this task fails: read its log
  in `_ops/logs/<job>.log` (a group's: `_ops/logs/<group>.log`), fix the cause, then trigger with `start`.
- **Groups**: a job of a group that fails or is stopped ends alone, its siblings go on; restarting or starting it
  asks the group's running driver (no new JVM). A group's driver that dies is started again as a whole.
"""


def supervise_doc(settings: Settings, registry: Registry, unit: str, members: list[str]) -> str:
    """The doc of `supervise_<unit>`, the live task of a group (or of a job alone), with each member job's doc."""
    first = registry.jobs[members[0]]
    heading = (f"Supervises `{unit}` ({first.triggers['live']}): " if unit == members[0] else
               f"Supervises group `{unit}`: {', '.join(f'`{m}`' for m in members)} as one driver, a streaming "
               "query each (a line per job in this log). ")
    return (heading + f"Policy `{first.supervision.on_down}`, at most {first.supervision.max_restarts} "
            f"consecutive restarts, backoff from {first.supervision.backoff_seconds}s (per job). Fails when a job "
            "has `gave_up`, is blocked or breaches its state health.\n\n"
            + "\n\n".join(job_doc(settings, registry, registry.jobs[m], str(registry.jobs[m].triggers["live"]))
                          for m in members))


# ------------------------------------------------------------------------------------------------------ data_quality


def quality_dag_doc(settings: Settings, tables: list[str]) -> str:
    """The `data_quality` DAG's doc: the suites of `tables`."""
    return f"""
# data_quality

Runs the Great Expectations suites of the tables that have one ({", ".join(tables)}: gold windows,
sessions, joins, running totals, alerts and session summaries; bronze's rows with rescued fields, i.e. fields
the source's schema does not name, and their names) whenever one of them is updated (Airflow Assets written by `lakehouse_backfill`), and on demand.

- **Severity**: blocking expectations fail the task; warnings are recorded only. Every result goes
  to `_ops/dq_results` (table, version range, expectation, success, observed value).
- **Report**: Data Docs under `{settings.layout.data_docs}`, served in the UI under
  *Browse → Data quality reports* and linked from every task ("Data quality report").
- **Incremental**: each run validates the Delta versions written since the last validation; set the
  `full` param to validate every row.
- **Recovering**: fix the data (or the job) and rerun; a failing expectation names its observed value.
"""


def summary_sql_doc(settings: Settings) -> str:
    """The `gold_summary_by_name` task's doc: the pattern of a task reading the lakehouse by name."""
    return f"""
# gold_summary_by_name

The pattern for a DAG author who reads the lakehouse by name: the Spark provider's `SparkSqlOperator` (connection
`lakehouse_sql`) with plain SQL over the catalog, read-only. Here the rows and the latest window of
`gold.user_activity_5m`, in the task's log; skipped while no catalog answers at `{settings.metastore_uri}`.
"""


# --------------------------------------------------------------------------------------------- lakehouse_maintenance


def maintenance_doc(settings: Settings) -> str:
    """The `lakehouse_maintenance` DAG's doc, and its task's."""
    return f"""
# lakehouse_maintenance

Micro-batches make many small files. Daily (and on demand) this compacts every Delta table the jobs write
(`OPTIMIZE`) and removes data files no longer referenced and older than the table's retention (`VACUUM`),
per the writer's `sink.maintenance` in the registry (default: compact, keep 7 days, Delta's default).

- **Operational tables** (when `tables` is empty): `_ops/query_progress` rows older than
  `LAKEHOUSE_PROGRESS_RETENTION_DAYS` deleted; every `_ops` table compacted, vacuumed and its commit log cleaned.
- **Catalog** (when `tables` is empty and a catalog answers): every table named or corrected, as
  `lakehouse catalog sync` does (never dropped).
- **Params**: `tables`, the tables to maintain (empty: all of them).
- **Safe beside running jobs**: appends and VACUUM do not conflict with compaction; a table whose writer is
  running and upserts (MERGE) is not compacted this time (recorded as skipped, with the holder).
- **Runs**: `spark-submit spark_jobs/entrypoints/maintain_tables.py` on connection `spark_default`, like the jobs.
- **Touches**: the tables under `{settings.root}`; every operation is a row in `_ops/maintenance` (what ran,
  files before/after, versions, duration, outcome). A failed operation fails the task after the others ran.
"""


# -------------------------------------------------------------------------------------------------- checkpoint_reset

CHECKPOINT_FORM = "The action"  # the trigger form's section of the action itself


def mode_section(mode: str) -> str:
    """The trigger form's section of a mode's own options."""
    return f"Only for {mode}: {MODES[mode].help}"


APPROVAL_DOCS = docs_link("concepts/checkpoints.md", "Checkpoints and plans") + " (what each mode destroys, and its undo)"

CHECKPOINT_DOC = """
# checkpoint_reset

Manual checkpoint actions, the same as `lakehouse checkpoint <mode>` (see *Checkpoints and plans*, linked
below; `lakehouse checkpoint plan` says which one a registry change needs):

- **repartition**: move a job's state to the registry's `state_store.shuffle_partitions` (the only source of
  the count); nothing is reprocessed.
- **reset-checkpoint**: keep the sink table, start a new checkpoint at `from_version`, `from_timestamp`
  or `from_latest` (the plan says which versions are missed or read again).
- **full-refresh**: empty the sink tables (a new Delta version; history kept) and rebuild them from all
  source data; `cascade` rebuilds the downstream jobs too (required when there are any).
- **rollback** (one job, `to_batch`): restore the job's tables (Delta RESTORE) and checkpoint to what batch
  `to_batch` committed (`_ops/batch_ledger`); the next run re-runs the later batches on the same input.
  Refused while a downstream job has read what it would undo (roll that job back first).

Tasks: `plan` validates the form and shows the plans -> `approve`, a person's approval (Browse ->
Required Actions), only when the mode destroys state and `dry_run` is off -> `stop_live_jobs` (at a batch
boundary) -> `apply` (`spark-submit spark_jobs/entrypoints/checkpoint_action.py` on `spark_default`) -> `verify` (every
plan is `resume` again and, unless `verify_run` is off, an available-now run of each target resumes and
commits) -> `restart_live_jobs` -> `audit` (`_ops/checkpoint_audit`: every action, dry
runs and rejections included). `dry_run` is on by default. Old checkpoints are moved aside as
`_checkpoints/<job>.reset-<n>`, never deleted in place. A run whose approval is rejected changes nothing.
"""

APPROVE_DOC = ("Approve to apply; reject (the default) to change nothing (the run records the rejection). The text is "
               "the plan: per job what is moved aside, emptied, rebuilt or rewound, its tables' rows and versions now, "
               "the jobs downstream, the running jobs stopped and restarted, and how to undo it.")

VERIFY_DOC = ("`lakehouse checkpoint verify`: every target's plan is `resume` again and (param `verify_run`) an "
              "available-now run resumes from the checkpoint and commits, upstream first. Skipped in a dry run.")
