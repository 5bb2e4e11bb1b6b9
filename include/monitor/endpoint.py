"""The lakehouse's HTTP endpoint (`lakehouse metrics --serve`, started by `lakehouse monitor up`): `GET /metrics`,
the metrics Prometheus scrapes (include/ops/metrics.py, read at each scrape; each scrape also writes the live drivers
Prometheus discovers: include/monitor/drivers.py), and `POST /alerts`, the webhook Alertmanager delivers alerts to
(include/monitor/webhook.py: rows of `ops.alerts`)."""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

from include.monitor import webhook
from include.monitor.configs import WEBHOOK_PATH, MonitorFiles
from include.monitor.drivers import write_targets
from include.ops.metrics import exposition
from include.registry import load_registry
from include.settings import Settings

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 * 1024 * 1024  # Alertmanager's notifications are kilobytes
READY_PATH = "/-/ready"  # answers at once (a scrape reads every record: seconds on a busy machine)


def _handler(settings: Settings) -> type[BaseHTTPRequestHandler]:
    recording = threading.Lock()  # one notification recorded at a time: a repeated alert is seen as recorded
    targets = MonitorFiles(settings.layout.monitor).drivers_targets

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] == READY_PATH:  # `monitor up` / `status` ask it: no collection behind it
                self._reply(HTTPStatus.OK, "ready\n")
                return
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self._reply(HTTPStatus.NOT_FOUND, "not found: GET /metrics, POST /alerts\n")
                return
            try:
                if targets.parent.is_dir():  # `lakehouse monitor up` made it: its Prometheus discovers the drivers
                    write_targets(settings, load_registry(settings.registry_path), targets)
                body = exposition(settings)
            except Exception as exc:  # the scrape fails (Prometheus' `up` says so); the endpoint stays
                log.exception("metrics scrape failed")
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, f"metrics could not be read: {exc}\n")
                return
            self._reply(HTTPStatus.OK, body, CONTENT_TYPE_LATEST)

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != WEBHOOK_PATH:
                self._reply(HTTPStatus.NOT_FOUND, f"not found: POST {WEBHOOK_PATH}\n")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a notification is at most {MAX_BODY_BYTES} bytes\n")
                return
            try:
                with recording:
                    written = webhook.record(settings, json.loads(self.rfile.read(length) or b"null"))
            except (ValueError, webhook.BadNotification) as exc:  # Alertmanager logs the reply: it says why
                log.warning("a notification was refused: %s", exc)
                self._reply(HTTPStatus.BAD_REQUEST, f"refused: {exc}\n")
                return
            self._reply(HTTPStatus.OK, json.dumps({"recorded": written}) + "\n", "application/json")

        def _reply(self, status: HTTPStatus, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


def serve(settings: Settings) -> None:
    """Serve on LAKEHOUSE_METRICS_BIND:LAKEHOUSE_METRICS_PORT in the foreground, until interrupted or terminated;
    ValueError (exit 2, one line) when the port is taken."""
    bind, port = settings.metrics_bind, settings.metrics_port
    try:
        server = ThreadingHTTPServer((bind, port), _handler(settings))
    except OSError as exc:
        raise ValueError(f"the metrics endpoint cannot listen on {bind}:{port} ({exc.strerror or exc}): free the "
                         "port, or set LAKEHOUSE_METRICS_PORT") from None
    server.daemon_threads = True
    log.warning("lakehouse metrics at http://%s:%d/metrics, Alertmanager's webhook at http://%s:%d%s", bind, port,
                bind, port, WEBHOOK_PATH)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
