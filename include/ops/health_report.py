"""The pipeline-health report: a static HTML page under `LAKEHOUSE_ROOT/_reports/health/`, with SVG charts per job
drawn with matplotlib from `_ops/query_progress`, and the job's health problems (include/ops/health.py) flagged.

Per job, over its micro-batches (by progress time): state rows total / updated / removed; batch duration against
the live trigger interval; input against processing rate; watermark delay (batch time - watermark: how far
event time trails the clock; large for backfills of old data); rows dropped by the watermark.
"""

from __future__ import annotations

import html
import logging
from datetime import UTC, datetime
from pathlib import Path

from include.ops.health import STATE_HEALTH, check_job
from include.ops.query_progress import PROGRESS_TABLE
from include.registry import Registry
from include.settings import Settings
from include.storage import delta as delta_store

log = logging.getLogger(__name__)

PANELS = ("state rows", "batch duration (s)", "rows / s", "watermark delay (s)", "rows dropped by watermark")


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


def draw(rows: list[dict], interval_seconds: int | None, path: Path) -> None:
    """The job's five panels, one above the other, as one SVG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    times = [r["progress_time"] for r in rows]
    figure, axes = plt.subplots(len(PANELS), 1, figsize=(9, 11), sharex=True)
    series = {
        0: [("total", [r["state_rows_total"] or 0 for r in rows]), ("updated", [r["state_rows_updated"] or 0 for r in rows]),
            ("removed", [r["state_rows_removed"] or 0 for r in rows])],
        1: [("batch duration", [(r["batch_duration_ms"] or 0) / 1000 for r in rows])],
        2: [("input", [r["input_rows_per_second"] or 0 for r in rows]),
            ("processing", [r["processed_rows_per_second"] or 0 for r in rows])],
        3: [("watermark delay", [(r["progress_time"] - r["watermark"]).total_seconds() if r["watermark"] else None
                                 for r in rows])],
        4: [("dropped", [r["state_rows_dropped_by_watermark"] or 0 for r in rows])],
    }
    for index, (axis, title) in enumerate(zip(axes, PANELS, strict=True)):
        for label, values in series[index]:
            axis.plot(times, values, marker=".", label=label)
        if index == 1 and interval_seconds:
            axis.axhline(interval_seconds, color="red", linestyle="--", label=f"live trigger interval ({interval_seconds} s)")
        axis.set_ylabel(title)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("batch progress time (UTC)")
    figure.autofmt_xdate()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="svg")
    plt.close(figure)


def build(settings: Settings, registry: Registry) -> Path:
    """(Re)write the report; returns its index.html."""
    directory = settings.layout.health_report
    directory.mkdir(parents=True, exist_ok=True)
    progress = progress_by_job(settings)
    sections, summary = [], []
    for job_id in registry.order:
        job = registry.job(job_id)
        rows = progress.get(job_id, [])
        problems = check_job(settings, registry, job_id).problems
        breaches = [p for p in problems if p in STATE_HEALTH]
        flag = (f'<p class="breach">state health breached: {html.escape(", ".join(breaches))}</p>' if breaches else "")
        other = [p for p in problems if p not in STATE_HEALTH]
        if other:
            flag += f'<p class="warn">also: {html.escape(", ".join(other))}</p>'
        status = "breached" if breaches else ("warning" if other else "ok")
        summary.append(f'<tr class="{status}"><td><a href="#{job_id}">{job_id}</a></td><td>{len(rows)}</td>'
                       f'<td>{html.escape(", ".join(problems) or "none")}</td></tr>')
        if rows:
            chart = f"{job_id}.svg"
            draw(rows, job.triggers["live"].interval_seconds, directory / chart)
            body = f'<img src="{chart}" alt="health charts of {job_id}">'
        else:
            body = "<p>no micro-batches recorded yet</p>"
        sections.append(f'<section id="{job_id}"><h2>{job_id}</h2><p>{html.escape(job.description)}</p>'
                        f"{flag}{body}</section>")
    built = datetime.now(UTC).isoformat(timespec="seconds")
    index = directory / "index.html"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Lakehouse pipeline health</title>
<style>body{{font-family:sans-serif;margin:2em}} .breach{{color:#b00;font-weight:bold}} .warn{{color:#a60}}
tr.breached td{{background:#fdd}} tr.warning td{{background:#ffd}} td,th{{padding:2px 8px;text-align:left}}
img{{max-width:100%}}</style></head>
<body><h1>Lakehouse pipeline health</h1>
<p>Built {built} from <code>_ops/query_progress</code> under <code>{html.escape(str(settings.root))}</code>.
State-health problems ({", ".join(STATE_HEALTH)}) use each job's <code>supervision.health</code> thresholds.</p>
<table><tr><th>job</th><th>batches</th><th>problems</th></tr>{"".join(summary)}</table>
{"".join(sections)}
</body></html>
"""
    tmp = index.with_name(".index.html.tmp")
    tmp.write_text(page)
    tmp.replace(index)
    log.info("pipeline-health report: %s", index)
    return index
