"""The files `lakehouse monitor up` writes under `<local>/_monitor/` before it starts anything: Prometheus'
configuration and the alert rules generated from the registry, Alertmanager's configuration (the product's webhook
unless LAKEHOUSE_ALERTMANAGER_CONFIG names a team's), each checked by the tool that reads it (`promtool`, `amtool`)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from include.monitor.rules import METRICS_SCRAPE_JOB, alert_rules
from include.registry import Registry
from include.settings import Settings

RETENTION_SIZE = "1GB"
SPARK_DRIVERS_JOB = "spark_drivers"  # Prometheus' scrape job of the live drivers (file-based discovery)
CHECK_TIMEOUT_SECONDS = 60.0
WEBHOOK_PATH = "/alerts"  # where the metrics endpoint takes Alertmanager's webhook (POST: include/monitor/webhook.py)


class MonitorError(RuntimeError):
    """The monitoring cannot be configured, started or reached; the message says why in one line."""


@dataclass(frozen=True)
class MonitorFiles:
    """Where `lakehouse monitor up` keeps its files (Layout.monitor)."""

    home: Path

    @property
    def prometheus_config(self) -> Path:
        return self.home / "prometheus.yml"

    @property
    def rules(self) -> Path:
        return self.home / "rules.yml"

    @property
    def alertmanager_config(self) -> Path:
        return self.home / "alertmanager.yml"

    @property
    def drivers_targets(self) -> Path:
        """The live drivers Prometheus scrapes (its file-based discovery), written by the metrics endpoint."""
        return self.home / "targets" / "spark_drivers.json"

    @property
    def prometheus_data(self) -> Path:
        return self.home / "prometheus"

    @property
    def alertmanager_data(self) -> Path:
        return self.home / "alertmanager"


def loopback(bind: str) -> str:
    """The address a process of this host reaches a server listening on `bind` at."""
    return "127.0.0.1" if bind in ("0.0.0.0", "", "::") else bind


def urls(settings: Settings) -> dict[str, str]:
    """`metrics_url`, `prometheus_url`, `alertmanager_url`, `webhook_url`."""
    host = loopback(settings.metrics_bind)
    return {"metrics_url": f"http://{host}:{settings.metrics_port}/metrics",
            "prometheus_url": f"http://{host}:{settings.prometheus_port}",
            "alertmanager_url": f"http://{host}:{settings.alertmanager_port}",
            "webhook_url": f"http://{host}:{settings.metrics_port}{WEBHOOK_PATH}"}


def prometheus_config(settings: Settings, files: MonitorFiles) -> dict[str, Any]:
    """Scrape the lakehouse's endpoint (its `job` labels kept: they name the lakehouse's jobs) and the live drivers,
    evaluate the rules, send alerts to the Alertmanager beside it."""
    interval = f"{settings.monitor_interval_seconds}s"
    host = loopback(settings.metrics_bind)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": f"{min(settings.monitor_interval_seconds, 10)}s"},
        "rule_files": [str(files.rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"{host}:{settings.alertmanager_port}"]}]}]},
        "scrape_configs": [
            {"job_name": METRICS_SCRAPE_JOB, "honor_labels": True,
             "static_configs": [{"targets": [f"{host}:{settings.metrics_port}"]}]},
            {"job_name": SPARK_DRIVERS_JOB, "metrics_path": "/metrics/prometheus",
             "file_sd_configs": [{"files": [str(files.drivers_targets)], "refresh_interval": interval}]},
        ],
    }


def alertmanager_config(settings: Settings) -> dict[str, Any]:
    """Every alert to the product's webhook, resolved ones too; a group per alert and subject; the first
    notification of a group after 2 evaluation intervals, its next ones 4 apart."""
    interval = settings.monitor_interval_seconds
    return {
        "route": {"receiver": "lakehouse", "group_by": ["alertname", "job", "table"],
                  "group_wait": f"{2 * interval}s", "group_interval": f"{4 * interval}s", "repeat_interval": "4h"},
        "receivers": [{"name": "lakehouse", "webhook_configs": [{"url": urls(settings)["webhook_url"],
                                                                 "send_resolved": True}]}],
    }


def _check(tool: str, *arguments: str) -> None:
    """Run Prometheus' or Alertmanager's checker on a file; MonitorError with its words when it refuses it."""
    found = shutil.which(tool)
    if found is None:
        raise MonitorError(f"{tool} is missing: apt-get install prometheus prometheus-alertmanager (`make "
                           "bootstrap` installs them)")
    done = subprocess.run([found, *arguments], capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECONDS)
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())
        raise MonitorError(f"`{tool} {' '.join(arguments)}` refused it: {said[:600]}")


def write(settings: Settings, registry: Registry) -> MonitorFiles:
    """Write (again: the registry may have changed) and check every file; MonitorError when a check refuses one."""
    files = MonitorFiles(settings.layout.monitor)
    files.drivers_targets.parent.mkdir(parents=True, exist_ok=True)
    if not files.drivers_targets.exists():
        files.drivers_targets.write_text("[]\n")
    files.rules.write_text(yaml.safe_dump(alert_rules(settings, registry), sort_keys=False, width=120))
    files.prometheus_config.write_text(yaml.safe_dump(prometheus_config(settings, files), sort_keys=False))
    if settings.alertmanager_config is not None:
        if not settings.alertmanager_config.is_file():
            raise MonitorError(f"LAKEHOUSE_ALERTMANAGER_CONFIG={settings.alertmanager_config}: no such file")
        shutil.copyfile(settings.alertmanager_config, files.alertmanager_config)
    else:
        files.alertmanager_config.write_text(yaml.safe_dump(alertmanager_config(settings), sort_keys=False))
    _check("promtool", "check", "rules", str(files.rules))
    _check("promtool", "check", "config", "--syntax-only", str(files.prometheus_config))
    _check("amtool", "check-config", str(files.alertmanager_config))
    return files
