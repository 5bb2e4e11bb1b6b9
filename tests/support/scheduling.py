"""How the suite shares its pytest-xdist workers (`make test` runs `-n 3`; this plugin is its scheduler): the longest work
first, so that no worker idles while another has minutes left.

- A unit of work is one test, except tests that share an expensive fixture, which go together to one worker: the tests
  of a module-scoped fixture (their module), the readers of the session's `demo`, the tests of a session's server
  (SERVERS: the broker, the S3 server, each started once). (xdist's own `xdist_group` marks do
  not group under pytest 9, which ignores the node ids xdist rewrites: each worker writes the groups it collected to
  a file beside the workers' temporary directories, and the scheduler reads it.)
- The units are planned before any runs, the same way every time: longest first, each to the worker with the fewest
  seconds planned so far, by the seconds `tests/durations.json` recorded for their tests (an estimate from the markers
  for a test it does not know yet). The cluster's tests (one `lakehouse cluster up` shared by its module) are a unit
  like any other: run last, alone, they left the other worker idle for minutes. A given checkout runs the same tests
  in the same order in each worker (but for a unit taken at the end, below), so that a test's verdict does not depend
  on which tests happened to run before it in its process.
- A worker is sent its next unit when it is down to its running test and the one after (a worker starts a test only
  once it knows the next, or that none follows). A worker done with its plan takes the last unit another worker has
  not been sent yet (the estimates are seconds recorded on another run); a worker that dies leaves its units to the
  others.

`pytest --record-durations tests/durations.json` writes the seconds each test took (setup, call and teardown), merged
into what the file knew: run it on the whole suite after adding or changing slow tests.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
CLUSTER = "cluster"  # the cluster's tests: one unit, whatever their fixtures' scopes
# The tests of a session's server share one worker, which starts it once (a broker, an S3 server: seconds of CPU to
# start, and some while idle); the demo reads its payments from the broker, so its readers are the broker's too.
# The CDC chain (tests/support/cdc.py) runs on the broker: its tests are the broker's too.
SERVERS = {"kafka_broker": "kafka", "s3_server": "s3", "cdc_chain": "kafka"}
GROUPS_FILE = "xdist-units.json"  # {"groups": {node id: group}, "seconds": {unit: seconds}}, for the controller


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write each test's seconds (setup + call + teardown) to PATH, merged with what it holds")


def group_of(item: pytest.Item) -> str | None:
    """The xdist group a test must share with others, or None (a unit of its own)."""
    if item.get_closest_marker("cluster"):
        return CLUSTER
    closure = item._fixtureinfo.name2fixturedefs
    for fixture, group in SERVERS.items():
        if fixture in closure:
            return group
    if "demo" in closure:
        return "demo"
    if any(defs[-1].scope == "module" for defs in closure.values()):
        return item.module.__name__.rsplit(".", 1)[-1]
    return None


def estimate(item: pytest.Item) -> float:
    """Seconds for a test `tests/durations.json` does not know."""
    if item.get_closest_marker("slow"):
        return 40.0
    return 8.0 if item.get_closest_marker("spark") or item.get_closest_marker("airflow") else 0.5


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the units longest first; a unit's tests keep their order. Every worker sorts the same
    way (xdist requires one order), and writes the groups for the scheduler."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    units: dict[str, list[pytest.Item]] = defaultdict(list)
    groups = {}
    for item in items:
        group = group_of(item)
        if group:
            groups[item.nodeid] = group
        units[group or item.nodeid].append(item)
    seconds = {unit: sum(known.get(i.nodeid, estimate(i)) for i in tests) for unit, tests in units.items()}
    order = sorted(units, key=lambda unit: (-seconds[unit], unit))
    items[:] = [item for unit in order for item in units[unit]]
    if hasattr(config, "workerinput"):
        shared = config._tmp_path_factory.getbasetemp().parent / GROUPS_FILE
        partial = shared.with_name(f".{GROUPS_FILE}.{config.workerinput['workerid']}")
        partial.write_text(json.dumps({"groups": groups, "seconds": seconds}))
        partial.replace(shared)  # every worker writes the same units: whole, any one


class DurationRecorder:
    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("@", 1)[0]] += report.duration

    def pytest_sessionfinish(self) -> None:
        known = json.loads(self.path.read_text()) if self.path.is_file() else {}
        known.update({nodeid: round(s, 1) for nodeid, s in self.seconds.items()})
        self.path.write_text(json.dumps(dict(sorted(known.items())), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("record_durations")
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist) hears every report
        config.pluginmanager.register(DurationRecorder(Path(path)), "lakehouse-duration-recorder")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class PlannedLongestFirst(LoadScopeScheduling):
        """xdist's scope scheduling over the units above, each worker's units planned at the start (see above)."""

        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            self.units: dict | None = None
            self.plan: dict = {}  # worker -> the scopes it runs, in order
            self.orphans: list[str] = []  # scopes of a worker that died, for whoever is free first

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:  # read once every worker has collected (and written it)
                self.units = json.loads((config._tmp_path_factory.getbasetemp() / GROUPS_FILE).read_text())
            return self.units["groups"].get(nodeid, nodeid)

        def schedule(self) -> None:
            if self.collection is None and self.collection_is_completed and self._check_nodes_have_same_collection():
                self.collection = list(next(iter(self.registered_collections.values())))
                for nodeid in self.collection:
                    self.workqueue.setdefault(self._split_scope(nodeid), {})[nodeid] = False
                workers = sorted(self.nodes, key=lambda node: node.gateway.id)
                planned = dict.fromkeys(workers, 0.0)
                self.plan = {worker: [] for worker in workers}
                for scope in self.workqueue:  # in collection order: longest first; ties (unknown: 0 s) by count
                    worker = min(workers, key=lambda w: (planned[w], len(self.plan[w]), w.gateway.id))
                    self.plan[worker].append(scope)
                    planned[worker] += self.units["seconds"].get(scope, 0.0)
                self.log("planned:", {w.gateway.id: round(s) for w, s in planned.items()})
            for node in self.nodes:
                self._reschedule(node)

        def _reschedule(self, node) -> None:
            """Keep two tests pending on the worker (it runs a test only once it knows the next one, or that
            none follows), else tell it that none follows."""
            while not node.shutting_down and self._pending_of(self.assigned_work[node]) <= 1:
                if not self._send_next_unit(node):
                    node.shutdown()

        def _send_next_unit(self, node) -> bool:
            while (scope := self._next_scope(node)) is not None:
                work_unit = self.workqueue.pop(scope, None)
                pending = [nodeid for nodeid, done in (work_unit or {}).items() if not done]
                if not pending:
                    continue
                self.assigned_work[node][scope] = work_unit
                collection = self.registered_collections[node]
                node.send_runtest_some([collection.index(nodeid) for nodeid in pending])
                return True
            return False

        def _next_scope(self, node) -> str | None:
            """Its own plan's next unit, else an orphan, else the last (shortest) unit another worker has not been
            sent yet: an estimate that was wrong leaves no worker idle while another has work waiting."""
            if self.plan.get(node):
                return self.plan[node].pop(0)
            if self.orphans:
                return self.orphans.pop(0)
            waiting = [plan for worker, plan in self.plan.items() if worker is not node and plan]
            return max(waiting, key=len).pop() if waiting else None

        def remove_node(self, node) -> str | None:
            self.orphans[:0] = [*self.assigned_work.get(node, {}), *self.plan.pop(node, [])]
            return super().remove_node(node)

    config.option.loadscopereorder = False
    return PlannedLongestFirst(config, log)
