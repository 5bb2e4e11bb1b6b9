"""One page per quality run in the Data Docs folder (`lakehouse_runs/<run id>.html`): each table the run
validated, its outcome and checks, and links to its Great Expectations validation results. Self-contained
(no scripts, no external assets): it renders the same offline."""

from __future__ import annotations

from html import escape
from pathlib import Path

from include.records.quality_results import QualityReport

RUNS_FOLDER = "lakehouse_runs"
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}.ok{color:#17692b}
.fail{color:#b00020;font-weight:bold}.warn{color:#8a5a00}code{white-space:pre-wrap}"""


def write(docs: Path, report: QualityReport) -> str:
    """Write the run's page; returns its path relative to `docs`."""
    relative = f"{RUNS_FOLDER}/{report.run_id}.html"
    target = docs / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    labels = report.labels()
    sections = []
    for table in dict.fromkeys(r.table for r in report.results):
        indexed = [(i, r) for i, r in enumerate(report.results) if r.table == table]
        blocking = sum(1 for _, r in indexed if r.outcome == "FAIL")
        warnings = sum(1 for _, r in indexed if r.outcome == "warn")
        verdict = f'<span class="fail">FAILED ({blocking} blocking)</span>' if blocking else '<span class="ok">passed</span>'
        links = " ".join(f'<a href="../{escape(page)}">validation result {n}</a>'
                         for n, page in enumerate(report.pages.get(table, []), 1))
        rows = "".join(
            f'<tr><td class="{r.outcome.lower()}">{r.outcome}</td><td>{escape(labels[i])}</td><td>{escape(r.severity)}</td>'
            f"<td>{escape(r.scope)}</td><td><code>{escape(r.observed_value)}</code></td></tr>" for i, r in indexed)
        sections.append(f"<h2>{escape(table)}: {verdict}, {warnings} warnings</h2><p>{links}</p>"
                        "<table><tr><th></th><th>check</th><th>severity</th><th>scope</th><th>observed</th></tr>"
                        f"{rows}</table>")
    notes = "".join(f"<li>{escape(note)}</li>" for note in report.notes)
    target.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>Quality run {escape(report.run_id)}</title>'
        f"<style>{STYLE}</style></head><body><h1>Data quality run {escape(report.run_id)} "
        f"({'full' if report.full else 'incremental'})</h1><ul>{notes}</ul>{''.join(sections)}"
        '<p><a href="../index.html">All validation results (Data Docs index)</a></p></body></html>')
    return relative

