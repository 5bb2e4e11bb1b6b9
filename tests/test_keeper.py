"""include/daemons/keeper.py, the restart policy of `lakehouse cluster`'s Airflow components, on real processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from include.cluster.manager import _died
from include.daemons import KEEPER, Daemon, alive
from tests.support.helpers import wait_for

pytestmark = pytest.mark.timeout(120)

SERVE = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(7)); print('up', flush=True); time.sleep(300)"


def test_a_command_that_exits_is_started_again_until_its_group_is_stopped(tmp_path):
    daemon = Daemon("probe", tmp_path / "probe.pid", tmp_path / "probe.log")
    daemon.start([sys.executable, "-c", SERVE], kept=True)
    try:
        keeper_pid = daemon.running_pid()
        first = wait_for(daemon.kept_pid, 30, "the keeper's first run")
        os.kill(first, signal.SIGKILL)
        second = wait_for(lambda: daemon.kept_pid() not in (None, first) and daemon.kept_pid(), 30, "a second run")
        os.kill(second, signal.SIGKILL)
        wait_for(lambda: daemon.kept_pid() not in (None, first, second), 30, "a third run")
        assert daemon.running_pid() == keeper_pid and daemon.restarted()
        assert [re.sub(r"after \d+ s", "after S s", line.split("keeper: ")[1]) for line in daemon.restarts()] == [
            f"pid {first} exited with code -9 after S s: starting it again in 1 s (restart 1)",
            f"pid {second} exited with code -9 after S s: starting it again in 2 s (restart 2)"]

        third = daemon.kept_pid()
        wait_for(lambda: "up\n" in daemon.log_file.read_text().split("(restart 2)")[-1], 30, "the third run to be up")
        assert daemon.stop(timeout=30) == keeper_pid  # SIGTERM to the group: the command exits by itself, not started again
        assert not alive(keeper_pid) and not alive(third)
        log = daemon.log_file.read_text()
        assert f"stopped: pid {third} exited with code 7" in log and "restart 3" not in log, log
    finally:
        daemon.stop(timeout=10)


def test_a_command_that_fails_at_start_is_what_cluster_up_reports(tmp_path):
    daemon = Daemon("probe", tmp_path / "probe.pid", tmp_path / "probe.log")
    daemon.log_file.write_text("an earlier run's log\n2026-11-27 keeper: pid 1 exited with code 1 after 9 s: "
                               "starting it again in 1 s (restart 1)\n")
    daemon.start([sys.executable, "-c", "import sys, time; time.sleep(1); sys.exit('ValueError: a wrong setting')"],
                 kept=True)
    try:
        assert daemon.restarted() is False and _died(daemon)() is None
        wait_for(daemon.restarted, 60, "the keeper to start it again")  # this start's, not the earlier run's
        assert daemon.running_pid()  # the keeper goes on, as Docker's restart policy would: `up` stops it
        assert _died(daemon)() == f"ValueError: a wrong setting (log {daemon.log_file})"  # what `cluster up` says
    finally:
        daemon.stop(timeout=10)
    assert daemon.kept_pid() is None


def test_its_usage():
    for argv in ([], ["--"], ["true"], ["--slow", "--", "true"]):
        refused = subprocess.run([sys.executable, str(KEEPER), *argv], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and refused.stderr == "usage: keeper.py -- <command> [args...]\n", argv
