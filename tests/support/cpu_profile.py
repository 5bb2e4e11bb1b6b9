"""Where the suite's CPU goes: `pytest --record-cpu PATH` writes, per test, the CPU-seconds its worker's process tree
spent during it (setup, call and teardown): the worker itself, the processes it started and waited for (a `lakehouse
run`, spark-submit and their JVMs), and the live ones (the session's Spark driver, a broker, a server), read from
/proc before and after. On two cores a test's seconds tell how long it waited; its CPU-seconds tell what it took from
the other worker. Processes that left the worker's tree (a daemon's double fork) are not counted.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU-seconds of the process and of its children it waited for) from /proc/<pid>/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / TICKS  # ppid; utime, stime, cutime, cstime


def tree_cpu(root: int) -> float:
    """CPU-seconds of `root` and every live descendant (each with the children it waited for)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat:
                stats[int(entry)] = stat
    children = defaultdict(list)
    for pid, (ppid, _) in stats.items():
        children[ppid].append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(children[pid])
    return total


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-cpu", metavar="PATH", default=None,
                     help="write each test's CPU-seconds (its worker's process tree, setup + call + teardown) to PATH")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    if not item.config.getoption("record_cpu"):
        yield
        return
    item.stash[_START] = tree_cpu(os.getpid())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    if item.config.getoption("record_cpu") and call.when == "teardown" and _START in item.stash:
        outcome.get_result().user_properties.append(("cpu_seconds", round(tree_cpu(os.getpid()) - item.stash[_START], 1)))


_START = pytest.StashKey[float]()


class CpuRecorder:
    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == "cpu_seconds":
                self.seconds[report.nodeid] = value

    def pytest_sessionfinish(self) -> None:
        self.path.write_text(json.dumps(dict(sorted(self.seconds.items())), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("record_cpu")
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) hears every report
        config.pluginmanager.register(CpuRecorder(Path(path)), "lakehouse-cpu-recorder")
