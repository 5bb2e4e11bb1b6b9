"""A lakehouse built once per test module at a fixed path, and put back as it was before each test that changes
it (file-source checkpoints keep absolute paths, so the path must not change)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from include.settings import Settings, load_settings
from tests.support.helpers import saved_registry


class SnapshotLakehouse:
    """`settings.root` under `base`; :meth:`take` and :meth:`restore` named snapshots of it."""

    def __init__(self, spark, base: Path, raw: dict):
        self.spark = spark
        self.base = base
        self.settings: Settings = replace(load_settings(), root=base / "lakehouse")
        self.raw = raw
        self.registry, self.env = self.registry_variant("jobs.yaml")

    def registry_variant(self, name: str, change=None) -> tuple:
        """The module's registry (changed by `change`), saved for subprocesses; it and their environment."""
        import copy

        raw = copy.deepcopy(self.raw)
        if change:
            change(raw)
        env = {**os.environ, "LAKEHOUSE_ROOT": str(self.settings.root), "PYSPARK_PYTHON": sys.executable}
        for variable in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS", "LAKEHOUSE_TEST_PAUSE_AT"):
            env.pop(variable, None)
        return saved_registry(raw, self.base / name, env), env

    def take(self, name: str) -> None:
        shutil.copytree(self.settings.root, self.base / f"snapshot-{name}")

    def restore(self, name: str) -> None:
        shutil.rmtree(self.settings.root, ignore_errors=True)
        shutil.copytree(self.base / f"snapshot-{name}", self.settings.root)
        self.spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the tables went back in time
