"""The live drivers' logs stay bounded: rotated by copy and truncate, under a writer that keeps writing."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

import pytest

from include.records import log_rotation
from include.records.log_rotation import backup, check_own_log, rotate


def test_rotation_keeps_the_newest_and_a_bounded_number_of_backups(tmp_path):
    log = tmp_path / "clickstream.log"
    assert not rotate(log, 100, 2)  # no log yet
    for generation in range(4):
        log.write_text(f"generation {generation}\n" * 20)
        assert rotate(log, 100, 2)
        assert log.read_bytes() == b""
    assert backup(log, 1).read_text().startswith("generation 3") and backup(log, 2).read_text().startswith(
        "generation 2")
    assert not backup(log, 3).exists()  # the oldest went
    log.write_text("small\n")
    assert not rotate(log, 100, 2) and log.read_text() == "small\n"


def test_a_writer_in_append_mode_writes_on_at_the_start_of_the_emptied_log(tmp_path):
    """As a launched driver writes (its inherited output, opened for appending): no hole of zero bytes after the
    truncation, the file stays small, and the writer's last line is the newest line kept."""
    log = tmp_path / "group.log"
    writer = ("import sys, time\nfor n in range(4000):\n    sys.stdout.write(f'line {n:05d} ' + 'x' * 80 + '\\n')\n"
              "    sys.stdout.flush()\n    time.sleep(0.0005)\nprint('last line')\n")
    with log.open("ab") as out:
        process = subprocess.Popen([sys.executable, "-c", writer], stdout=out, stderr=subprocess.STDOUT)
    rotations = 0
    while process.poll() is None:
        rotations += rotate(log, 20_000, 3)
        time.sleep(0.05)
    assert process.wait() == 0 and rotations >= 3
    files = [log, *(backup(log, i) for i in (1, 2, 3))]
    assert not backup(log, 4).exists()
    for path in files:
        assert b"\0" not in path.read_bytes(), path
    assert log.stat().st_size < 4000 * 92
    kept = [line for path in reversed(files) for line in path.read_text().splitlines()]
    # the last rotation may come after the writer's last line and before its exit: then that line is in backup 1
    assert kept[-1] == "last line", kept[-3:]
    numbers = [int(line.split()[1]) for line in kept if line.startswith("line ")]
    assert numbers == sorted(numbers)  # in order, newest last


def test_a_driver_checks_its_own_log_at_most_once_a_minute(tmp_path, settings, monkeypatch):
    log = tmp_path / "bronze_clickstream.log"
    log.write_text("x" * 5000)
    own = replace(settings, log_max_bytes=1024, log_backups=1)
    monkeypatch.setattr(log_rotation, "_checked_at", {"at": float("-inf")})
    assert not check_own_log(own, now=0.0)  # not launched by the supervisor: no log of its own
    monkeypatch.setenv(log_rotation.LOG_FILE_VARIABLE, str(log))
    assert check_own_log(own, now=100.0) and log.read_bytes() == b""
    log.write_text("x" * 5000)
    assert not check_own_log(own, now=130.0)  # within the minute
    assert check_own_log(own, now=161.0) and backup(log, 1).stat().st_size == 5000


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("LAKEHOUSE_LOG_MAX_BYTES", "10", "LAKEHOUSE_LOG_MAX_BYTES must be a whole number of bytes, at least 1024"),
    ("LAKEHOUSE_LOG_MAX_BYTES", "20 MB", "LAKEHOUSE_LOG_MAX_BYTES must be a whole number of bytes"),
    ("LAKEHOUSE_LOG_BACKUPS", "0", "LAKEHOUSE_LOG_BACKUPS must be a positive integer, got '0'"),
])
def test_bad_rotation_settings_are_named(monkeypatch, name, value, problem):
    from include.settings import load_settings

    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=problem):
        load_settings()


def test_the_launch_rotates_a_full_log_and_names_it_to_the_driver(settings):
    from include.ops import processes

    own = replace(settings, log_max_bytes=1024, log_backups=2)
    log = own.layout.job_log("some_group")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("old run\n" * 500)
    process, path, offset = processes._launch(own, "some_group", [
        sys.executable, "-c", f"import os; print(os.environ[{log_rotation.LOG_FILE_VARIABLE!r}])"])
    assert process.wait(timeout=60) == 0
    processes.LAUNCHED.pop(process.pid, None)
    assert path == log and offset == 0 and backup(log, 1).read_text() == "old run\n" * 500
    assert log.read_text().splitlines()[-1] == str(log)  # the driver knows which log to rotate
