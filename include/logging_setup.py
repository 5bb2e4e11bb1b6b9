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
    for noisy in ("py4j", "deltalake", "great_expectations"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
