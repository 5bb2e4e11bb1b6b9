"""What a checkpoint action would do, as the person who approves it reads it: per job, its checkpoint's own plan,
what the action does to it, its tables with their rows and Delta versions now, the jobs downstream, whether it
runs now (stopped first, started again after), and how to undo it. Checks and reads only, no Spark: the
`checkpoint_reset` DAG's `plan` task builds its approval text from it; a refused request raises here, before
anything is asked or touched."""

from __future__ import annotations

import re
from dataclasses import dataclass

from include.checkpoints import journal as journals
from include.checkpoints.actions import ActionContext, ActionRefused, Prepared
from include.checkpoints.modes import RULES
from include.checkpoints.plan import Plan, downstream_jobs, plan_job
from include.checkpoints.request import CheckpointRequest
from include.records import lease
from include.registry import Registry
from include.settings import Settings
from include.storage import delta as delta_store


@dataclass(frozen=True)
class TableNow:
    table: str
    rows: int
    version: int | None  # None: the table does not exist yet


@dataclass(frozen=True)
class JobPreview:
    job: str
    plan: Plan  # what the job's checkpoint needs on its own (`resume`: nothing)
    effect: str  # what the action does to it
    tables: tuple[TableNow, ...]
    downstream: tuple[str, ...]  # jobs that read what it writes
    downstream_included: bool  # the action rebuilds them too (cascade)
    running: bool  # it runs now: stopped at a batch boundary first, started again after
    undo: str


def preview(settings: Settings, registry: Registry, request: CheckpointRequest) -> list[JobPreview]:
    """The preview of every job `request` touches; ActionRefused (or ValueError) when it may not run."""
    ctx = ActionContext(settings, registry, request)
    if request.mode == "resume-action":
        journal = journals.pending_for(settings, request.jobs[0])
        if journal is None:
            raise ActionRefused(f"job {request.jobs[0]!r} has no unfinished checkpoint action: nothing to resume")
        action = RULES[journal.mode]
        ctx = ActionContext(settings, registry, CheckpointRequest(**{**journal.request, "dry_run": False}))
        prepared = [Prepared(**p) for p in journal.prepared]
        effects = {p.job: f"finish {journal.mode}: {journal.progress()}" for p in prepared}
    else:
        action = RULES[request.mode]
        for job_id in request.jobs:
            journals.refuse_if_pending(settings, job_id)
        prepared = [action.prepare(ctx, registry.job(j)) for j in action.targets(ctx)]
        effects = {p.job: action.describe(ctx, registry.job(p.job), p) for p in prepared}
    targets = [p.job for p in prepared]
    previews = []
    for item in prepared:
        job = registry.job(item.job)
        downstream = tuple(downstream_jobs(registry, job.id))
        previews.append(JobPreview(
            job.id, plan_job(job, registry, settings.layout.checkpoint(job.id), settings=settings), effects[job.id],
            tuple(_table_now(settings, t) for t in job.tables_written()), downstream,
            all(d in targets for d in downstream), _runs_now(settings, job.id), action.undo(ctx, job, item)))
    return previews


def _table_now(settings: Settings, table: str) -> TableNow:
    path = settings.layout.table(table)
    if not delta_store.table_exists(path):
        return TableNow(table, 0, None)
    return TableNow(table, delta_store.count_rows(path), delta_store.latest_version(path))


def _runs_now(settings: Settings, job_id: str) -> bool:
    owner = lease.holder(settings, job_id)
    return owner is not None and not owner.action


def render_markdown(request: CheckpointRequest, previews: list[JobPreview]) -> str:
    """The approval text: what is asked, then per job what happens, what it touches now and how to undo it."""
    kind = "**destroys state**: approve only if that is intended" if request.destructive else "keeps every row"
    lines = [f"**{request.describe()}** — {kind}."]
    if request.dry_run:
        lines.append("This is a **dry run**: nothing changes and no running job is stopped.")
    for item in previews:
        lines += ["", f"### {item.job}"]
        if item.plan.mode == "resume":
            lines.append("- **Its checkpoint needs nothing** (plan: `resume`): this action is not needed for "
                         "compatibility with the registry.")
        elif item.plan.mode == "evolve":
            lines.append("- **Its checkpoint needs no action** (plan: `evolve`): its next start changes its table in "
                         "place (nothing is read again): "
                         + "; ".join(c.reason for c in item.plan.changes if c.mode == "evolve"))
        else:
            lines.append(f"- Its checkpoint's plan: `{item.plan.mode}`"
                         + (f" ({item.plan.note})" if item.plan.note else "")
                         + "".join(f"; {c.field}: {c.reason}" for c in item.plan.changes if c.mode == item.plan.mode))
        lines.append(f"- **Will**: {item.effect}")
        for table in item.tables:
            now = (f"{table.rows:,} rows at Delta version {table.version}" if table.version is not None
                   else "does not exist yet")
            lines.append(f"- Table `{table.table}`: {now}")
        if item.downstream:
            also = "rebuilt by this action too" if item.downstream_included else (
                "not part of this action: they keep what they read")
            lines.append(f"- Downstream jobs: {', '.join(item.downstream)} ({also})")
        else:
            lines.append("- Downstream jobs: none")
        if item.running:
            lines.append("- **Runs now**: " + ("left running (dry run)" if request.dry_run else
                                               "stopped at a batch boundary first, started again after"))
        else:
            lines.append("- Runs now: no")
        lines.append(f"- Undo: {_sql_as_code(item.undo)}")
    return "\n".join(lines)


def _sql_as_code(text: str) -> str:
    """Each RESTORE statement as a code span (double backticks: the table's path is in single ones)."""
    return re.sub(r"RESTORE TABLE delta\.`[^`]+` TO VERSION AS OF \d+", lambda m: f"`` {m.group(0)} ``", text)
