"""Logging for the project's processes (CLI, job drivers): one format, third-party chatter at WARNING."""

from __future__ import annotations

import logging
import sys

from include.settings import Settings


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Airflow's own INFO lines in a process that reads its database (`lakehouse demo` following a run: "Reading the
    # config from ...") need no action; its components log to their own logs
    for noisy in ("py4j", "deltalake", "great_expectations", "airflow"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
