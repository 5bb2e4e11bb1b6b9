"""`lakehouse monitor up | down | status`: the lakehouse's metrics endpoint (with Alertmanager's webhook), Prometheus
and Alertmanager (Debian's packages), each a background process of its own under `<local>/_monitor/`.

`up` writes the configuration and the rules again from the registry and checks them (include/monitor/configs.py),
then starts what does not answer yet and waits until it does; a Prometheus already running reloads the new files.
Ports by settings (LAKEHOUSE_METRICS_PORT, LAKEHOUSE_PROMETHEUS_PORT, LAKEHOUSE_ALERTMANAGER_PORT), on
LAKEHOUSE_METRICS_BIND (loopback by default); samples kept LAKEHOUSE_PROMETHEUS_RETENTION_HOURS and at most 1 GB.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

from include.daemons import Daemon, port_taken
from include.entrypoints import lakehouse_command
from include.monitor.configs import RETENTION_SIZE, MonitorError, MonitorFiles, loopback, urls, write
from include.registry import load_registry
from include.settings import Settings

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 30.0
SERVE_CHECK_SECONDS = 10.0
STOPPED = "stopped by a signal"  # how `serve` ends when asked to


@dataclass(frozen=True)
class Part:
    """One process of the monitoring: its name, the binary's candidates (Debian's name first), where it answers."""

    name: str
    binaries: tuple[str, ...]
    ready_path: str  # answers 200 when ready

    def daemon(self, files: MonitorFiles) -> Daemon:
        stem = self.name.replace(" ", "-")
        return Daemon(self.name, files.home / f"{stem}.pid", files.home / f"{stem}.log")


ENDPOINT = Part("metrics endpoint", (), "/-/ready")  # as Prometheus' and Alertmanager's (include/monitor/endpoint.py)
PROMETHEUS = Part("prometheus", ("prometheus",), "/-/ready")
ALERTMANAGER = Part("alertmanager", ("prometheus-alertmanager", "alertmanager"), "/-/ready")
PARTS = (ENDPOINT, ALERTMANAGER, PROMETHEUS)  # started in this order, stopped in the reverse


def _port(settings: Settings, part: Part) -> int:
    return {ENDPOINT: settings.metrics_port, PROMETHEUS: settings.prometheus_port,
            ALERTMANAGER: settings.alertmanager_port}[part]


def _base_url(settings: Settings, part: Part) -> str:
    return f"http://{loopback(settings.metrics_bind)}:{_port(settings, part)}"


def answers(settings: Settings, part: Part, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(_base_url(settings, part) + part.ready_path, timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.HTTPError):
        return False


def _binary(part: Part) -> str:
    found = next((shutil.which(b) for b in part.binaries if shutil.which(b)), None)
    if found is None:
        raise MonitorError(f"{part.name} is missing ({' or '.join(part.binaries)} on the PATH): apt-get install "
                           "prometheus prometheus-alertmanager (`make bootstrap` installs them)")
    return found


def command(settings: Settings, files: MonitorFiles, part: Part) -> list[str]:
    listen = f"{settings.metrics_bind}:{_port(settings, part)}"
    if part is ENDPOINT:
        return [*lakehouse_command(), "metrics", "--serve"]
    if part is PROMETHEUS:
        return [_binary(part), f"--config.file={files.prometheus_config}",
                f"--storage.tsdb.path={files.prometheus_data}",
                f"--storage.tsdb.retention.time={settings.prometheus_retention_hours}h",
                f"--storage.tsdb.retention.size={RETENTION_SIZE}", f"--web.listen-address={listen}",
                "--web.enable-lifecycle", f"--web.external-url={urls(settings)['prometheus_url']}"]
    return [_binary(part), f"--config.file={files.alertmanager_config}", f"--storage.path={files.alertmanager_data}",
            f"--web.listen-address={listen}", "--cluster.listen-address=",  # one instance: no gossip port
            f"--web.external-url={urls(settings)['alertmanager_url']}"]


def _reload(settings: Settings, part: Part) -> None:
    """Have a running Prometheus or Alertmanager read its files again (a registry changed since it started)."""
    request = urllib.request.Request(_base_url(settings, part) + "/-/reload", method="POST")
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except (OSError, urllib.error.HTTPError) as exc:
        raise MonitorError(f"{part.name} at {_base_url(settings, part)} did not reload its configuration ({exc})") from None


def _start(settings: Settings, files: MonitorFiles, part: Part) -> str:
    daemon = part.daemon(files)
    if answers(settings, part):
        if part is not ENDPOINT:
            _reload(settings, part)
        return f"{part.name}: already answers at {_base_url(settings, part)}" + (
            "" if part is ENDPOINT else " (reloaded)")
    host, port = loopback(settings.metrics_bind), _port(settings, part)
    if daemon.running_pid() is not None:  # ours, slow to answer (a loaded machine): not started twice
        return f"{part.name}: runs (pid {daemon.running_pid()}) at {_base_url(settings, part)}, slow to answer"
    if port_taken(settings.metrics_bind, port):
        raise MonitorError(f"port {port} on {settings.metrics_bind} is taken by another program ({part.name}'s): free "
                           f"it, or set {_port_setting(part)}")
    for data in (files.prometheus_data, files.alertmanager_data):
        data.mkdir(parents=True, exist_ok=True)
    process = daemon.start_and_wait(command(settings, files, part), lambda: answers(settings, part), MonitorError,
                                    what=part.name, where=f" at http://{host}:{port}", timeout=START_TIMEOUT_SECONDS,
                                    stop_timeout=STOP_TIMEOUT_SECONDS, poll=0.2, env=_environment(settings),
                                    cwd=files.home)
    return f"{part.name}: up at {_base_url(settings, part)} (pid {process.pid}; log {daemon.log_file})"


def _port_setting(part: Part) -> str:
    return {ENDPOINT: "LAKEHOUSE_METRICS_PORT", PROMETHEUS: "LAKEHOUSE_PROMETHEUS_PORT",
            ALERTMANAGER: "LAKEHOUSE_ALERTMANAGER_PORT"}[part]


def _environment(settings: Settings) -> dict[str, str]:
    """The endpoint's: this lakehouse, its registry and ports (Prometheus and Alertmanager need nothing of it)."""
    return {**os.environ, **settings.storage_environment(), "LAKEHOUSE_REGISTRY": str(settings.registry_path),
            "LAKEHOUSE_METRICS_PORT": str(settings.metrics_port), "LAKEHOUSE_METRICS_BIND": settings.metrics_bind}


def up(settings: Settings) -> list[str]:
    """Write and check the files, start each part not answering yet; a line per part. MonitorError saying why one
    cannot start (the parts started before it keep running: `down` stops them)."""
    files = write(settings, load_registry(settings.registry_path))
    return [_start(settings, files, part) for part in PARTS]


def down(settings: Settings) -> list[str]:
    """Stop the parts `up` started, Prometheus first; a line per part."""
    files = MonitorFiles(settings.layout.monitor)
    return [part.daemon(files).stop_saying(f"{part.name}: stopped", f"{part.name}: none started by `lakehouse monitor "
                                           "up` runs", STOP_TIMEOUT_SECONDS) for part in reversed(PARTS)]


def serve(settings: Settings) -> str:
    """`up`, then stay in the foreground (a container's main process) until SIGTERM or SIGINT, or until a part stops
    answering for two checks in a row; then `down`. Why it ended."""
    ended = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: ended.set())
    for line in up(settings):
        log.warning("%s", line)
    why, missed = STOPPED, set()
    try:
        while not ended.wait(SERVE_CHECK_SECONDS):
            silent = {part.name for part in PARTS if not answers(settings, part)}
            if silent & missed:
                why = f"{', '.join(sorted(silent & missed))} stopped answering"
                break
            missed = silent
    finally:
        down(settings)
    return why


def status(settings: Settings) -> dict:
    """`up` (every part answers), `prometheus_url`, `alertmanager_url`, `metrics_url`, `webhook_url`, and per part
    whether it answers and the pid of the process `up` started."""
    files = MonitorFiles(settings.layout.monitor)
    parts = {part.name: {"answers": answers(settings, part), "url": _base_url(settings, part),
                         "pid": part.daemon(files).running_pid()} for part in PARTS}
    receiver = str(settings.alertmanager_config) if settings.alertmanager_config else "the product's webhook"
    return {"up": all(p["answers"] for p in parts.values()), **urls(settings), "parts": parts,
            "files": str(files.home), "receiver": receiver}


def render(info: dict) -> str:
    lines = [f"monitoring: {'up' if info['up'] else 'not (all) up'} (files under {info['files']})"]
    for name, part in info["parts"].items():
        pid = f", pid {part['pid']}" if part["pid"] else ""
        lines.append(f"  {name}: {'answers' if part['answers'] else 'does not answer'} at {part['url']}{pid}")
    lines.append(f"  alerts go to {info['receiver']}" + (f" ({info['webhook_url']}: rows of ops.alerts)"
                                                         if info["receiver"] == "the product's webhook" else ""))
    return "\n".join(lines)

