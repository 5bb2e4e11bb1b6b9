"""Checkpoint actions are crash-safe: the action's process is SIGKILLed right before or right after one of its steps
(its effect applied, the journal not yet updated); the job then refuses to start with one line naming the action and
`lakehouse checkpoint resume-action`; following it gives the tables a clean run gives, row for row (for a rollback,
a repartition and a full refresh, whose clean runs give the oracle's rows: the oracle's rows, without a clean run to
compare). A job started while an action holds it is refused (exit 75) naming the action.

`make test` kills each action once: right after a step whose effect is applied and not recorded (the resumed action
runs it again), or for full refresh right before its rebuild (resumed from a step not begun); `make test-full` kills
each action before and after every step, resuming each time, and kills a full refresh's cascade (the `full` marker).

One lakehouse is built per module at a fixed path and restored before each kill (file-source checkpoints keep
absolute paths); the killed action runs as a real process, the rest in this process: the last resume too, but for
the reset's, which `lakehouse checkpoint resume-action` runs as a person would.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from include import checkpoints
from include.checkpoints import journal as journals
from include.checkpoints.actions import ActionContext
from include.checkpoints.plan import PENDING, plan_job
from include.checkpoints.request import CheckpointRequest
from include.failures import ExitCode
from include.generator import DEFAULT_START
from include.records import checkpoint_audit, lease
from include.registry import Trigger
from include.settings import load_settings
from include.storage import delta as delta_store
from spark_jobs.checkpoint_actions import ACTIONS, apply
from spark_jobs.streaming_query import run_job
from tests.support.helpers import (
    LAKEHOUSE,
    REPO,
    arrival_order,
    generate,
    gold_rows,
    run_cli,
    wait_for,
)
from tests.support.kill_hooks import kill_env, pause_env
from tests.support.oracle import expected_gold, expected_silver_count
from tests.support.snapshots import SnapshotLakehouse

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)
LINEAGE = ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m")
GOLD, SILVER = "gold/user_activity_5m", "silver/clickstream"


class Lakehouse(SnapshotLakehouse):
    """The module's lakehouse: two landing files, each run through the lineage by a backfill of its own (so each
    job has several batches: gold a data and a no-data batch a run), a third landed and not read yet; built once,
    restored before each kill."""

    def __init__(self, spark, base: Path, raw: dict):
        raw["jobs"] = {j: raw["jobs"][j] for j in LINEAGE}
        super().__init__(spark, base, raw)
        self.drops = []
        for drop in range(2):  # a backfill per drop: a batch each, cheap to rebuild in one
            start = DEFAULT_START + timedelta(minutes=30 * drop)
            self.drops.append(arrival_order(generate(self.settings, events=300, seed=17 + drop, files=1,
                                                     start=start).files))
            self.run_all(self.registry)
        later = DEFAULT_START + timedelta(hours=3)
        self.drops.append(arrival_order(generate(self.settings, events=300, seed=30, files=1, start=later).files))
        self.take("before")

    def restore(self, name: str = "before") -> None:
        super().restore(name)

    def rows(self, table: str) -> list[tuple]:
        if table.startswith("gold/"):
            return sorted(gold_rows(self.settings, table).items())  # gold_rows fails on a duplicate window
        rows = delta_store.read_table(self.settings.layout.table(table)).to_pylist()
        return sorted(tuple(v for k, v in r.items() if k != "_ingested_at") for r in rows)  # the time each run read it

    def run_all(self, registry) -> None:
        for job_id in LINEAGE:
            run_job(self.spark, self.settings, registry, job_id, AVAILABLE_NOW)


@pytest.fixture(scope="module")
def lakehouse(spark, tmp_path_factory) -> Lakehouse:
    import yaml

    raw = yaml.safe_load(load_settings().registry_path.read_text())
    return Lakehouse(spark, tmp_path_factory.mktemp("crashes"), raw)


def planned_steps(house: Lakehouse, registry, request: CheckpointRequest) -> list[tuple[str, str]]:
    """The (job, step) list the action will run, without running it."""
    action = ACTIONS[request.mode]
    ctx = ActionContext(house.settings, registry, request, house.spark)
    prepared = [action.prepare(ctx, registry.job(j)) for j in action.targets(ctx)]
    return [(s.job, s.name) for s in action.steps(ctx, prepared)]


EVERY_STEP = "every step"  # the kills of `make test-full`: before and after each step, in order


def kill_points(kills, steps: list[tuple[str, str]]) -> list[tuple[int, str]]:
    """(step index, point) of each kill, in the order they happen."""
    if kills == EVERY_STEP:
        return [(i, p) for i in range(len(steps)) for p in ("before_step", "after_step")]
    return list(kills)


def kills_of(*one_kill: tuple[int, str]) -> list:
    """The parameters of a crash test: the one kill of `make test`, and every step's two kills (test-full)."""
    return [pytest.param(list(one_kill), id=f"{one_kill[0][1]}-{one_kill[0][0]}"),
            pytest.param(EVERY_STEP, id="every-step", marks=pytest.mark.full)]


def crash_and_resume(house: Lakehouse, registry, env: dict, request: CheckpointRequest, kills,
                     last_resume_as_a_process: bool = False) -> dict[str, list]:
    """The action SIGKILLed at its first kill point (right before a step, or right after it: its effect applied, the
    journal not updated, so the next try runs it again); then `lakehouse checkpoint resume-action` (the one line's
    advice), SIGKILLed at the next kill point, and so on; then one last resume-action (in this driver, unless
    `last_resume_as_a_process`), and the lineage run as the next backfill would. After every kill each job of the
    action refuses to start, naming it, and the journal shows exactly the steps done so far. The silver and gold rows
    at the end."""
    house.restore()
    steps = planned_steps(house, registry, request)
    command = ["checkpoint", *request.to_argv(), "--actor", "crash-test"]
    for index, point in kill_points(kills, steps):
        killed = run_cli(command, {**env, **kill_env(steps[index][0], point, index)}, timeout=300)
        assert killed.returncode == -signal.SIGKILL, (point, steps[index], killed.stderr[-3000:])
        [journal] = journals.pending(house.settings.layout.checkpoints)
        assert [s["done"] for s in journal.steps] == [i < index for i in range(len(steps))], (point, index)
        for target in dict.fromkeys(j for j, _ in steps):  # every job of the action refuses, naming it
            plan = plan_job(registry.job(target), registry, house.settings.layout.checkpoint(target))
            assert plan.mode == PENDING and plan.command == f"lakehouse checkpoint resume-action {target}", plan
            with pytest.raises(journals.ActionPending, match=rf"checkpoint action {request.mode} .*"
                                                             rf"resume-action {target}`"):
                run_job(house.spark, house.settings, registry, target, AVAILABLE_NOW)
        command = ["checkpoint", "resume-action", steps[index][0], "--actor", "crash-test"]
    house.spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # other processes wrote the tables
    if last_resume_as_a_process:
        finished = run_cli(command, env, timeout=600)
        assert finished.returncode == 0, finished.stderr[-3000:]
    else:
        done = apply(house.spark, house.settings, registry,
                     CheckpointRequest("resume-action", (steps[index][0],), actor="crash-test"))
        assert done and {r["outcome"] for r in done} == {"done"}, done
    assert journals.pending(house.settings.layout.checkpoints) == []
    house.spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    house.run_all(registry)
    return {t: house.rows(t) for t in (SILVER, GOLD)}


def clean_run(house: Lakehouse, registry, request: CheckpointRequest) -> dict[str, list]:
    """The action without a crash, then the next backfill: the reference rows."""
    house.restore()
    apply(house.spark, house.settings, registry, request)
    house.run_all(registry)
    return {t: house.rows(t) for t in (SILVER, GOLD)}


def assert_all_equal(result: dict[str, list], reference: dict[str, list]) -> None:
    for table, rows in result.items():
        assert rows == reference[table], f"{table} differs from the clean run's"


def assert_equals_the_oracle(result: dict[str, list], registry, drops: list) -> None:
    """For an action that leaves silver alone and whose gold a clean run equals the oracle's (a rollback, a
    repartition: their batches are the same as without the action; a full refresh: gold rebuilt from silver, the
    next file's windows after): the oracle's windows, silver whole and once."""
    assert dict(result[GOLD]) == expected_gold(registry, drops)[GOLD], f"{GOLD} differs from the oracle's"
    assert len(result[SILVER]) == len(set(result[SILVER])) == expected_silver_count(registry, drops), SILVER


@pytest.mark.parametrize("kills", kills_of((1, "after_step")))  # the tables restored, not recorded
def test_rollback_killed_and_resumed(lakehouse, kills):
    house = lakehouse
    assert checkpoints.latest_committed_batch(house.settings.layout.checkpoint("gold_user_activity_5m")) >= 3
    request = CheckpointRequest("rollback", ("gold_user_activity_5m",), options={"to_batch": 1})
    assert_equals_the_oracle(crash_and_resume(house, house.registry, house.env, request, kills), house.registry,
                             house.drops)
    audit = checkpoint_audit.outcomes(house.settings, include_progress=True)
    outcomes = [r["outcome"] for r in audit if r["actor"] == "crash-test"]
    assert outcomes[0] == "started" and "resumed" in outcomes and outcomes[-1] == "done", outcomes


@pytest.mark.parametrize("kills", kills_of((1, "after_step")))  # the state repartitioned, not recorded
def test_repartition_killed_and_resumed(lakehouse, kills):
    house = lakehouse
    one, env = house.registry_variant("one.yaml", lambda r: r["jobs"]["gold_user_activity_5m"].update(
        state_store={"shuffle_partitions": 1}))  # from the suite's 2
    request = CheckpointRequest("repartition", ("gold_user_activity_5m",))
    result = crash_and_resume(house, one, env, request, kills)  # the third file lands on the new partition
    assert checkpoints.shuffle_partitions(house.settings.layout.checkpoint("gold_user_activity_5m")) == 1
    assert_equals_the_oracle(result, one, house.drops)


@pytest.mark.parametrize("kills", kills_of((1, "before_step")))  # emptied and recorded, the rebuild not begun
def test_full_refresh_killed_and_resumed(lakehouse, kills):
    house = lakehouse
    ten, env = house.registry_variant("ten.yaml", lambda r: r["jobs"]["gold_user_activity_5m"]["transform"].update(
        window="10 minutes"))
    request = CheckpointRequest("full-refresh", ("gold_user_activity_5m",))
    result = crash_and_resume(house, ten, env, request, kills)  # rebuilt from silver, then the next file's windows
    assert result[GOLD] and {end - start for start, end, _ in dict(result[GOLD])} == {600}
    assert_equals_the_oracle(result, ten, house.drops)


@pytest.mark.full  # full refresh's recovery paths run above; here the cascade's steps too: every kill of test-full
@pytest.mark.parametrize("kills", kills_of((2, "after_step")))  # silver rebuilt, not recorded: rebuilt again
def test_full_refresh_with_cascade_killed_and_resumed(lakehouse, kills):
    house = lakehouse
    request = CheckpointRequest("full-refresh", ("silver_clickstream",), options={"cascade": True})
    reference = clean_run(house, house.registry, request)
    assert reference[SILVER] and reference[GOLD]
    assert_all_equal(crash_and_resume(house, house.registry, house.env, request, kills), reference)


@pytest.mark.parametrize("kills", kills_of((0, "after_step")))  # moved aside, not recorded: moved again
def test_reset_checkpoint_killed_and_resumed(lakehouse, kills):
    house = lakehouse
    request = CheckpointRequest("reset-checkpoint", ("gold_user_activity_5m",), options={"from_latest": True})
    reference = clean_run(house, house.registry, request)  # the third file's windows only, beside the old ones
    assert_all_equal(crash_and_resume(house, house.registry, house.env, request, kills, last_resume_as_a_process=True),
                     reference)


def test_a_job_started_under_an_action_is_refused_naming_it(lakehouse):
    """A `lakehouse run` and the live supervisor's restart, while a rollback holds the job: exit 75 / refused,
    naming the action; nothing is written under it, and the rollback then completes."""
    from include.ops.supervisor import supervise_job

    house = lakehouse
    house.restore()
    gate = house.base / "gate"
    request = CheckpointRequest("rollback", ("gold_user_activity_5m",), options={"to_batch": 1})
    action = subprocess.Popen(LAKEHOUSE + ["checkpoint", *request.to_argv()], cwd=REPO,
                              env={**house.env, **pause_env("gold_user_activity_5m", "after_step", 1, gate)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: Path(f"{gate}.waiting").exists(), 180, "the rollback to restore the table")
        versions = delta_store.latest_version(house.settings.layout.table(GOLD))
        refused = run_cli(["run", "gold_user_activity_5m"], house.env, timeout=120)
        assert refused.returncode == ExitCode.REFUSED, refused.stderr[-2000:]
        assert "under a checkpoint action (checkpoint rollback by" in refused.stderr, refused.stderr[-2000:]
        assert "Traceback" not in refused.stderr
        live, env_registry = house.registry_variant("live.yaml")
        assert supervise_job(replace(house.settings, registry_path=Path(env_registry["LAKEHOUSE_REGISTRY"])), live,
                             "gold_user_activity_5m", run_id="during-action") == "refused"
        assert delta_store.latest_version(house.settings.layout.table(GOLD)) == versions
        gate.touch()
        out, err = action.communicate(timeout=300)
        assert action.returncode == 0, err[-3000:]
    finally:
        if action.poll() is None:
            os.killpg(action.pid, signal.SIGKILL)
            action.wait()
    assert not lease.is_held(house.settings, "gold_user_activity_5m")
    assert journals.pending(house.settings.layout.checkpoints) == []  # done: what follows it, the rollback test's
    assert checkpoints.latest_committed_batch(house.settings.layout.checkpoint("gold_user_activity_5m")) == 1


def test_impossible_positions_are_refused_before_anything_is_touched(lakehouse):
    """A version the source does not have, a time after its last commit, garbage: exit 2 and one line, dry run
    or not; the checkpoint stays, no journal, no action started. A dry run says what a good position misses."""
    house = lakehouse
    house.restore()
    checkpoint = house.settings.layout.checkpoint("gold_user_activity_5m")
    before = sorted(p.name for p in checkpoint.rglob("*"))
    silver = delta_store.latest_version(house.settings.layout.table(SILVER))
    for position, message in ((["--from-version", "99999"], f"silver/clickstream has versions 0..{silver} in its log"),
                              (["--from-timestamp", "2099-01-01T00:00:00Z"], "no version of silver/clickstream was "
                                                                              "committed at or after it"),
                              (["--from-timestamp", "garbage"], "not an ISO-8601 timestamp: 'garbage'"),
                              (["--from-version", "-5"], "must be 0 or more, got -5")):
        for dry in ([], ["--dry-run"]):
            refused = run_cli(["checkpoint", "reset-checkpoint", "gold_user_activity_5m", *position, *dry],
                              house.env, timeout=120)
            last = refused.stderr.strip().splitlines()[-1]  # argparse's usage, then the one line
            assert refused.returncode == 2 and message in last, (position, refused.stderr[-2000:])
            assert "Traceback" not in refused.stderr
    assert sorted(p.name for p in checkpoint.rglob("*")) == before and not house.settings.layout.archived_checkpoints(
        "gold_user_activity_5m")
    assert journals.pending(house.settings.layout.checkpoints) == []
    caught_up = apply(None, house.settings, house.registry, CheckpointRequest(
        "reset-checkpoint", ("gold_user_activity_5m",), dry_run=True, options={"from_latest": True}))
    assert "nothing committed so far is missed" in caught_up[0]["detail"], caught_up[0]["detail"]
