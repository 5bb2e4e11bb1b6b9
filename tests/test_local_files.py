"""Checkpoints on a local disk without the processes Hadoop starts: without its native library (pyspark ships none),
Hadoop's local file system runs `chmod` to set a permission and `readlink` to read a link, a process each, and Spark's
checkpoint manager wrote every file through both (spark_jobs/jvm/lakehouse/NioRawLocalFileSystem.java). The driver's
own process starts are read from its flight recorder (JFR's jdk.ProcessStart events)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from include.registry import Trigger
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import generate

pytestmark = pytest.mark.spark


def started_processes(spark, tmp_path: Path, work: Callable[[], None]) -> list[str]:
    """The command lines of the processes the driver's JVM started while `work` ran."""
    jvm = spark._jvm
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    try:
        work()
    finally:
        recording.stop()
    dump = jvm.java.io.File(str(tmp_path / "processes.jfr")).toPath()
    recording.dump(dump)
    recording.close()
    return [event.getString("command") for event in jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(dump)]


def test_a_local_checkpoint_is_written_without_starting_a_process(spark, settings, registry, tmp_path):
    """Bronze and silver (a state store) run on a local lakehouse: no `readlink` of anything under it, no `chmod` of
    a file their checkpoint manager writes, and Hadoop's checksum files are still written beside the checkpoint's.
    Hadoop's own local file system, asked for a permission in the same recording, starts its `chmod`: the recorder
    sees what it should."""
    landed = generate(settings, events=300, seed=1, files=2)
    control = tmp_path / "control.txt"
    control.write_text("x")
    hadoop = spark._jvm.org.apache.hadoop
    raw = hadoop.fs.RawLocalFileSystem()
    raw.initialize(spark._jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration())

    def work() -> None:
        for job_id in ("bronze_clickstream", "silver_clickstream"):
            run_job(spark, settings, registry, job_id, Trigger(available_now=True))
        raw.setPermission(hadoop.fs.Path(control.as_uri()), hadoop.fs.permission.FsPermission("640"))

    commands = started_processes(spark, tmp_path, work)
    assert [c for c in commands if str(control) in c] == [f"chmod 0640 {control}"], commands
    under_root = [c for c in commands if str(settings.root) in c]
    assert not [c for c in under_root if c.startswith("readlink")], under_root
    # the files of the checkpoint manager (offsets, commits, metadata, state); Spark copies RocksDB's SST files and
    # writes tables through the FileSystem API, whose file system spark-submit loads before the project's jar
    managed = [c for c in under_root if str(settings.layout.checkpoints) in c and "/SSTs" not in c]
    assert managed == [], managed
    bronze = delta_store.count_rows(settings.layout.table("bronze/clickstream"))
    quarantined = delta_store.count_rows(settings.layout.table("bronze/clickstream_quarantine"))
    assert bronze + quarantined == landed.lines
    offsets = settings.layout.checkpoint("silver_clickstream") / "offsets"
    assert {p.name for p in Path(str(offsets)).iterdir()} >= {"0", ".0.crc"}


def test_permissions_and_link_status_are_hadoops(spark, tmp_path):
    """NioRawLocalFileSystem answers as Hadoop's raw local file system does, for a file, a directory, a link and a
    missing path, and sets the permission `chmod` would."""
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    hadoop, uri, conf = jvm.org.apache.hadoop, jvm.java.net.URI("file:///"), spark._jsc.hadoopConfiguration()
    ours, theirs = jvm.lakehouse.NioRawLocalFileSystem(), hadoop.fs.RawLocalFileSystem()
    ours.initialize(uri, conf)
    theirs.initialize(uri, conf)
    (tmp_path / "file").write_text("twelve bytes")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")

    def status(fs, name: str, qualified: bool) -> tuple:
        path = hadoop.fs.Path((tmp_path / name).as_uri() if qualified else str(tmp_path / name))
        found = fs.getFileLinkStatus(path)
        return found.isFile(), found.isDirectory(), found.isSymlink(), found.getLen()

    for name in ("file", "dir", "link"):
        for qualified in (True, False):
            assert status(ours, name, qualified) == status(theirs, name, qualified), (name, qualified)
    assert status(ours, "file", True) == (True, False, False, 12)
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        status(ours, "missing", True)
    for mode in ("640", "755", "600"):
        ours.setPermission(hadoop.fs.Path((tmp_path / "file").as_uri()), hadoop.fs.permission.FsPermission(mode))
        assert oct(os.stat(tmp_path / "file").st_mode & 0o777) == f"0o{mode}"
