"""The pipeline-health report: a static HTML page under `LAKEHOUSE_ROOT/_reports/health/`, with SVG charts per job
drawn with matplotlib from `_ops/query_progress`, and the job's health problems (include/ops/health.py) flagged.

Per job, over its micro-batches (by progress time), only what means something for it: state rows total / updated /
removed (jobs that keep state); batch duration against the live batch interval; input against processing rate
(live runs: available-now runs measure none); watermark delay (batch time - watermark: how far event time trails
the clock; large for backfills of old data) and rows dropped by the watermark (jobs with a watermark, from the first
batch that has one). `health.json` beside the page holds the series drawn.
"""

from __future__ import annotations

import html
import io
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from include.cdc.health import cdc_health
from include.ops.health import STATE_HEALTH, check_job
from include.records.alerts import ALERTS_TABLE
from include.records.query_progress import PROGRESS_TABLE
from include.registry import JobSpec, Registry, Trigger
from include.settings import Settings
from include.storage import delta as delta_store
from include.storage.paths import StoragePath

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # Spark's watermark before the first batch sets one: no watermark yet


def progress_by_job(settings: Settings) -> dict[str, list[dict]]:
    """Each job's progress rows by progress time (a batch replayed after a crash: its last record)."""
    path = settings.layout.ops_table(PROGRESS_TABLE)
    if not delta_store.table_exists(path):
        return {}
    latest: dict[tuple, dict] = {}
    for row in delta_store.read_table(path).to_pylist():
        key = (row["job"], row["query_id"], row["batch_id"])
        if key not in latest or (row["progress_time"] or datetime.min.replace(tzinfo=UTC)) >= (
                latest[key]["progress_time"] or datetime.min.replace(tzinfo=UTC)):
            latest[key] = row
    jobs: dict[str, list[dict]] = {}
    for row in sorted(latest.values(), key=lambda r: r["progress_time"] or datetime.min.replace(tzinfo=UTC)):
        jobs.setdefault(row["job"], []).append(row)
    return jobs


def panels(job: JobSpec, rows: list[dict]) -> dict[str, dict[str, list[float | None]]]:
    """The charts that mean something for `job` and its batches: {panel title: {series label: values}}.
    State rows only for a job that keeps state; watermark delay and rows dropped only for one with a watermark,
    from the first batch that has one; rates only for the batches of live runs: an
    available-now run has no arrival rate."""
    charts: dict[str, dict[str, list[float | None]]] = {}
    if job.stateful:
        charts["state rows"] = {"total": [r["state_rows_total"] or 0 for r in rows],
                                "updated": [r["state_rows_updated"] or 0 for r in rows],
                                "removed": [r["state_rows_removed"] or 0 for r in rows]}
    charts["batch duration (s)"] = {"batch duration": [(r["batch_duration_ms"] or 0) / 1000 for r in rows]}
    live = [Trigger.names_live(r.get("trigger")) for r in rows]
    if any(live):
        charts["rows / s"] = {"input": [r["input_rows_per_second"] or 0 if on else None for r, on in zip(rows, live, strict=True)],
                              "processing": [r["processed_rows_per_second"] or 0 if on else None
                                             for r, on in zip(rows, live, strict=True)]}
    delays = [(r["progress_time"] - r["watermark"]).total_seconds() if r["watermark"] and r["watermark"] > EPOCH
              else None for r in rows]
    if any(d is not None for d in delays):
        charts["watermark delay (s)"] = {"watermark delay": delays}
        charts["rows dropped by watermark"] = {"dropped": [r["state_rows_dropped_by_watermark"] or 0 for r in rows]}
    return charts


def draw(rows: list[dict], charts: dict[str, dict[str, list]], interval_seconds: int | None, path: StoragePath) -> None:
    """The job's panels, one above the other, as one SVG; legends beside the plots, never over a point."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import dates as mdates
    from matplotlib import pyplot as plt

    times = [r["progress_time"] for r in rows]
    figure, axes = plt.subplots(len(charts), 1, figsize=(10, 2.3 * len(charts) + 0.8), sharex=True, squeeze=False)
    for axis, (title, series) in zip(axes[:, 0], charts.items(), strict=True):
        for label, values in series.items():
            axis.plot(times, values, marker="o", markersize=4, label=label)
        if title == "batch duration (s)" and interval_seconds:
            axis.axhline(interval_seconds, color="red", linestyle="--", label=f"live batch interval ({interval_seconds} s)")
        axis.set_ylabel(title)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize="small")
    first, last = min(times), max(times)
    pad = max((last - first) * 0.05, timedelta(minutes=1))  # one batch, or a few close ones: minutes, not years
    bottom = axes[-1, 0]
    bottom.set_xlim(first - pad, last + pad)
    locator = mdates.AutoDateLocator(maxticks=8)
    bottom.xaxis.set_major_locator(locator)
    bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    bottom.set_xlabel("batch progress time (UTC)")
    image = io.BytesIO()
    figure.savefig(image, format="svg", bbox_inches="tight")
    plt.close(figure)
    path.write_bytes(image.getvalue())


@dataclass(frozen=True)
class JobHealthRow:
    """One job's line of the report (and of `lakehouse health`)."""

    job: str
    batches: int
    status: str  # "not run yet" | "ok" | "warning" | "breached"
    problems: tuple[str, ...]

    def render(self) -> str:
        return f"{self.job:<34} {self.batches:>7}  {self.status:<11} {', '.join(self.problems) or '-'}"


def health_rows(settings: Settings, registry: Registry, progress: dict[str, list[dict]] | None = None
                ) -> list[JobHealthRow]:
    """Each job's batches recorded, status and problems; a job with no batch is "not run yet"."""
    progress = progress_by_job(settings) if progress is None else progress
    rows = []
    for job_id in registry.order:
        batches = len(progress.get(job_id, []))
        problems = tuple(check_job(settings, registry, job_id, progress=progress.get(job_id, [])).problems)
        status = ("breached" if any(p in STATE_HEALTH for p in problems) else "warning" if problems else
                  "ok" if batches else "not run yet")
        rows.append(JobHealthRow(job_id, batches, status, problems))
    return rows


def render_table(rows: list[JobHealthRow]) -> str:
    """`lakehouse health`: a line per job."""
    return "\n".join([f"{'job':<34} {'batches':>7}  {'status':<11} problems", *(r.render() for r in rows)])


def build(settings: Settings, registry: Registry) -> StoragePath:
    """(Re)write the report: index.html, an SVG per job that ran, and `health.json` (per job: batches, status,
    problems and the series of each chart drawn), `connectors.json` (the CDC connectors' health, when the registry has
    `cdc:` sources); returns index.html."""
    directory = settings.layout.health_report
    directory.mkdir(parents=True, exist_ok=True)
    progress = progress_by_job(settings)
    sections, summary, data = [], [], {}
    for health in health_rows(settings, registry, progress):
        job_id, job = health.job, registry.job(health.job)
        rows = progress.get(job_id, [])
        breaches = [p for p in health.problems if p in STATE_HEALTH]
        flag = (f'<p class="breach">state health breached: {html.escape(", ".join(breaches))}</p>' if breaches else "")
        other = [p for p in health.problems if p not in STATE_HEALTH]
        if other:
            flag += f'<p class="warn">also: {html.escape(", ".join(other))}</p>'
        shown = ", ".join(health.problems) or ("none" if rows else "not run yet")
        summary.append(f'<tr class="{health.status.replace(" ", "-")}"><td><a href="#{job_id}">{job_id}</a></td>'
                       f"<td>{len(rows)}</td><td>{html.escape(shown)}</td></tr>")
        charts = panels(job, rows) if rows else {}
        if rows:
            chart = f"{job_id}.svg"
            draw(rows, charts, registry.live_interval_seconds(job_id), directory / chart)
            body = f'<img src="{chart}" alt="health charts of {job_id}">'
        else:
            body = "<p>not run yet: no micro-batch recorded</p>"
        sections.append(f'<section id="{job_id}"><h2>{job_id}</h2><p>{html.escape(job.description)}</p>'
                        f"{flag}{body}</section>")
        data[job_id] = {"batches": len(rows), "status": health.status, "problems": list(health.problems),
                        "charts": charts}
    connectors = cdc_health(settings, registry)
    sections.append(_connectors_section(connectors))
    sections.append(_alerts_section(settings))
    if connectors:
        (directory / "connectors.json").write_text(json.dumps(connectors, indent=1))
    built = datetime.now(UTC).isoformat(timespec="seconds")
    index = directory / "index.html"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Lakehouse pipeline health</title>
<style>body{{font-family:sans-serif;margin:2em}} .breach{{color:#b00;font-weight:bold}} .warn{{color:#a60}}
tr.breached td{{background:#fdd}} tr.warning td{{background:#ffd}} tr.not-run-yet td{{color:#777}}
td,th{{padding:2px 8px;text-align:left}} img{{max-width:100%}}</style></head>
<body><h1>Lakehouse pipeline health</h1>
<p>Built {built} from <code>_ops/query_progress</code> under <code>{html.escape(str(settings.root))}</code>.
State-health problems ({", ".join(STATE_HEALTH)}) use each job's <code>supervision.health</code> thresholds.
Charts per job: state rows (jobs that keep state), batch duration, rates (live runs measure them), watermark delay
and rows dropped (jobs with a watermark, once they have one). The data drawn: <a href="health.json">health.json</a>.</p>
<table><tr><th>job</th><th>batches</th><th>problems</th></tr>{"".join(summary)}</table>
{"".join(sections)}
</body></html>
"""
    (directory / "health.json").write_text(json.dumps(data, indent=1, default=str))  # each whole
    index.write_text(page)
    log.info("pipeline-health report: %s", index)
    return index


def _connectors_section(connectors: dict[str, dict]) -> str:
    """The CDC connectors' section (include/cdc/health.py): their state, their slots, their problems; "" without."""
    if not connectors:
        return ""
    rows = "".join(f'<tr class="{"warning" if c["status"] != "ok" else ""}"><td>{html.escape(name)}</td>'
                   f"<td>{html.escape(c['summary'])}</td><td>{html.escape('; '.join(c['problems']) or '-')}</td></tr>"
                   for name, c in connectors.items())
    return ('<section id="cdc-connectors"><h2>Change data capture</h2><p>Debezium\'s connectors on the Kafka Connect '
            "worker and their replication slots (<code>lakehouse cdc status</code>).</p>"
            f"<table><tr><th>connector</th><th>state</th><th>problems</th></tr>{rows}</table></section>")


RECENT_ALERTS = 20  # rows of `_ops/alerts` the report shows


def _alerts_section(settings: Settings) -> str:
    """The latest rows of `_ops/alerts` (the supervisor's, the DAGs' failure callback's, Prometheus' through
    Alertmanager), newest first, with the Prometheus alerts still firing when last recorded (no resolved row yet)."""
    path = settings.layout.ops_table(ALERTS_TABLE)
    rows = delta_store.read_table(path).to_pylist() if delta_store.table_exists(path) else []
    if not rows:
        return ""
    resolved = {r.get("alert_id") for r in rows if r.get("status") == "resolved"}
    firing = sorted({f"{r['alert']} ({r.get('table_name') or r['job']})" for r in rows
                     if r.get("status") == "firing" and r.get("alert_id") not in resolved})
    latest = sorted(rows, key=lambda r: r["raised_at"], reverse=True)[:RECENT_ALERTS]
    cells = "".join(f"<tr><td>{r['raised_at']:%Y-%m-%d %H:%M:%S}</td><td>{html.escape(r.get('alert') or '-')}</td>"
                    f"<td>{html.escape(r.get('status') or '-')}</td><td>{html.escape(r['job'] or '')}</td>"
                    f"<td>{html.escape(r['severity'] or '')}</td><td>{html.escape(r['reason'] or '')}</td></tr>"
                    for r in latest)
    unresolved = html.escape(", ".join(firing)) if firing else "none"
    return ('<section id="alerts"><h2>Alerts</h2><p>The latest rows of <code>ops.alerts</code> (the supervisor\'s, '
            "the DAGs' failures, and Prometheus' alerts through Alertmanager: <code>lakehouse monitor</code>). "
            f"Prometheus alerts firing, not resolved since: {unresolved}.</p><table><tr><th>raised (UTC)</th><th>alert</th><th>status</th>"
            f"<th>job</th><th>severity</th><th>reason</th></tr>{cells}</table></section>")
