"""A private `lakehouse monitor`: the metrics endpoint, Prometheus and Alertmanager on free ports, evaluating every
INTERVAL seconds, for one test; and what they say (Prometheus' API, the alerts recorded in `ops.alerts`)."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from include.daemons import free_port_block
from include.monitor import stack
from include.monitor.configs import urls
from include.settings import Settings
from include.storage import delta as delta_store

# A scrape must end within the interval (Prometheus' timeout is the interval, at most 10 s): on a loaded machine
# (the suite's 3 workers on 2 cores) a scrape took over a second, Prometheus marked the series stale, an alert's
# condition went absent; 2 s, and Alertmanager's group wait 4 s and group interval 8 s with it.
INTERVAL = 2


@contextmanager
def monitoring(settings: Settings) -> Iterator[Settings]:
    """`lakehouse monitor up` on free ports, scraping and evaluating every INTERVAL seconds (`down` after the block);
    its settings."""
    port = free_port_block([0, 1, 2])
    own = replace(settings, metrics_port=port, prometheus_port=port + 1, alertmanager_port=port + 2,
                  monitor_interval_seconds=INTERVAL)
    try:
        stack.up(own)
        yield own
    finally:
        stack.down(own)


def prometheus(settings: Settings, path: str, **query: str) -> dict:
    """The `data` of Prometheus' API answer at `path` (e.g. `/api/v1/query`, query=...)."""
    url = urls(settings)["prometheus_url"] + path + ("?" + urllib.parse.urlencode(query) if query else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]


def value(settings: Settings, expression: str) -> dict[tuple, float]:
    """An instant query's samples: labels (sorted pairs, `__name__` left out) -> value."""
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(r["value"][1])
            for r in prometheus(settings, "/api/v1/query", query=expression)["result"]}


def recorded_alerts(settings: Settings, alert: str | None = None) -> list[dict]:
    """The rows of `ops.alerts` Alertmanager's notifications wrote (those of `alert`), oldest first."""
    path = settings.layout.ops_table("alerts")
    if not delta_store.table_exists(path):
        return []
    rows = [r for r in delta_store.read_table(path).to_pylist() if r.get("alert")]
    return sorted((r for r in rows if alert in (None, r["alert"])), key=lambda r: r["raised_at"])


def statuses(settings: Settings, alert: str, **about: str) -> list[str]:
    """The statuses recorded for `alert` about a subject (`job=...` or `table_name=...`), in order."""
    return [r["status"] for r in recorded_alerts(settings, alert) if all(r[k] == v for k, v in about.items())]
