"""Groups of live jobs: one driver (one JVM) per group, a streaming query per job, supervised job by job."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from include import checkpoints
from include.airflow import tasks
from include.checkpoints.request import CheckpointRequest
from include.jvm_archive import driver_java_options
from include.ops import processes, supervisor
from include.records import lease
from include.records.heartbeats import read_heartbeat
from include.records.query_progress import PROGRESS_TABLE
from include.registry import RegistryError, build_registry
from include.registry.specs import JIT_OPTIONS
from include.settings import load_settings
from include.storage import delta as delta_store
from spark_jobs.checkpoint_actions import apply
from tests.support.groups import (
    GROUP,
    MEMBERS,
    drivers_launched_here,
    drop_after,
    group_registry,
    holders,
)
from tests.support.helpers import REPO, arrival_order, generate, gold_rows, landed, run_cli, wait_for
from tests.support.kill_hooks import fail_env
from tests.support.oracle import expected_gold


def test_the_registry_names_groups_and_refuses_bad_ones(tmp_path):
    registry = group_registry(tmp_path / "jobs.yaml")
    assert registry.group_members(GROUP) == MEMBERS
    units = registry.live_units()
    assert units[GROUP] == MEMBERS and "gold_user_sessions" in units["clickstream_gold"]
    assert list(units).index(GROUP) == 0  # in dependency order of their first job
    with pytest.raises(KeyError, match="no live job is in group 'nope'; the registry's groups: clickstream"):
        registry.group_members("nope")
    raw = yaml.safe_load((tmp_path / "jobs.yaml").read_text())
    raw["jobs"]["gold_user_sessions"]["live"] = False  # a job that never runs live is in no driver
    assert "gold_user_sessions" not in build_registry(raw).live_units()["clickstream_gold"]
    raw["jobs"]["silver_clickstream"]["group"] = "Bad-Name"
    raw["jobs"]["gold_user_sessions"]["group"] = "bronze_clickstream"
    with pytest.raises(RegistryError) as refused:
        build_registry(raw)
    text = str(refused.value)
    assert "job 'silver_clickstream': group: must be a name of lowercase letters, digits and underscores" in text
    assert "group 'bronze_clickstream': a job has that id" in text


def test_resources_reach_the_drivers_command_line_and_bad_ones_are_named(tmp_path, settings):
    from include.ops.launch import group_submit_kwargs, job_submit_kwargs, submit_command

    raw = yaml.safe_load(load_settings().registry_path.read_text())
    raw["defaults"]["resources"] = {"driver_memory": "1g"}
    raw["groups"]["clickstream_gold"] = {"resources": {"driver_memory": "3g", "cores_max": 2, "executor_memory": "2g",
                                                      "executor_cores": 1}}
    raw["jobs"]["gold_user_activity_5m"].pop("group")
    raw["jobs"]["gold_user_activity_5m"]["resources"] = {"cores_max": 1}
    registry = build_registry(raw)
    assert registry.resources("gold_user_activity_5m").driver_memory == "1g"  # the defaults, refined
    group = " ".join(submit_command(group_submit_kwargs(settings, "clickstream_gold",
                                                        registry.resources("clickstream_gold"))))
    for option in ("--driver-memory 3g", "--total-executor-cores 2", "--executor-memory 2g", "--executor-cores 1",
                   "--group clickstream_gold"):
        assert option in group, group
    alone = " ".join(submit_command(job_submit_kwargs(settings, "gold_user_activity_5m", "processing-time=10 seconds",
                                                      registry.resources("gold_user_activity_5m"))))
    assert "--driver-memory 1g" in alone and "--total-executor-cores 1" in alone, alone
    default = " ".join(submit_command(job_submit_kwargs(settings, "bronze_clickstream", "available-now")))
    assert f"--driver-memory {settings.spark_driver_memory}" in default  # LAKEHOUSE_SPARK_DRIVER_MEMORY
    # live drivers compile with C1 only unless their resources say `live_jit: tiered`; a backfill's with C2 too (the
    # suite's own LAKEHOUSE_SPARK_JAVA_OPTIONS aside)
    c1, plain = JIT_OPTIONS["c1"], replace(settings, spark_java_options="")
    assert c1 in " ".join(submit_command(group_submit_kwargs(plain, "clickstream_gold",
                                                             registry.resources("clickstream_gold"))))
    assert c1 in " ".join(submit_command(job_submit_kwargs(plain, "bronze_clickstream", "processing-time=10 seconds")))
    assert c1 not in " ".join(submit_command(job_submit_kwargs(plain, "bronze_clickstream", "available-now")))
    tiered = build_registry({**raw, "groups": {**raw["groups"], "payments": {"resources": {"live_jit": "tiered"}}}})
    assert c1 not in " ".join(submit_command(group_submit_kwargs(plain, "payments", tiered.resources("payments"))))
    overridden = " ".join(submit_command(group_submit_kwargs(  # LAKEHOUSE_SPARK_JAVA_OPTIONS comes last
        replace(settings, spark_java_options="-XX:TieredStopAtLevel=4"), "clickstream_gold")))
    assert overridden.index(c1) < overridden.index("-XX:TieredStopAtLevel=4"), overridden
    # C1 alone keeps tiered compilation's code cache (the JVM's own default for C1 alone is 48 MB: a live group
    # driver filled it in minutes and stopped compiling): the flags a JVM takes from a live driver's options
    flags = subprocess.run(["java", *driver_java_options(plain, "c1").split(), "-XX:+PrintFlagsFinal", "-version"],
                           capture_output=True, text=True, check=True).stdout
    assert re.search(r"\bTieredStopAtLevel\s+= 1\b", flags) and re.search(r"\bReservedCodeCacheSize\s+= 251658240\b", flags)

    raw["jobs"]["silver_clickstream"]["resources"] = {"driver_memory": "1g"}  # it runs in its group's driver
    raw["groups"]["payments"] = {"resources": {"driver_memory": "lots", "cores_max": 0, "gpus": 1, "live_jit": "c2"}}
    raw["groups"]["nobody"] = {"resources": {"driver_memory": "1g"}}  # no job joins it: kept, runs nothing
    with pytest.raises(RegistryError) as refused:
        build_registry(raw)
    text = str(refused.value)
    for problem in ("job 'silver_clickstream': resources: its group 'clickstream_ingest' runs in one driver: set them "
                    "under groups.clickstream_ingest.resources",
                    "group 'payments': resources.driver_memory: a JVM memory size such as 512m or 2g, got 'lots'",
                    "group 'payments': resources.cores_max", "group 'payments': resources: unknown fields ['gpus']",
                    "group 'payments': resources.live_jit: c1 or tiered (the live driver's JIT compilers), got 'c2'"):
        assert problem in text, (problem, text)
    assert "nobody" not in text


def test_a_start_beyond_the_hosts_live_driver_slots_waits_with_the_status_line(settings, tmp_path):
    """Admission: with one live driver slot, held by a running group's driver, the supervisor does not start another
    driver (no JVM, no restart spent): `waiting`, and the alert says who holds the slots."""
    import os

    from include.ops.admission import CapacityFull

    registry = group_registry(tmp_path / "jobs.yaml")
    own = replace(settings, registry_path=tmp_path / "jobs.yaml", live_drivers=1)
    launched_before = dict(processes.LAUNCHED)  # drivers earlier tests of this worker launched
    running = lease.acquire(own, f"group {GROUP}", trigger="live", path=own.layout.group_lease(GROUP))
    try:
        status = f"waiting for capacity: 1 of 1 live driver slots in use by {GROUP} (pid {os.getpid()})"
        with pytest.raises(CapacityFull, match=status.replace("(", r"\(").replace(")", r"\)")):
            processes.start_job(own, registry, "gold_user_sessions")
        assert supervisor.supervise_job(own, registry, "gold_user_sessions", run_id="r1") == "waiting"
        [alert] = delta_store.read_table(own.layout.ops_table("alerts")).to_pylist()
        assert alert["reason"] == f"not started: {status} (LAKEHOUSE_LIVE_DRIVERS)", alert
        assert not lease.is_held(own, "gold_user_sessions") and processes.LAUNCHED == launched_before
    finally:
        running.release()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_group_runs_in_one_driver_a_failing_query_alone_a_killed_driver_whole(settings, tmp_path, monkeypatch,
                                                                               lakehouse_env, spark):
    """One driver for the group's three queries. Silver's first batch fails: silver ends alone (bronze and gold go on
    in the same driver), and the supervisor's restart starts it again in that driver (no new JVM). Then the driver is
    killed -9: the supervisor starts the group again as a whole. Gold equals the oracle. A checkpoint action on one
    job (stopped, repartitioned, started again in the same driver); a stop of one job stops that query only;
    `lakehouse stop --all` stops the rest and the driver ends. Silver and gold run on their upstream's commits:
    silver never runs a batch without input (nothing it emits waits for a watermark), gold's closed windows come in
    batches without input."""
    path = tmp_path / "jobs.yaml"
    registry = group_registry(path, following=MEMBERS[1:])
    own = replace(settings, registry_path=path, batch_hooks="tests.support.kill_hooks:fail_once_at")
    for name, value in fail_env("silver_clickstream", "before_commit", 0, tmp_path / "failed-once").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the hook lives in tests/: spark-submit's driver imports it
    drops = [arrival_order(generate(own, events=400, seed=91, files=2, late_fraction=0.0).files)]
    launched_before = set(processes.LAUNCHED)
    with drivers_launched_here():
        pid = processes.start_job(own, registry, "bronze_clickstream")  # launches the group's driver
        wait_for(lambda: (read_heartbeat(own, "silver_clickstream") or {}).get("status") == "failed"
                 and not lease.is_held(own, "silver_clickstream"), 180, "silver's query to fail")
        assert holders(own)["bronze_clickstream"] == pid  # its siblings go on in the same driver
        wait_for(lambda: holders(own)["gold_user_activity_5m"] == pid, 60, "gold to run beside it")

        assert supervisor.supervise_job(own, registry, "silver_clickstream", run_id="r1") == "restarted"
        assert holders(own) == dict.fromkeys(MEMBERS, pid)  # started again in the same driver
        assert len(set(processes.LAUNCHED) - launched_before) == 1
        lines = sum(len(f.read_text().splitlines()) for f in drops[0])
        wait_for(lambda: landed(own) == lines, 120, "the first drop in bronze")

        # The driver killed -9 under lakehouse_live's task for the group, right after its check found every job
        # healthy: its watch restarts the group within the task (not at the next scheduled run), as a whole, in a new
        # driver. (A kill later in the watch is seen the same way: the lease is lost.)
        monkeypatch.setenv("LAKEHOUSE_ROOT", str(own.root))  # the tasks' settings (also those stopping a job below)
        monkeypatch.setenv("LAKEHOUSE_REGISTRY", str(path))
        checked = {job_id: supervisor.supervise_job(own, registry, job_id, run_id="r2") for job_id in MEMBERS}
        assert checked == dict.fromkeys(MEMBERS, "healthy"), checked
        driver = processes.LAUNCHED[os.getsid(pid)]  # the launched spark-submit: its session holds the driver
        processes.signal_group(pid, signal.SIGKILL)
        driver.wait(timeout=30)
        seen = tasks.watch(own, registry, GROUP, checked, "r2", seconds=15)  # one poll, 10 s after the check
        # the first of its jobs the watch finds down restarts the driver, which starts the others (healthy by then,
        # or restarted through a request)
        assert "restarted" in seen.values(), seen
        restarted = holders(own)["bronze_clickstream"]
        assert restarted not in (None, pid)
        restarted_driver = processes.LAUNCHED[os.getsid(restarted)]
        wait_for(lambda: holders(own) == dict.fromkeys(MEMBERS, restarted), 120, "the group's jobs in the new driver")

        drops.append(arrival_order(generate(own, events=300, seed=92, files=1, late_fraction=0.0,
                                            start=drop_after(drops)).files))
        expected = expected_gold(registry, drops)["gold/user_activity_5m"]
        wait_for(lambda: gold_rows(own, "gold/user_activity_5m") == expected, 180, "gold to equal the oracle",
                 interval=1)

        # A checkpoint action on one job of the running group, as checkpoint_reset runs it: that query stopped, the
        # action applied, the query started again in the same driver, with the registry's new definition.
        raw = yaml.safe_load(path.read_text())
        raw["jobs"]["gold_user_activity_5m"]["state_store"] = {"shuffle_partitions": 1}  # the suite's 2
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        stopped = tasks.stop_live_jobs({"dry_run": False, "targets": ["gold_user_activity_5m"],
                                        "mode": "repartition", "actor": "test"})
        assert stopped == ["gold_user_activity_5m"]
        assert holders(own) == {**dict.fromkeys(MEMBERS, restarted), "gold_user_activity_5m": None}
        # applied in this worker's driver (`lakehouse checkpoint repartition` as a process, killed and resumed:
        # tests/test_checkpoint_crashes.py)
        moved = apply(spark, own, build_registry(raw, path), CheckpointRequest("repartition", ("gold_user_activity_5m",),
                                                                               actor="test"))
        assert [r["outcome"] for r in moved] == ["done"], moved
        assert tasks.restart_live_jobs(stopped) == stopped
        assert holders(own) == dict.fromkeys(MEMBERS, restarted)
        assert checkpoints.shuffle_partitions(own.layout.checkpoint("gold_user_activity_5m")) == 1

        assert processes.stop_job(own, "gold_user_activity_5m", "test", wait_seconds=60)
        assert holders(own) == {**dict.fromkeys(MEMBERS, restarted), "gold_user_activity_5m": None}
        stopped = run_cli(["stop", "--all", "--wait", "60"], {**lakehouse_env, "LAKEHOUSE_REGISTRY": str(path)})
        assert stopped.returncode == 0, stopped.stderr[-2000:]
        assert "bronze_clickstream: stopped" in stopped.stdout and "silver_clickstream: stopped" in stopped.stdout
        assert restarted_driver.wait(timeout=60) == 0  # none of its jobs runs: the driver ends
        silver = delta_store.read_table(own.layout.table("silver/clickstream")).to_pylist()
        assert len(silver) == len({r["event_id"] for r in silver})
        progress = delta_store.read_table(own.layout.ops_table(PROGRESS_TABLE)).to_pylist()
        batches = {job: [r for r in progress if r["job"] == job] for job in MEMBERS[1:]}
        assert {r["trigger"] for job in MEMBERS[1:] for r in batches[job]} == {"on-upstream-commit"}
        silver_batches = [(r["batch_id"], r["num_input_rows"]) for r in batches["silver_clickstream"]]
        # A new checkpoint's first batch reads what bronze holds when silver starts: under load, only its creation (an
        # empty version 0; README, *Triggers*). After it, a batch only for new input.
        assert silver_batches and [b for b, rows in silver_batches if not rows] in ([], [0]), silver_batches
        if (0, 0) in silver_batches:  # it read up to version 1 (exclusive): bronze's creation, which adds no rows
            first = json.loads(checkpoints.source_offsets(own.layout.checkpoint("silver_clickstream"), 0)[0])
            assert (first["reservoirVersion"], first["index"]) == (1, -1), first
            assert delta_store.commit_files(own.layout.table("bronze/clickstream"), 0) == []
        assert any(not r["num_input_rows"] for r in batches["gold_user_activity_5m"])


SESSIONS = ["bronze_clickstream", "silver_clickstream", "gold_user_session_summaries"]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_query_starting_a_python_worker_waits_for_its_siblings_and_one_started_too_late_is_started_again(
        settings, tmp_path, monkeypatch):
    """A transformWithState query (the session summaries) starts after its siblings' first batches. Spark waits a
    fixed 10 s for the Python worker its first batch starts; here that worker starts 12 s late, once (a Python that
    sleeps first): the query fails, and the group's driver starts it again itself after a pause (no supervisor, no
    new driver). It then reads every silver row once: the failed attempt lost and doubled nothing."""
    path = tmp_path / "jobs.yaml"
    registry = group_registry(path, SESSIONS)
    own = replace(settings, registry_path=path)
    late_once = tmp_path / "worker-started-late"
    python = tmp_path / "python"
    python.write_text(f"""#!/bin/sh
case "$*" in *transform_with_state_driver_worker*) mkdir {late_once} 2>/dev/null && sleep 12;; esac
exec {sys.executable} "$@"
""")
    python.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(python))  # the drivers' and their workers' Python
    generate(own, events=300, seed=93, files=1, late_fraction=0.0)
    with drivers_launched_here():
        pid = processes.start_job(own, registry, "bronze_clickstream")  # launches the group's driver
        wait_for(lambda: late_once.exists(), 180, "the summaries' first Python worker")
        wait_for(lambda: holders(own, SESSIONS)["gold_user_session_summaries"] == pid
                 and checkpoints.latest_committed_batch(own.layout.checkpoint("gold_user_session_summaries")) is not None,
                 120, "the summaries to run again in the same driver")
        log_text = own.layout.job_log(GROUP).read_text()
        assert ("gold_user_session_summaries starts after the first batch of bronze_clickstream, silver_clickstream"
                in log_text), log_text[-3000:]
        assert "Python worker failed to connect back" in log_text
        assert "gold_user_session_summaries: Spark's Python worker did not start within Spark's 10 s" in log_text
        wait_for(lambda: summaries_input(own) == delta_store.count_rows(own.layout.table("silver/clickstream")) > 0,
                 120, "the summaries to read every silver row once")
        assert holders(own, SESSIONS) == dict.fromkeys(SESSIONS, pid)
        driver = processes.LAUNCHED[os.getsid(pid)]
        assert processes.stop_jobs(own, SESSIONS, "test", wait_seconds=60) == []
        assert driver.wait(timeout=60) == 0  # the retried query ran on: no failure left


def summaries_input(settings) -> int:
    """The rows the session summaries' batches read (from their progress records)."""
    rows = delta_store.read_table(settings.layout.ops_table(PROGRESS_TABLE)).to_pylist()
    return sum(r["num_input_rows"] or 0 for r in rows if r["job"] == "gold_user_session_summaries")
