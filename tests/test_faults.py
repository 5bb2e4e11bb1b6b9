"""Faults an operator meets, injected on real job processes: each ends in a clear outcome, nothing lost."""

from __future__ import annotations

import base64
import json
import re
import shutil
import signal
import threading
from pathlib import Path

import pytest

from include.failures import ExitCode
from include.ops.launch import job_environment, spark_submit_command
from include.records import lease
from include.records.heartbeats import read_heartbeat
from include.registry import Trigger, build_registry
from include.storage import delta as delta_store
from include.summary import summarize
from spark_jobs.streaming_query import run_job
from tests.support.helpers import generate, landed, run_cli, saved_registry, signal_group_when, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = "bronze_clickstream"




def test_sigterm_to_the_process_group_stops_at_a_batch_boundary(settings, lakehouse_env):
    """`timeout` or a task kill: SIGTERM to the whole spark-submit group, the driver JVM included. The job
    still stops between batches with exit 0, no traceback, lease released (Ctrl-C: test_cli)."""
    data = generate(settings, events=300, seed=71, files=2)
    command = spark_submit_command(settings, JOB, "processing-time=2 seconds")
    code, output = signal_group_when(command, {**lakehouse_env, **job_environment(settings)},
                                     lambda: landed(settings) == data.lines, signal.SIGTERM,
                                     "the job to process its input")
    assert code == 0, output[-3000:]
    assert "received SIGTERM: stopping at the next batch boundary" in output, output[-3000:]
    assert "Traceback" not in output and "Exception" not in output, output[-3000:]
    assert read_heartbeat(settings, JOB)["status"] == "stopped"
    assert not lease.is_held(settings, JOB)
    # Spark logs at WARN (LAKEHOUSE_SPARK_LOG_LEVEL) from its first line; the run's summary ends the log
    assert not re.search(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", output, re.MULTILINE), output[-3000:]
    last = output.strip().splitlines()[-1]
    assert f"job={JOB} stopped:" in last and f"{data.lines} rows in" in last, output[-3000:]
    assert "bronze/clickstream +" in last and "bronze/clickstream_quarantine +" in last, last


def good_line(n: int) -> bytes:
    return json.dumps({"event_id": f"e{n}", "user_id": "u1", "event_type": "view", "value": 1.0,
                       "event_time": f"2026-01-01T00:{n % 60:02d}:00+00:00"}).encode()


def test_oversized_lines_and_invalid_utf8_go_to_the_quarantine(spark, settings, raw, tmp_path):
    """A 40 MB line is skipped in bounded memory (the source's max_line_bytes) and accounted for per file;
    invalid UTF-8 keeps its exact bytes (base64); every table stays readable by delta-rs."""
    raw["sources"]["clickstream"]["max_line_bytes"] = "1 MB"
    registry = build_registry(raw)
    landing = settings.layout.landing("landing/clickstream")
    landing.mkdir(parents=True)
    (landing / "a_big.json").write_bytes(good_line(1) + b"\n" + b"x" * (40 * 1024**2) + b"\n" + good_line(2) + b"\n")
    (landing / "b_only_long.json").write_bytes(b"{" + b"y" * (3 * 1024**2))  # no line end, no other line
    (landing / "c_crlf.json").write_bytes(b"\r\n".join(good_line(n) for n in range(3, 6)) + b"\r\n")
    invalid = [b"\xff\xfe{\"event_id\": 1}", b"caf\xe9"]
    (landing / "d_latin1.json").write_bytes(good_line(6) + b"\n" + b"\n".join(invalid) + b"\n")

    run_job(spark, settings, registry, JOB, Trigger(available_now=True))

    bronze = delta_store.read_table(settings.layout.table("bronze/clickstream"))
    assert sorted(bronze["event_id"].to_pylist()) == [f"e{n}" for n in range(1, 7)]
    quarantine = delta_store.read_table(settings.layout.table("bronze/clickstream_quarantine")).to_pylist()
    too_long = {Path(r["_source_file"]).name: r["raw_line"] for r in quarantine if r["reason"] == "line_too_long"}
    assert set(too_long) == {"a_big.json", "b_only_long.json"}
    assert f"bytes in lines longer than {1024**2} bytes" in too_long["a_big.json"]
    # Spark splits a_big.json inside its long line (a split is ~20 MB here); the reader of the next split returns
    # the line's last piece as a line of its own. The file is read again without it: one row for the whole line.
    for name, line_bytes in (("a_big.json", 40 * 1024**2 + 1), ("b_only_long.json", 3 * 1024**2 + 1)):
        unread = int(too_long[name].removeprefix("[").split(" ", 1)[0])
        assert unread in (line_bytes, line_bytes - 1), name  # - 1: b_only_long.json has no line end
    escaped = sorted(r["raw_line"] for r in quarantine if r["reason"] == "invalid_utf8")
    assert sorted(base64.b64decode(e.removeprefix("base64:")) for e in escaped) == sorted(invalid)
    assert len(quarantine) == 4, [(r["reason"], r["raw_line"][:40]) for r in quarantine]
    assert summarize(settings, registry).tables  # delta-rs reads every table


def test_a_lost_checkpoint_refuses_instead_of_duplicating(spark, settings, registry, lakehouse_env):
    generate(settings, events=300, seed=72, files=2)
    for job_id in ("bronze_clickstream", "silver_clickstream"):
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    silver = settings.layout.table("silver/clickstream")
    before = delta_store.count_rows(silver)
    shutil.rmtree(settings.layout.checkpoint("silver_clickstream"))

    refused = run_cli(["run", "silver_clickstream"], lakehouse_env, timeout=300)
    assert refused.returncode == ExitCode.BAD_INPUT, refused.stderr[-3000:]
    message = refused.stderr.strip().splitlines()[-1]
    assert "no checkpoint at" in message and "silver/clickstream already hold rows" in message
    assert "lakehouse checkpoint full-refresh silver_clickstream" in message
    assert "lakehouse checkpoint reset-checkpoint silver_clickstream --from-latest" in message
    assert "Traceback" not in refused.stderr
    assert delta_store.count_rows(silver) == before


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


FAULTS = {
    # fault name: (job, damage(root), text the one line must contain)
    "deleted offsets": ("silver_clickstream", lambda cp, tb: (cp / "offsets" / "0").unlink(), "offsets/0 is missing"),
    "garbage offsets": ("silver_clickstream", lambda cp, tb: (cp / "offsets" / "1").write_bytes(b"\xff\xfe\x00garbage"),
                        "offsets/1 is not text"),
    "garbage commit": ("silver_clickstream", lambda cp, tb: (cp / "commits" / "0").write_text("v1\n{\"nextBatch"),
                       "commits/0 has a line that is not JSON"),
    "deleted state": ("silver_clickstream", lambda cp, tb: shutil.rmtree(cp / "state"), "state is missing"),
    "truncated changelog": ("silver_clickstream", lambda cp, tb: truncate(cp / "state" / "0" / "1" / "2.changelog"),
                            "2.changelog is truncated"),
    "truncated snapshot": ("gold_user_activity_5m", lambda cp, tb: truncate(cp / "state" / "0" / "1" / "2.zip"),
                           "2.zip is truncated"),
    "truncated delta log": ("silver_clickstream", lambda cp, tb: truncate(max((tb / "_delta_log").glob("*.json"))),
                            "is truncated or corrupt (table"),
}


def test_damaged_files_and_bad_settings_end_in_one_line(spark, settings, raw, lakehouse_env, tmp_path):
    """Each fault: exit 2, one line naming the file (or value) and what to do, no trace, nothing changed.
    Silver keeps its state with changelog checkpointing, gold in snapshots (available-now runs under the shipped `live`)."""
    raw["jobs"]["silver_clickstream"]["state_store"] = {"changelog_checkpointing": True}
    registry = saved_registry(raw, tmp_path / "changelog_silver.yaml", lakehouse_env)
    generate(settings, events=300, seed=73, files=2)
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m"):
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    rows = delta_store.count_rows(settings.layout.table("silver/clickstream"))
    for number, (fault, (job_id, damage, expected)) in enumerate(FAULTS.items()):
        root = tmp_path / f"copy{number}"
        shutil.copytree(settings.root, root)
        damage(root / "_checkpoints" / job_id, root / "silver" / "clickstream")
        result = run_cli(["run", job_id], {**lakehouse_env, "LAKEHOUSE_ROOT": str(root)}, timeout=300)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == ExitCode.BAD_INPUT, (fault, result.stderr[-3000:])
        assert expected in lines[-1] and "Traceback" not in result.stderr, (fault, result.stderr[-3000:])
        assert "lakehouse checkpoint" in lines[-1] or "restore it" in lines[-1], (fault, lines[-1])
    assert delta_store.count_rows(settings.layout.table("silver/clickstream")) == rows

    # A moved (copied) lakehouse: the file source's checkpoint keeps absolute paths.
    moved = run_cli(["run", "bronze_clickstream"], {**lakehouse_env, "LAKEHOUSE_ROOT": str(tmp_path / "copy0")})
    assert moved.returncode == ExitCode.BAD_INPUT and "the lakehouse was moved" in moved.stderr.splitlines()[-1]
    assert f"LAKEHOUSE_ROOT={settings.root}" in moved.stderr.splitlines()[-1]

    # LAKEHOUSE_ROOT that is a file; a trigger Spark cannot represent.
    a_file = tmp_path / "not_a_dir"
    a_file.write_text("")
    for args, env, expected in (
        (["run", "silver_clickstream"], {"LAKEHOUSE_ROOT": str(a_file / "lakehouse")}, "is a file, not a directory"),
        (["run", "silver_clickstream", "--trigger", "processing-time=99999999999999 hours"], {},
         "must be between 1 second and 24 hours"),
    ):
        result = run_cli(args, {**lakehouse_env, **env}, timeout=120)
        assert result.returncode == ExitCode.BAD_INPUT and expected in result.stderr, result.stderr[-3000:]
        assert "Traceback" not in result.stderr


def test_an_airflow_task_kill_stops_the_job_at_a_batch_boundary(settings, lakehouse_env, monkeypatch):
    """SparkSubmitOperator's on_kill SIGKILLs spark-submit; the project's operator first asks the job to stop
    at its next batch boundary and waits for it to exit 0."""
    from include.airflow.operators import LakehouseSparkSubmitOperator

    for name, value in {**lakehouse_env, **job_environment(settings)}.items():
        monkeypatch.setenv(name, value)
    data = generate(settings, events=300, seed=74, files=2)
    operator = LakehouseSparkSubmitOperator(task_id=JOB, job_id=JOB, trigger="processing-time=2 seconds",
                                            settings=settings)
    operator._hook = operator._get_hook()
    failures: list[BaseException] = []

    def submit() -> None:
        try:
            operator._hook.submit(operator.application)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    runner = threading.Thread(target=submit)
    runner.start()
    try:
        wait_for(lambda: landed(settings) == data.lines, 180, "the job to process its input")
        operator.on_kill()
        runner.join(timeout=120)
    finally:
        if operator._hook._submit_sp is not None and operator._hook._submit_sp.poll() is None:
            operator._hook._submit_sp.kill()  # in pytest's own process group: no killpg
    assert not runner.is_alive() and not failures, failures
    assert operator._hook._submit_sp.returncode == 0
    assert read_heartbeat(settings, JOB)["status"] == "stopped" and not lease.is_held(settings, JOB)


def test_a_start_stopped_before_its_query_id_was_written_is_not_a_damaged_checkpoint(settings, registry):
    """A query killed while it made its checkpoint (the offset log's directory made, `metadata` not yet) ran no batch:
    the next start goes on (Spark writes a new id). Once a batch is logged, a missing `metadata` is damage."""
    from include.checkpoints.validate import CheckpointDamaged, check_job_files

    job = registry.job("silver_clickstream")
    checkpoint = settings.layout.checkpoint(job.id)
    (checkpoint / "offsets").mkdir(parents=True)
    check_job_files(settings, job)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{}')
    with pytest.raises(CheckpointDamaged, match="metadata is missing"):
        check_job_files(settings, job)
