"""Task bodies of the lakehouse DAGs (imported lazily by the tasks, so heavy imports wait for run time)."""

from __future__ import annotations

import logging
import textwrap
import time

from include.airflow import load
from include.airflow.callbacks import RequestRefused
from include.checkpoints.request import from_params, verify_request
from include.ops import processes
from include.ops.admission import CapacityFull
from include.records import lease
from include.records.bookkeeping import read_state
from include.records.lease import LeaseHeld

log = logging.getLogger(__name__)


def validate_tables(tables: list[str], full: bool = False, origin: str | None = None) -> tuple[str, str, list[str]]:
    """Task body: run the quality suites of `tables` (`origin`: the task's UI path, linked from its pages).
    Returns (summary, the report page relative to the Data Docs folder, the blocking failures as `table:check`);
    warnings are only recorded."""
    from include.quality.runner import run_quality

    settings, registry = load()
    if not tables:
        return "no tables to validate", "index.html", []
    report = run_quality(settings, registry, tables, full=full, origin=origin)
    log.info("%s", report.render())
    labels = report.labels()
    failures = [f"{r.table}:{labels[i]}" for i, r in enumerate(report.results) if r in report.blocking_failures]
    return ("FAILED: " + ", ".join(failures)) if failures else "passed", report.report_page(), failures


def supervise(unit: str, params: dict | None = None, run_id: str = "") -> dict[str, str]:
    """Task body of `lakehouse_live`, for a group of live jobs (one driver) or a job alone: per job, stop or start it
    on request, else supervise it per its policy; a line per job in the log. Fails, once every job is seen to, when a
    job gave up, is blocked or breached its state health."""
    from include.ops.connectors import databases_read, supervise_connectors
    from include.ops.supervisor import supervise_job

    settings, registry = load()
    params = params or {}
    members = registry.live_units()[unit]
    actions: dict[str, str] = {}
    for job_id in members:
        if job_id in (params.get("stop") or []):
            stopped = processes.stop_job(settings, job_id, f"stop requested by lakehouse_live {run_id}",
                                         wait_seconds=settings.stop_grace_seconds)
            actions[job_id] = "stopped" if stopped else f"did not stop within {settings.stop_grace_seconds}s"
        elif job_id in (params.get("start") or []):
            try:
                processes.start_job(settings, registry, job_id)
                actions[job_id] = "started"
            except LeaseHeld as running:
                actions[job_id] = f"already running: {running}"
            except CapacityFull as full:
                actions[job_id] = str(full)
        else:
            actions[job_id] = supervise_job(settings, registry, job_id, run_id=run_id)
        log.info("%s: %s", job_id, actions[job_id])
    # the CDC connectors the unit's jobs read: a failed task restarted through Connect's REST API (include/ops)
    supervise_connectors(settings, databases_read(registry, members), dag_id="lakehouse_live", task_id=unit,
                         run_id=run_id)
    _fail_on_problems(settings, unit, actions)
    if settings.live_watch_seconds and not (params.get("stop") or params.get("start")):
        actions = watch(settings, registry, unit, actions, run_id, settings.live_watch_seconds)
    return actions


WATCH_POLL_SECONDS = 10.0
WATCH_RECHECK_SECONDS = 60.0  # a job that stays down (waiting for its broker, for capacity) is checked this often
# check outcomes after which a job found down is supervised at once: it was left running, or its backoff is running
ACT_WHEN_DUE = frozenset({"healthy", "started", "restarted", "breached", "backing_off"})


def watch(settings, registry, unit: str, actions: dict[str, str], run_id: str, seconds: float,
          poll_seconds: float = WATCH_POLL_SECONDS) -> dict[str, str]:
    """After the check, watch the jobs for `seconds` (every `poll_seconds`, from their leases: no Spark, no Delta
    read): a job that went down is supervised at once, and again once its backoff allows, instead of at the next
    scheduled run. A job stopped by request is left alone. The CDC connectors the jobs read are checked every
    WATCH_RECHECK_SECONDS. Fails as the check does (gave up, blocked)."""
    from include.ops.connectors import databases_read, supervise_connectors
    from include.ops.supervisor import supervise_job

    members = registry.live_units()[unit]
    deadline = time.monotonic() + seconds
    checked = dict.fromkeys(members, time.monotonic())
    # Supervised at the first poll its backoff allows: a job that goes down after running (also one the check left
    # running that is down already: a driver lost between the check and here) and one backing off. A job found down
    # for another reason (waiting for its broker, for capacity) is rechecked every WATCH_RECHECK_SECONDS.
    act_when_due = {j: actions.get(j) in ACT_WHEN_DUE or lease.is_held(settings, j) for j in members}
    databases, connectors_checked = databases_read(registry, members), time.monotonic()
    while time.monotonic() + poll_seconds < deadline:
        time.sleep(poll_seconds)
        if databases and time.monotonic() - connectors_checked >= WATCH_RECHECK_SECONDS:
            connectors_checked = time.monotonic()
            supervise_connectors(settings, databases, dag_id="lakehouse_live", task_id=unit, run_id=run_id)
        for job_id in members:
            running = lease.is_held(settings, job_id)
            state = read_state(settings, job_id)
            if running or state.get("stopped_by_request"):
                act_when_due[job_id] = running
                continue
            if time.time() < float(state.get("next_allowed_at") or 0):  # within its backoff
                continue
            if act_when_due[job_id] or time.monotonic() - checked[job_id] >= WATCH_RECHECK_SECONDS:
                checked[job_id] = time.monotonic()
                actions[job_id] = supervise_job(settings, registry, job_id, run_id=run_id)
                act_when_due[job_id] = actions[job_id] in ACT_WHEN_DUE or lease.is_held(settings, job_id)
                log.info("%s: %s (watching)", job_id, actions[job_id])
                _fail_on_problems(settings, unit, {job_id: actions[job_id]})
    return actions


def _fail_on_problems(settings, unit: str, actions: dict[str, str]) -> None:
    """Fail the task when a job gave up, is blocked, did not stop, or breached its state health (that alone: no
    retry, the job keeps running)."""
    breached = [j for j, a in actions.items() if a == "breached"]
    problems = [f"{j}: state health breached (see _ops/alerts, `lakehouse state {j}` and the health report "
                f"{settings.layout.health_report_index})" for j in breached]
    for job_id, action in actions.items():
        if action == "gave_up":
            problems.append(f"{job_id}: too many consecutive restarts; see {settings.layout.job_log(unit)}")
        elif action == "blocked":
            problems.append(f"{job_id}: not started, its checkpoint needs a person first: "
                            f"`lakehouse checkpoint plan {job_id}` says what and how")
        elif action.startswith("did not stop"):
            problems.append(f"{job_id} {action}")
    if problems and len(problems) == len(breached):  # the jobs keep running; the failed task is what a person sees
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException("; ".join(problems))
    if problems:
        raise RuntimeError("; ".join(problems))


def health_report() -> str:
    """Task body of `health_report` (backfill and live DAGs): rebuild the pipeline-health report; its path."""
    from include.ops.health_report import build

    settings, registry = load()
    return str(build(settings, registry))


def checkpoint_plan(params: dict, run_id: str) -> dict:
    """`checkpoint_reset`'s first task: validate the form and the action against the registry, the checkpoints and
    the tables, and show what it would do (the approval's text). A request that may not run fails this task with
    one line (RequestRefused: no traceback, no alert) and is recorded in `_ops/checkpoint_audit` as refused."""
    from include.checkpoints.preview import preview, render_markdown

    settings, registry = load()
    actor = f"dag:checkpoint_reset/{run_id}"
    try:
        request = from_params(params)
        unknown = [j for j in request.jobs if j not in registry.jobs]
        if unknown:
            raise ValueError(f"unknown job(s) {', '.join(unknown)}; jobs: {', '.join(registry.order)}")
        previews = preview(settings, registry, request)
    except (ValueError, KeyError) as exc:  # RequestInvalid, ActionRefused, ActionPending: what the person asked
        reason = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        _record_refusal(settings, actor, params, reason)
        log.error("refused: %s", reason)
        raise RequestRefused(reason) from None
    targets = [p.job for p in previews]
    markdown = render_markdown(request, previews)
    log.info("%s", markdown)
    verify_args = None if request.dry_run else verify_request(targets, params.get("verify_run", True)).to_argv()
    return {"mode": request.mode, "targets": targets, "args": request.to_argv(), "dry_run": request.dry_run,
            "markdown": markdown, "needs_approval": request.destructive and not request.dry_run,
            "actor": actor, "verify_args": verify_args, "skip_reason": "a dry run changed nothing to verify"}


def _record_refusal(settings, actor: str, params: dict, reason: str) -> None:
    from include.records import checkpoint_audit

    rows = [checkpoint_audit.unapplied_row(actor, job, str(params.get("mode") or ""), bool(params.get("dry_run")),
                                           "refused", reason) for job in (params.get("jobs") or ["-"])]
    checkpoint_audit.record(settings, rows)


def stop_live_jobs(planned: dict) -> list[str]:
    """Stop (at a batch boundary) the target jobs that run now; the ones stopped are restarted at the end."""
    if planned["dry_run"]:
        return []
    settings, _ = load()
    stopped = []
    for job_id in planned["targets"]:
        if lease.is_held(settings, job_id):
            if not processes.stop_job(settings, job_id, f"checkpoint {planned['mode']} by {planned['actor']}",
                                      wait_seconds=settings.stop_grace_seconds):
                raise RuntimeError(f"{job_id} did not stop within {settings.stop_grace_seconds}s")
            stopped.append(job_id)
    return stopped


def restart_live_jobs(stopped: list[str] | None) -> list[str]:
    """Start again the jobs `stop_live_jobs` stopped (whatever happened in between)."""
    settings, registry = load()
    for job_id in stopped or []:
        processes.start_job(settings, registry, job_id)
    return list(stopped or [])


def audit_checkpoint_run(planned: dict | None, failed_tasks: list[str], run_id: str) -> str:
    """The run's `_ops/checkpoint_audit` rows; a run that applied nothing (rejected, or a task failed before
    the action) gets one row per job saying so. Fails when a task of the run failed, except the plan task's
    refusal of the request (its one line and its audit row say why)."""
    from include.records import checkpoint_audit

    settings, _ = load()
    actor = f"dag:checkpoint_reset/{run_id}"
    rows = [r for r in checkpoint_audit.outcomes(settings, include_progress=True) if r["actor"] == actor]
    if planned is None:  # the plan task refused the request (and recorded why) or could not run
        refused = [r for r in rows if r["outcome"] == "refused"]
        if refused:
            summary = "\n".join(f"{r['job']}: {r['mode']} refused: {r['detail']}" for r in refused)
            log.info("%s", summary)
            return summary
        raise RuntimeError(f"the plan task failed before it could say why: see its log ({', '.join(failed_tasks)})")
    if not rows:
        reason = f"failed before the action: {', '.join(failed_tasks)}" if failed_tasks else "rejected by a person"
        rows = [checkpoint_audit.unapplied_row(actor, job, planned["mode"], planned["dry_run"], "not applied", reason)
                for job in planned["targets"]]
        checkpoint_audit.record(settings, rows)
    summary = "\n".join(_audit_line(r) for r in rows)
    log.info("%s", summary)
    if failed_tasks:
        raise RuntimeError(f"tasks failed: {', '.join(failed_tasks)}\n{summary}")
    return summary


def _audit_line(row: dict) -> str:
    """An audit row as the task log shows it: what happened on one line, the detail wrapped below (the log viewer
    does not wrap)."""
    detail = textwrap.fill(row["detail"] or "", width=110, initial_indent="    ", subsequent_indent="    ",
                           break_long_words=False, break_on_hyphens=False)
    return f"{row['job']}: {row['mode']} {row['outcome']}" + (f"\n{detail}" if detail.strip() else "")
