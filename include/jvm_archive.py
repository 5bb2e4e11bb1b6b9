"""A class-data sharing (CDS) archive of the Spark driver's JVM: the classes a job run loads (Spark, Delta, the
state store), saved once so every later driver maps them instead of loading and verifying them again. A driver
starts seconds sooner (on 2 cores a small available-now run takes ~8 s instead of ~13 s), which every backfill
task, live start and checkpoint action pays.

`make` builds it (`python -m include.jvm_archive`) into the jar cache after the jars: a few small jobs run once
(spark_jobs/jvm_warm_up.py, in a process of its own) with `-XX:ArchiveClassesAtExit`, on a local lakehouse and then on one on S3 (an S3 server started for the purpose,
when `weed` is there): Hadoop's S3A and the AWS SDK load thousands of classes at a driver's first S3 request. Drivers use it when it is there (:func:`driver_java_options`); when it does not
fit the JVM or the classpath (Java or pyspark upgraded), the JVM ignores it, silently: nothing depends on it.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from include.objectstore import server
from include.registry.specs import JIT_OPTIONS
from include.settings import SPARK_LOG_JAVA_OPTION, load_settings
from include.storage.s3 import S3Config

if TYPE_CHECKING:
    from include.settings import Settings

log = logging.getLogger(__name__)

ARCHIVE_NAME = "spark-driver.jsa"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # an archive that does not fit is not worth a warning per start
WARM_UP_JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")

WARM_UP_MODULE = "spark_jobs.jvm_warm_up"  # the run the archive is dumped from (a process of its own)


def archive_path(jars_dir: Path) -> Path:
    return Path(jars_dir) / ARCHIVE_NAME


def driver_java_options(settings: Settings, jit: str = "tiered") -> str:
    """The Spark driver's JVM options: the project's logging, the class-data archive when `make` built one, its JIT
    compilers (`jit`: a key of JIT_OPTIONS, ResourcesSpec.jit), then LAKEHOUSE_SPARK_JAVA_OPTIONS (last: it can
    override them)."""
    return " ".join(filter(None, (SPARK_LOG_JAVA_OPTION, java_options(settings.jars_dir), JIT_OPTIONS[jit],
                                  settings.spark_java_options)))


def java_options(jars_dir: Path) -> str:
    """The driver's options that use the archive, or "" when there is none."""
    archive = archive_path(jars_dir)
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""


def build(jars_dir: Path, timeout: float = 600) -> Path:
    """Run the warm-up jobs in a fresh lakehouse with the archive dumped at the driver's exit; returns it."""
    target = archive_path(jars_dir)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="lakehouse-jvm-archive-") as scratch:
        env = {**os.environ, "LAKEHOUSE_ROOT": str(Path(scratch) / "lakehouse"), "LAKEHOUSE_JARS_DIR": str(jars_dir),
               "LAKEHOUSE_SPARK_JAVA_OPTIONS": f"-XX:ArchiveClassesAtExit={partial} {QUIET}",
               "LAKEHOUSE_LOG_LEVEL": "WARNING"}
        env.pop("LAKEHOUSE_REGISTRY", None)  # the project's own registry has the warm-up jobs
        target.unlink(missing_ok=True)  # the warm-up must not run on an older archive
        with warm_up_store(Path(scratch)) as s3:
            if s3 is not None:
                env |= {**s3.storage_environment(), "LAKEHOUSE_ROOT": env["LAKEHOUSE_ROOT"]}
            s3_root = str(s3.root) if s3 is not None else "-"
            subprocess.run([sys.executable, "-m", WARM_UP_MODULE, s3_root, *WARM_UP_JOBS], env=env, check=True,
                           timeout=timeout)
        deadline = time.monotonic() + 120  # the JVM writes the archive as it exits, after the Python driver
        while _writer_alive(partial) and time.monotonic() < deadline:
            time.sleep(0.5)
    if not partial.is_file() or partial.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class-data archive at {partial}")
    partial.replace(target)
    return target


@contextmanager
def warm_up_store(scratch: Path) -> Iterator[Settings | None]:
    """Settings on an S3 server started for the warm-up (stopped after it), or None when none can start."""
    base = load_settings()
    settings = replace(base, root="s3://jvm-archive/warm-up", local_dir=scratch / "local",
                       s3=S3Config(f"http://127.0.0.1:{server.free_port()}", "jvm-archive", secrets.token_hex(16)))
    try:
        server.up(settings)
    except (server.StorageError, OSError, RuntimeError) as exc:
        log.warning("the class-data archive covers the local disk only (no S3 server for the warm-up: %s)", exc)
        yield None
        return
    try:
        yield settings
    finally:
        server.down(settings)


def _writer_alive(partial: Path) -> bool:
    """Whether a process started with `partial` on its command line is still running (dumping the archive)."""
    needle = str(partial).encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    jars_dir = load_settings().jars_dir
    started = time.monotonic()
    try:
        archive = build(jars_dir)
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # drivers start without it, only slower
        log.warning("no class-data archive for the Spark driver (drivers start without it): %s", exc)
        return 0
    log.info("class-data archive of the Spark driver: %s (%d MB, %.0f s)", archive, archive.stat().st_size >> 20,
             time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
