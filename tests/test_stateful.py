"""`stateful_process` jobs (transformWithStateInPandas) on real Spark and Delta, checked against plain-Python oracles."""

from __future__ import annotations

import json
import signal
import threading
from datetime import UTC, datetime, timedelta

import pytest

from include import checkpoints
from include.checkpoints.request import CheckpointRequest
from include.registry import Trigger
from include.storage import delta as delta_store
from spark_jobs.checkpoint_actions import apply
from spark_jobs.state_inspect import inspect_state
from spark_jobs.streaming_query import run_job
from tests.support.helpers import arrival_order, fraud_alert_rows, land_logins, run_cli, session_summary_rows
from tests.support.kill_hooks import kill_env
from tests.support.oracle import StaleServices, expected_alerts

pytestmark = [pytest.mark.spark, pytest.mark.slow]

AVAILABLE_NOW = Trigger(available_now=True)
LOGIN_JOBS = ("bronze_logins", "silver_logins", "gold_fraud_alerts")


@pytest.fixture
def registry(small_batch_registry):
    """Several micro-batches per run: the result must not depend on where batches are cut."""
    return small_batch_registry


def run_lineage(spark, settings, registry, jobs=LOGIN_JOBS):
    for job_id in jobs:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)


def test_fraud_alerts_equal_the_oracle_over_two_drops_and_a_rerun(spark, settings, registry):
    first = land_logins(settings)
    run_lineage(spark, settings, registry)
    drops = [arrival_order(first.files)]
    expected = expected_alerts(registry, drops)
    assert len(expected) >= 5, "test data too small: too few alerts"
    assert fraud_alert_rows(settings, only_fraud_alerts=True) == expected

    second = land_logins(settings, seed=6, start=datetime(2026, 1, 1, 3, tzinfo=UTC), files=2)  # state carried on
    run_lineage(spark, settings, registry)
    drops.append(arrival_order(second.files))
    expected = expected_alerts(registry, drops)
    assert fraud_alert_rows(settings, only_fraud_alerts=True) == expected
    assert len({(user, t) for user, t, *_ in expected}) == len(expected)  # one alert per burst

    version = delta_store.latest_version(settings.layout.table("gold/alerts"))
    run_lineage(spark, settings, registry, LOGIN_JOBS[2:])  # bronze and silver have nothing new to give it
    assert delta_store.latest_version(settings.layout.table("gold/alerts")) == version  # a rerun writes nothing


def state_keys(spark, settings, job_id: str, variable: str) -> set[str]:
    """The keys that hold state variable `variable` in the job's latest committed state (Spark's state reader)."""
    rows = (spark.read.format("statestore").option("path", str(settings.layout.checkpoint(job_id)))
            .option("stateVarName", variable).load().collect())
    return {r["key"][0] for r in rows}


def timer_keys(spark, settings, job_id: str) -> set[str]:
    rows = (spark.read.format("statestore").option("path", str(settings.layout.checkpoint(job_id)))
            .option("readRegisteredTimers", "true").load().collect())
    return {r["key"][0] for r in rows}


def write_lines(settings, name: str, records: list[dict]):
    directory = settings.layout.landing("landing/logins")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_an_idle_key_times_out_while_batches_run_and_its_state_is_gone(spark, settings, registry):
    start = datetime(2026, 3, 1, tzinfo=UTC)

    def login(user: str, minute: float, outcome: str) -> dict:
        return {"user_id": user, "outcome": outcome, "event_time": (start + timedelta(minutes=minute)).isoformat()}

    # quiet_user fails twice, then is never heard from again; busy_user keeps batches (and the watermark) going.
    write_lines(settings, "a.jsonl", [login("quiet_user", 0, "failure"), login("quiet_user", 1, "failure"),
                                      login("busy_user", 2, "success"), login("busy_user", 14, "success")])
    run_lineage(spark, settings, registry)
    assert "quiet_user" in state_keys(spark, settings, "gold_fraud_alerts", "failures")
    assert "quiet_user" in timer_keys(spark, settings, "gold_fraud_alerts")

    # The watermark passes quiet_user's last failure + 10 minutes: its idle timer fires and removes its state.
    write_lines(settings, "b.jsonl", [login("busy_user", minute, "success") for minute in (20, 26, 33)])
    run_lineage(spark, settings, registry)
    for variable in ("failures", "pending", "idle_timer"):
        assert "quiet_user" not in state_keys(spark, settings, "gold_fraud_alerts", variable), variable
    timers = timer_keys(spark, settings, "gold_fraud_alerts")
    assert "quiet_user" not in timers and "busy_user" in timers, timers
    report = inspect_state(spark, settings, registry, "gold_fraud_alerts")  # what `lakehouse state` shows
    (operator,) = report["operators"]
    assert {s["store"].split()[1] for s in operator["stores"]} == {"failures", "pending", "idle_timer"}
    assert operator["timers"]["keys"] == 1 and operator["timers"]["next"][0]["key"] == {"user_id": "busy_user"}
    assert fraud_alert_rows(settings, only_fraud_alerts=True) == []


def test_sigkill_after_the_delta_commit_resumes_exactly(spark, settings, registry, lakehouse_env):
    landed = land_logins(settings, files=3)
    run_lineage(spark, settings, registry, LOGIN_JOBS[:2])
    job_id = "gold_fraud_alerts"
    batch = 1  # batches 0-2 take a landing file each; batch 1 emits the first alerts (checked below)
    killed = run_cli(["run", job_id], {**lakehouse_env, **kill_env(job_id, "after_commit", batch)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoint = settings.layout.checkpoint(job_id)
    app_id = f"{job_id}:{checkpoints.query_id(checkpoint)}"
    assert delta_store.committed_batch(settings.layout.table("gold/alerts"), app_id) == batch
    assert checkpoints.latest_committed_batch(checkpoint) == batch - 1
    alerts_before_restart = len(fraud_alert_rows(settings, only_fraud_alerts=True))
    assert alerts_before_restart, "the killed run wrote no alerts: choose a later batch"

    run_job(spark, settings, registry, job_id, AVAILABLE_NOW)  # the restart: the same code as a process's
    assert fraud_alert_rows(settings, only_fraud_alerts=True) == expected_alerts(registry, [arrival_order(landed.files)])


def test_sessionizer_starts_from_an_initial_state_and_equals_the_oracle(spark, settings, raw):
    from include.generator import DEFAULT_START
    from include.quality import run_quality
    from include.registry import build_registry
    from tests.support.helpers import generate
    from tests.support.oracle import expected_session_summaries

    raw["defaults"]["backfill"] = {"max_files_per_trigger": 1}
    transform = raw["jobs"]["gold_user_session_summaries"]["transform"]
    transform["params"] = {"gap": "2 minutes"}
    transform["initial_state"] = "seed/open_sessions"
    registry = build_registry(raw)
    # open sessions carried over from elsewhere: two users go on right away, one never comes back
    seeds = {"user_00001": (-5, -1, 4, 10.0), "user_00002": (-3, -1, 1, 2.5), "seed_only": (-90, -80, 2, 1.0)}
    rows = [{"user_id": user, "session_start": DEFAULT_START + timedelta(minutes=a),
             "session_end": DEFAULT_START + timedelta(minutes=b), "event_count": n, "total_value": v}
            for user, (a, b, n, v) in seeds.items()]
    columns = {"user_id": "string", "session_start": "timestamp", "session_end": "timestamp", "event_count": "long",
               "total_value": "double"}
    delta_store.ensure_table(settings.layout.table("seed/open_sessions"), columns)
    delta_store.append_rows(settings.layout.table("seed/open_sessions"), columns, rows)
    initial = {r["user_id"]: [int(r["session_start"].timestamp()), int(r["session_end"].timestamp()),
                              r["event_count"], r["total_value"]] for r in rows}
    jobs = ("bronze_clickstream", "silver_clickstream", "gold_user_session_summaries")

    first = generate(settings, events=1200, seed=17, files=2, users=20)  # several batches a run, a file each
    run_lineage(spark, settings, registry, jobs)
    drops = [arrival_order(first.files)]
    expected = expected_session_summaries(registry, drops, initial=initial)
    assert len(expected) > 50 and session_summary_rows(settings) == expected
    seeded = {user: min(s for s in expected if s[0] == user) for user in seeds}  # each user's first session
    # every seeded session was continued or closed: from its seeded start (or an event within the gap before it)
    assert all(seeded[u][1] <= initial[u][0] and seeded[u][3] >= initial[u][2] for u in seeds), seeded
    assert seeded["seed_only"] == ("seed_only", *initial["seed_only"][:2], 2, 1.0, initial["seed_only"][1] + 120)
    assert seeded["user_00001"][3] > 4 or seeded["user_00002"][3] > 1  # at least one went on with new events

    second = generate(settings, events=600, seed=18, files=1, users=20, start=DEFAULT_START + timedelta(hours=2))
    run_lineage(spark, settings, registry, jobs)
    drops.append(arrival_order(second.files))
    assert session_summary_rows(settings) == expected_session_summaries(registry, drops, initial=initial)
    report = run_quality(settings, registry, ["gold/user_session_summaries"])  # the suite agrees
    assert not report.failed() and report.results, report.render()

    transform["initial_state"] = "seed/missing_sessions"
    missing = build_registry(raw)
    with pytest.raises(ValueError, match=r"job 'gold_user_session_summaries': transform.initial_state: no Delta "
                                         r"table at .*seed/missing_sessions"):
        run_job(spark, settings, missing, "gold_user_session_summaries", AVAILABLE_NOW)
    for name, bad in (("seed/twice_open", [rows[0], rows[0]]), ("seed/no_start", [{**rows[1], "session_start": None}])):
        delta_store.ensure_table(settings.layout.table(name), columns)
        delta_store.append_rows(settings.layout.table(name), columns, bad)
        transform["initial_state"] = name
        with pytest.raises(ValueError, match=rf"transform.initial_state: table {name} has (several rows for one key "
                                             r"\(one open state per key\)|null values), e.g. for keys \[\('user_0000[12]',\)\]"):
            run_job(spark, settings, build_registry(raw), "gold_user_session_summaries", AVAILABLE_NOW)
    assert session_summary_rows(settings) == expected_session_summaries(registry, drops, initial=initial)  # nothing lost


START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def epoch_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def gold_batches(settings, job_id: str = "gold_stale_services") -> list[tuple[int, int]]:
    """(batch id, batchTimestampMs) of the job's committed batches, in order."""
    checkpoint = settings.layout.checkpoint(job_id)
    if not (checkpoint / "commits").is_dir():
        return []
    ids = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    return [(i, json.loads((checkpoint / "offsets" / str(i)).read_text().splitlines()[1])["batchTimestampMs"])
            for i in ids]


def test_stale_services_alert_on_processing_time_silence_and_recovery(spark, settings, raw):
    """Processing-time timers: a service with no log read for `silent_for` is stale at the first batch after
    that; one whose log is read in that same batch is not; its next log recovers it."""
    import time

    from include.registry import build_registry
    from tests.support.helpers import wait_for

    raw["jobs"]["gold_stale_services"]["transform"]["params"] = {"silent_for": "6 seconds"}
    raw["jobs"]["gold_stale_services"]["state_store"] = {"min_batches_to_retain": 1000}  # every batch's offsets kept
    registry = build_registry(raw)
    fraud = {"alert_type": "FRAUD_ALERT", "entity": "user_x", "alert_time": datetime(2026, 1, 1, 0, 4, tzinfo=UTC),
             "window_start": datetime(2026, 1, 1, tzinfo=UTC), "event_count": 5, "detail": "-"}
    delta_store.ensure_table(settings.layout.table("gold/alerts"), registry.table_schemas["gold/alerts"])
    delta_store.append_rows(settings.layout.table("gold/alerts"), registry.table_schemas["gold/alerts"], [fraud])
    jobs = ("bronze_service_logs", "silver_service_logs", "gold_stale_services")
    landing = settings.layout.landing("landing/service_logs")
    landing.mkdir(parents=True, exist_ok=True)

    def land(name: str, logs: list[tuple[str, int]]) -> None:  # (service, minute)
        lines = [json.dumps({"service": s, "level": "INFO", "event_time": f"2026-01-01T00:{m:02d}:00Z"})
                 for s, m in logs]
        (landing / name).write_text("\n".join(lines) + "\n")

    def service_rows() -> list[dict]:  # gold_stale_services' rows of gold/alerts (gold_fraud_alerts writes it too)
        return [r for r in delta_store.read_table(settings.layout.table("gold/alerts")).to_pylist()
                if r["alert_type"] != "FRAUD_ALERT"]

    def alerts() -> list[tuple]:
        rows = service_rows()
        return sorted((r["alert_type"], r["entity"], r["window_start"].minute, r["event_count"],
                       r["alert_time"].minute if r["alert_type"] == "recovered" else None) for r in rows)

    read_in: dict[int, list[tuple[str, int]]] = {}  # gold batch id -> the logs it read (each file: one batch)

    def land_and_run(name: str, logs: list[tuple[str, int]], lineage=jobs) -> None:
        land(name, logs)
        read_in[len(gold_batches(settings))] = logs
        run_lineage(spark, settings, registry, lineage)

    land_and_run("a.jsonl", [("svc_a", 0), ("svc_b", 1), ("svc_b", 3), ("svc_a", 2)])
    armed = time.time()
    assert alerts() == []
    wait_for(lambda: time.time() > armed + 6, timeout=30, what="the services' silence to last 6 seconds")

    land_and_run("b.jsonl", [("svc_a", 5)])  # svc_a logs again in the batch that finds svc_b silent
    stale = [("stale", "svc_b", 3, 2, None)]
    assert alerts() == stale
    row = service_rows()[0]
    assert armed - 120 < row["alert_time"].timestamp() < time.time()  # when its timer expired: processing time

    land_and_run("c.jsonl", [("svc_b", 9), ("svc_b", 8), ("svc_a", 9)])  # svc_a, silent since, read in time again
    assert alerts() == [("recovered", "svc_b", 3, 2, 8), *stale]  # from its last log before to its earliest new
    version = delta_store.latest_version(settings.layout.table("gold/alerts"))
    run_lineage(spark, settings, registry, jobs[2:])  # no new logs: no batch runs, so no timer fires
    assert delta_store.latest_version(settings.layout.table("gold/alerts")) == version

    # live: once it has read input, a batch every 3 seconds, with or without input: the timers fire on their own
    land_and_run("d.jsonl", [("svc_c", 10)], jobs[:2])
    stop = threading.Event()
    live = threading.Thread(target=run_job, args=(spark, settings, registry, "gold_stale_services",
                                                  Trigger(available_now=False, interval_seconds=3)),
                            kwargs={"stop_requested": stop})
    live.start()
    try:
        wait_for(lambda: sum(a[0] == "stale" for a in alerts()) == 4, timeout=120,
                 what="every service to go stale in the live run")
    finally:
        stop.set()
        live.join(120)
    assert alerts() == sorted([("recovered", "svc_b", 3, 2, 8), *stale, ("stale", "svc_a", 9, 4, None),
                               ("stale", "svc_b", 9, 2, None), ("stale", "svc_c", 10, 1, None)])

    # the oracle, fed the batches as they ran, at their timestamps (what processing-time timers see)
    oracle = StaleServices(6000)
    for batch_id, timestamp in gold_batches(settings):
        oracle.batch(timestamp, [(s, START_MS + m * 60_000) for s, m in read_in.pop(batch_id, [])])
    assert not read_in, read_in
    assert sorted((r["alert_type"], r["entity"], epoch_ms(r["alert_time"]), epoch_ms(r["window_start"]),
                   r["event_count"]) for r in service_rows()) == sorted(oracle.alerts)

    # a full refresh of the job removes its own rows of the shared table, not gold_fraud_alerts'
    apply(spark, settings, registry, CheckpointRequest("full-refresh", ("gold_stale_services",)))
    assert alerts() == []  # rebuilt from all the logs in one batch: every timer armed anew, none expired
    assert [r for r in delta_store.read_table(settings.layout.table("gold/alerts")).to_pylist()
            if r["alert_type"] == "FRAUD_ALERT"] == [fraud]
