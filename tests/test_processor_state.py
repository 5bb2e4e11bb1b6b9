"""The processors' state: event times exact to the microsecond through state, timers and output; the state layout's
version in the checkpoint's fingerprint; a new checkpoint's Avro-encoded state resuming under a processor whose state
gained a field."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from include.checkpoints.plan import fingerprint, plan_job, write_fingerprint
from include.registry import PROCESSORS, Trigger, build_registry
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job

AVAILABLE_NOW = Trigger(available_now=True)
SESSION_JOBS = ("bronze_clickstream", "silver_clickstream", "gold_user_session_summaries")
LOGIN_JOBS = ("bronze_logins", "silver_logins", "gold_fraud_alerts")
START = datetime(2026, 4, 1, tzinfo=UTC)


def only(raw: dict, jobs: tuple[str, ...]) -> dict:
    chain = copy.deepcopy(raw)
    chain["jobs"] = {j: chain["jobs"][j] for j in jobs}
    return chain


def land(settings, source: str, name: str, records: list[dict]) -> None:
    directory = settings.layout.landing(f"landing/{source}")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def at(seconds: float, micros: int = 0) -> datetime:
    return START + timedelta(seconds=seconds, microseconds=micros)


def click(user: str, moment: datetime, value: float = 1.0) -> dict:
    return {"event_id": f"{user}-{moment.isoformat()}", "user_id": user, "event_type": "click", "value": value,
            "event_time": moment.isoformat().replace("+00:00", "Z")}


def test_an_old_processor_checkpoint_plans_a_full_refresh_that_says_why(settings, registry):
    job = registry.job("gold_user_session_summaries")
    checkpoint = settings.layout.checkpoint(job.id)
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n{}')
    recorded = fingerprint(job, registry)
    del recorded["processor_state"]  # made before the layout had a version: milliseconds
    write_fingerprint(checkpoint, recorded)
    plan = plan_job(job, registry, checkpoint)
    assert plan.mode == "full-refresh" and not plan.startable
    assert [(c.field, c.before, c.after) for c in plan.changes] == [("processor_state", None, 2)]
    assert "another layout" in plan.render() and plan.command.startswith("lakehouse checkpoint full-refresh")
    other = registry.job("gold_user_activity_5m")  # jobs without a processor are not touched by it
    assert fingerprint(other, registry)["processor_state"] is None


@pytest.mark.spark
def test_sessions_and_alerts_keep_microseconds_through_state_timers_and_output(spark, settings, raw):
    chain = only(raw, SESSION_JOBS + LOGIN_JOBS)
    chain["jobs"]["gold_user_session_summaries"]["transform"]["params"] = {"gap": "2 minutes"}
    registry = build_registry(chain)
    land(settings, "clickstream", "a.jsonl", [
        click("ann", at(0, 123456)), click("ann", at(60, 654321)),  # one session, closed at its end + 2 minutes
        click("bob", at(30, 999)),
        click("ann", at(600, 1)),  # more than the gap later: a second session
        click("driver", at(1800, 500))])  # moves the watermark (10 minutes) past the others' sessions
    failures = [at(100 + 30 * n, 111111 * (n + 1)) for n in range(5)]
    land(settings, "logins", "a.jsonl", [
        *({"user_id": "eve", "outcome": "failure", "event_time": t.isoformat()} for t in failures),
        {"user_id": "driver", "outcome": "success", "event_time": at(1800).isoformat()}])
    for job_id in SESSION_JOBS + LOGIN_JOBS:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)

    gap = timedelta(minutes=2)
    sessions = {(r["user_id"], r["session_start"]): r for r in
                delta_store.read_table(settings.layout.table("gold/user_session_summaries")).to_pylist()}
    expected = {("ann", at(0, 123456), at(60, 654321), 2), ("bob", at(30, 999), at(30, 999), 1),
                ("ann", at(600, 1), at(600, 1), 1)}
    assert {(u, s, r["session_end"], r["event_count"]) for (u, s), r in sessions.items()} == expected
    assert all(r["closed_at"] == r["session_end"] + gap for r in sessions.values())
    [alert] = delta_store.read_table(settings.layout.table("gold/alerts")).to_pylist()
    assert (alert["entity"], alert["alert_time"], alert["window_start"]) == ("eve", failures[-1], failures[0])


@pytest.mark.spark
def test_a_processor_whose_state_gains_a_field_resumes_a_new_checkpoint(spark, settings, raw, monkeypatch):
    """Avro state (new checkpoints): the sessionizer's open session gains a field between two runs; the second run
    reads the first run's open sessions (the new field null) and closes them as the plain sessionizer would."""
    chain = only(raw, SESSION_JOBS)
    chain["jobs"]["gold_user_session_summaries"]["transform"]["params"] = {"gap": "2 minutes"}
    registry = build_registry(chain)
    # the watermark (10 minutes) passes ann's and bob's events, not their sessions' ends (last event + 2 minutes)
    land(settings, "clickstream", "a.jsonl", [click("ann", at(0, 5)), click("bob", at(10)),
                                              click("ann", at(50, 7), 2.0), click("zed", at(700))])
    for job_id in SESSION_JOBS:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    checkpoint = settings.layout.checkpoint("gold_user_session_summaries")
    assert set(open_sessions(spark, checkpoint)) == {"ann", "bob"}
    pinned = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[1])["conf"]
    assert pinned["spark.sql.streaming.stateStore.encodingFormat"] == "avro"
    # set only while the query started: the session's later aggregations must not get Avro (Spark refuses it)
    assert spark.conf.get("spark.sql.streaming.stateStore.encodingFormat", None) in (None, "unsaferow")

    monkeypatch.setitem(PROCESSORS, "sessionizer", replace(
        PROCESSORS["sessionizer"], class_path="tests.support.evolved_sessionizer:SessionizerWithPeak"))
    land(settings, "clickstream", "b.jsonl", [click("ann", at(150), 4.0), click("yan", at(800))])
    for job_id in SESSION_JOBS:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    # ann's session, written by the first version, went on under the second: its row gained the peak
    assert open_sessions(spark, checkpoint) == {"ann": 4.0}
    land(settings, "clickstream", "c.jsonl", [click("driver", at(1800))])
    for job_id in SESSION_JOBS:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    rows = {(r["user_id"], r["session_start"], r["session_end"], r["event_count"], r["total_value"])
            for r in delta_store.read_table(settings.layout.table("gold/user_session_summaries")).to_pylist()}
    assert rows == {("ann", at(0, 5), at(150), 3, 7.0), ("bob", at(10), at(10), 1, 1.0),
                    ("zed", at(700), at(700), 1, 1.0), ("yan", at(800), at(800), 1, 1.0)}


def open_sessions(spark, checkpoint) -> dict:
    """The keys with an open session in the checkpoint's latest state, with its peak when the state has one."""
    rows = spark.read.format("statestore").option("path", str(checkpoint)).option("stateVarName", "session").load()
    return {r["key"][0]: r["value"]["peak"] if "peak" in r["value"].asDict() else None for r in rows.collect()}
