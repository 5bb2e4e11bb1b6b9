"""The `lakehouse` command and the spark-submit entry point, run as real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from include import checkpoints
from include.records import lease, run_outcomes
from include.records.heartbeats import read_heartbeat
from include.settings import load_settings
from include.storage import delta as delta_store
from tests.support.helpers import LAKEHOUSE, REPO, generate, run_cli, signal_group_when


def test_missing_java_gives_one_clear_message(lakehouse_env):
    started = time.monotonic()
    result = run_cli(["run", "bronze_clickstream"], {**lakehouse_env, "JAVA_HOME": "/nonexistent/jdk"}, timeout=60)
    assert result.returncode == 2
    assert "JAVA_HOME=/nonexistent/jdk has no bin/java" in result.stderr
    assert "Java 17 or 21" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_missing_delta_jars_give_one_clear_message(lakehouse_env, tmp_path):
    result = run_cli(["run", "bronze_clickstream"], {**lakehouse_env, "LAKEHOUSE_JARS_DIR": str(tmp_path / "none")},
                     timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"lakehouse run: Delta Lake's jars are missing in {tmp_path / 'none'}: run `make` (it fetches them once "
        "with Maven, see include/jars/pom.xml) or set LAKEHOUSE_JARS_DIR")


def test_bad_input_is_named(lakehouse_env):
    unknown = run_cli(["run", "no_such_job"], lakehouse_env, timeout=60)
    assert unknown.returncode == 2 and "unknown job 'no_such_job'" in unknown.stderr
    trigger = run_cli(["run", "bronze_clickstream", "--trigger", "every minute"], lakehouse_env, timeout=60)
    assert trigger.returncode == 2 and "bad trigger 'every minute'" in trigger.stderr
    partitions = run_cli(["run", "bronze_clickstream", "--shuffle-partitions", "100000"], lakehouse_env, timeout=60)
    assert partitions.returncode == 2 and "at most 2000, got 100000" in partitions.stderr
    source = run_cli(["generate", "--source", "refunds", "--events", "5", "--seed", "1"], lakehouse_env, timeout=60)
    assert source.returncode == 2 and "unknown source 'refunds'" in source.stderr
    captured = run_cli(["generate", "--source", "orders", "--events", "5", "--seed", "1"], lakehouse_env, timeout=60)
    assert captured.returncode == 2 and "`lakehouse generate --source shop`" in captured.stderr


def test_the_help_says_how_many_commands_there_are_and_lists_each_one():
    from include.cli import COMMANDS, build_parser

    text = build_parser().format_help()
    assert f"{len(COMMANDS)} commands" in text and len(COMMANDS) >= 20
    listed = re.findall(r"^    ([a-z-]+)", text, re.MULTILINE)  # argparse's list of the subcommands, with their help
    assert listed == [c.name for c in COMMANDS]


def test_generate_command_is_deterministic(settings, lakehouse_env):
    args = ["generate", "--source", "clickstream", "--events", "400", "--seed", "9", "--files", "2"]
    assert run_cli(args, lakehouse_env, timeout=60).returncode == 0
    files = sorted(settings.layout.landing("landing/clickstream").iterdir())
    first = [f.read_text() for f in files]
    assert run_cli(args, lakehouse_env, timeout=60).returncode == 0
    assert [f.read_text() for f in sorted(settings.layout.landing("landing/clickstream").iterdir())] == first
    services = ["generate", "--source", "service_logs", "--events", "600", "--seed", "9", "--files", "1",
                "--users", "7"]
    assert run_cli(services, lakehouse_env, timeout=60).returncode == 0
    (logs,) = settings.layout.landing("landing/service_logs").iterdir()
    named = {json.loads(line).get("service") for line in logs.read_text().splitlines() if line.endswith("}")}
    assert named - {None} == {f"svc_{s:03d}" for s in range(7)}


@pytest.mark.spark
@pytest.mark.slow
def test_ctrl_c_to_the_process_group_stops_a_live_job_between_batches(settings, lakehouse_env):
    """Ctrl-C in a terminal: SIGINT to the whole group, the driver JVM included."""
    from include.registry import load_registry

    per_batch = load_registry(settings.registry_path).job("bronze_clickstream").source.admission(False).max_files
    landed = generate(settings, events=1200, seed=41, files=3 * per_batch)  # three live batches
    code, output = signal_group_when(
        LAKEHOUSE + ["run", "bronze_clickstream", "--trigger", "processing-time=2 seconds"], lakehouse_env,
        lambda: (read_heartbeat(settings, "bronze_clickstream") or {}).get("batch_id") == 2, signal.SIGINT,
        "the live job to process all three batches")
    assert code == 0, output[-3000:]
    assert "received SIGINT: stopping at the next batch boundary" in output
    assert "Traceback" not in output and "Exception" not in output, output[-3000:]
    assert read_heartbeat(settings, "bronze_clickstream")["status"] == "stopped"
    total = delta_store.count_rows(settings.layout.table("bronze/clickstream")) + delta_store.count_rows(
        settings.layout.table("bronze/clickstream_quarantine"))
    assert total == landed.lines


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_runs_the_same_job_and_several_in_one_driver(settings, lakehouse_env, tmp_path):
    """spark-submit of the entry point; several jobs share its driver one after another (the backfill's `run_jobs`):
    a failed or refused (lease held) job stops only the jobs that read its tables, and each job's outcome is
    recorded."""
    landed = generate(settings, events=600, seed=42, files=2)
    spark_submit = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]"]
    job = ["spark_jobs/entrypoints/run_job.py", "bronze_clickstream", "--trigger", "available-now"]
    without_jars = subprocess.run(spark_submit + job, env=lakehouse_env, cwd=REPO, capture_output=True, text=True,
                                  timeout=300)
    assert without_jars.returncode == 2, without_jars.stderr[-3000:]
    # spark-submit passes the Python driver's stderr on through its own stdout
    assert "lakehouse run: Delta Lake's classes are not on this spark-submit's class path: pass its jars" in (
        without_jars.stdout + without_jars.stderr)

    former = settings.layout.checkpoint("silver_clickstream") / "offsets"  # refused: the former Python source's
    former.mkdir(parents=True)
    (former.parent / "metadata").write_text('{"id":"4a1f4c3e-0d4b-4e5e-9a57-2b1f0c9f8e11"}')
    (former / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1767225600000,"conf":{}}\n{"version": 3}')
    outcomes = tmp_path / "outcomes"
    jobs = ["silver_logins", "gold_user_activity_5m", "bronze_logins", "silver_clickstream", "bronze_clickstream"]
    jars = ",".join(str(j) for j in sorted(load_settings().jars_dir.glob("*.jar")))
    held = lease.acquire(settings, "bronze_logins", trigger="processing-time=10 seconds")
    try:
        result = subprocess.run(spark_submit + ["--jars", jars, *job[:1], *jobs, "--outcomes", str(outcomes)],
                                env=lakehouse_env, cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        held.release()
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]  # the first failure's code: silver's checkpoint is bad input
    ended = {j: run_outcomes.read(outcomes, j) for j in jobs}
    assert {j: o.status for j, o in ended.items()} == {
        "bronze_clickstream": "finished", "silver_clickstream": "failed", "gold_user_activity_5m": "not_run",
        "bronze_logins": "refused", "silver_logins": "not_run"}
    assert "former Python Delta" in ended["silver_clickstream"].detail
    assert "upstream silver_clickstream" in ended["gold_user_activity_5m"].detail
    assert "upstream bronze_logins" in ended["silver_logins"].detail
    assert ended["bronze_clickstream"].summary.startswith("job=bronze_clickstream finished: ")
    committed = checkpoints.latest_committed_batch(settings.layout.checkpoint("bronze_clickstream"))
    assert f", last batch {committed}, " in ended["bronze_clickstream"].summary  # the last one committed
    assert "lakehouse run: silver_clickstream: " in output and "lakehouse run: bronze_logins: " in output
    total = delta_store.count_rows(settings.layout.table("bronze/clickstream")) + delta_store.count_rows(
        settings.layout.table("bronze/clickstream_quarantine"))
    assert total == landed.lines
    assert not delta_store.table_exists(settings.layout.table("silver/logins"))  # waits for bronze_logins
    assert not delta_store.table_exists(settings.layout.table("gold/user_activity_5m"))


@pytest.mark.spark
@pytest.mark.slow
def test_a_stop_request_stops_only_its_job_in_a_shared_driver(settings, small_batch_registry, lakehouse_env, tmp_path):
    """`lakehouse stop <job>` during a several-job run stops that job at a batch boundary; the jobs after it run."""
    from include.records.job_requests import request_stop
    from tests.support.helpers import wait_for
    from tests.support.kill_hooks import pause_env

    generate(settings, events=400, seed=43, files=4)  # two bronze batches of two files
    gate, outcomes = tmp_path / "gate", tmp_path / "outcomes"
    jobs = ["bronze_clickstream", "silver_clickstream", "bronze_logins"]
    process = subprocess.Popen(LAKEHOUSE + ["run", *jobs, "--outcomes", str(outcomes)], cwd=REPO, text=True,
                               env={**lakehouse_env, **pause_env("bronze_clickstream", "before_commit", 0, gate)},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: Path(f"{gate}.waiting").exists() or process.poll() is not None, 240, "bronze's first batch")
        request_stop(settings, "bronze_clickstream", "test")
        gate.touch()
        _, stderr = process.communicate(timeout=300)
    finally:
        gate.touch()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    ended = {j: run_outcomes.read(outcomes, j).status for j in jobs}
    assert ended == {"bronze_clickstream": "stopped", "silver_clickstream": "finished", "bronze_logins": "finished"}
    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream")).column("event_id").to_pylist()
    silver = delta_store.read_table(settings.layout.table("silver/clickstream")).column("event_id").to_pylist()
    assert silver and len(silver) == len(set(silver)) and set(silver) <= set(bronze)  # it read what bronze committed


@pytest.mark.airflow
def test_airflow_standalone_says_where_the_ui_and_its_login_are(lakehouse_env, tmp_path):
    """`lakehouse airflow standalone` (the README's route as well as `make airflow`) names the UI and the password
    file before Airflow's own output; stopped as soon as it has."""
    home = tmp_path / "airflow_home"
    process = subprocess.Popen(LAKEHOUSE + ["airflow", "standalone"], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**lakehouse_env, "AIRFLOW_HOME": str(home)})
    try:
        first = process.stderr.readline()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert first.startswith("Airflow UI: http://localhost:8080  (user: admin;"), first
    assert f"{home}/simple_auth_manager_passwords.json.generated" in first


@pytest.mark.spark
def test_a_driver_maps_spark_from_the_class_data_archive(settings, lakehouse_env, tmp_path):
    """`make` built the driver's class-data archive (include/jvm_archive.py): a job's driver loads Spark's and
    Delta's classes from it (`shared objects file (top)`: the dynamic archive), not from the jars."""
    from include.jvm_archive import archive_path

    assert archive_path(settings.jars_dir).is_file(), "make builds .cache/jars/spark-driver.jsa"
    loaded = tmp_path / "classes.log"
    env = {**lakehouse_env, "LAKEHOUSE_SPARK_JAVA_OPTIONS": f"-Xlog:class+load=info:file={loaded}"}
    result = run_cli(["run", "bronze_clickstream"], env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = loaded.read_text().splitlines()
    from_archive = [line for line in lines if "source: shared objects file (top)" in line]
    assert any("org.apache.spark.sql.SparkSession " in line for line in from_archive), lines[:20]
    assert any("io.delta." in line for line in from_archive) and len(from_archive) > len(lines) // 2
