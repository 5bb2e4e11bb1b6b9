"""Kafka as a source, on a real broker (`lakehouse kafka up`, the session's `kafka_broker`).

Payments come from a topic (the default registry's payments source made a Kafka source on a topic of the test's
own); the clickstream from landing files. Every message is a bronze or a quarantine row, traceable to its
partition and offset; the join with the clickstream equals its oracle; reruns are no-ops; a SIGKILLed run loses
and duplicates nothing; partitions added to the topic are read from their start.
"""

from __future__ import annotations

import re
import signal
import threading
import uuid
from dataclasses import replace

import pytest
from deltalake import DeltaTable

from include.generator import GeneratorConfig, produce_to_topic
from include.quality import run_quality
from include.registry import Trigger
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.helpers import generate, run_cli, saved_registry, wait_for
from tests.support.joins import assert_join_is_exact
from tests.support.kafka import payments_from_kafka
from tests.support.kill_hooks import kill_env

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

AVAILABLE_NOW = Trigger(available_now=True)
JOBS = ("bronze_clickstream", "silver_clickstream", "bronze_payments", "silver_payments", "gold_order_payments")
# Messages a file could not hold: bytes that are not UTF-8, JSON followed by more, no value at all (a tombstone).
ODD_MESSAGES = {
    b'\xff\xfe{"payment_id": "p-odd-1"}': "invalid_utf8",
    b'{"payment_id": "p-odd-2", "order_id": "o", "amount": 1.0, "payment_time": "2026-01-01T00:00:00Z"} {}':
        "trailing_content",
    None: "empty_message",
    b'{"order_id": "o-odd-4", "amount": 2.0, "payment_time": "2026-01-01T00:00:00Z"}': "missing_payment_id",
}


@pytest.fixture
def kafka_registry(raw, tmp_path, lakehouse_env, kafka_broker):
    """The registry with payments on a fresh topic (several micro-batches per available-now run); subprocesses get
    it too. The topic is in `registry.topic`."""
    topic = payments_from_kafka(raw, max_offsets_per_trigger=150)
    raw["jobs"]["bronze_payments"]["source"]["backfill"] = {"max_offsets_per_trigger": 150}
    registry = saved_registry(raw, tmp_path / "kafka_registry.yaml", lakehouse_env)
    return registry, topic


def produce(bootstrap: str, topic: str, events: int, seed: int, partitions: int = 3):
    """The payments of the clickstream `generate(settings, events=events, seed=seed, files=4, late_fraction=0.0)`
    lands, as messages."""
    config = GeneratorConfig(events=events, seed=seed, files=4, late_fraction=0.0)
    return produce_to_topic(bootstrap, topic, "payments", config, partitions)


def produce_raw(bootstrap: str, topic: str, values: list[bytes | None], timestamp: int = 0) -> None:
    """Messages with these values (and this CreateTime, in ms, when given)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value, timestamp=timestamp)
    assert producer.flush(30) == 0


def topic_offsets(bootstrap: str, topic: str) -> set[tuple[int, int]]:
    """Every (partition, offset) of the topic's messages."""
    from include.kafka.offsets import topic_ranges

    return {(r.partition, offset) for r in topic_ranges(bootstrap, (topic,))[topic]
            for offset in range(r.earliest, r.latest)}


def read_coordinates(settings) -> tuple[list[tuple[int, int]], dict[str, str]]:
    """(partition, offset) of every bronze and quarantine row, and the quarantine's reasons by raw line."""
    bronze = delta_store.read_table(settings.layout.table("bronze/payments")).to_pylist()
    quarantine = delta_store.read_table(settings.layout.table("bronze/payments_quarantine")).to_pylist()
    coordinates = [(r["_kafka_partition"], r["_kafka_offset"]) for r in bronze]
    for row in quarantine:
        _, partition, offset = row["_source_file"].removeprefix("kafka:").rsplit("/", 2)
        coordinates.append((int(partition), int(offset)))
    return coordinates, {row["raw_line"]: row["reason"] for row in quarantine}


def messages_read(settings) -> int:
    """Bronze and quarantine rows so far (0 before the job made its tables)."""
    tables = [settings.layout.table(t) for t in ("bronze/payments", "bronze/payments_quarantine")]
    return sum(delta_store.count_rows(t) for t in tables) if all(map(delta_store.table_exists, tables)) else 0


def assert_every_message_once(settings, bootstrap: str, topic: str) -> None:
    coordinates, _ = read_coordinates(settings)
    assert len(coordinates) == len(set(coordinates)), "a message was written twice"
    assert set(coordinates) == topic_offsets(bootstrap, topic), "a message is missing"


def test_payments_from_kafka_backfill_then_live_equal_the_oracle(spark, settings, kafka_registry, kafka_broker):
    registry, topic = kafka_registry
    generate(settings, events=1200, seed=41, files=4, late_fraction=0.0)
    produced = produce(kafka_broker, topic, events=1200, seed=41)
    produce_raw(kafka_broker, topic, list(ODD_MESSAGES))
    for job_id in JOBS:
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)

    assert_every_message_once(settings, kafka_broker, topic)
    _, reasons = read_coordinates(settings)
    assert reasons.pop(None) == "empty_message"
    by_reason = {reason: line for line, reason in reasons.items()}
    assert by_reason["invalid_utf8"].startswith("base64:")
    assert by_reason["trailing_content"].endswith("} {}")
    assert "o-odd-4" in by_reason["missing_payment_id"]
    malformed = sum(n for kind, n in produced.kinds.items() if kind.startswith("malformed:"))
    assert malformed and len(reasons) == malformed + len(ODD_MESSAGES) - 1, reasons
    bronze = delta_store.read_table(settings.layout.table("bronze/payments")).to_pylist()
    assert {r["_kafka_topic"] for r in bronze} == {topic} and len({r["_kafka_partition"] for r in bronze}) == 3
    assert_join_is_exact(settings, registry)

    # A rerun without new messages commits nothing.
    versions = {t: DeltaTable(str(settings.layout.table(t))).version() for t in ("bronze/payments", "silver/payments")}
    for job_id in ("bronze_payments", "silver_payments"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    assert {t: DeltaTable(str(settings.layout.table(t))).version() for t in versions} == versions

    # Live: the same definition under a processing-time trigger reads what arrives next, then stops on request.
    produce(kafka_broker, topic, events=400, seed=42)
    expected = len(topic_offsets(kafka_broker, topic))
    stop = threading.Event()

    def caught_up() -> None:
        wait_for(lambda: messages_read(settings) == expected, 180, "the live run to catch up", interval=1)
        stop.set()

    watcher = threading.Thread(target=caught_up, daemon=True)
    watcher.start()
    result = run_job(spark, settings, registry, "bronze_payments", Trigger.parse("processing-time=2 seconds"),
                     stop_requested=stop)
    watcher.join(5)
    assert result.status == "stopped", result
    assert_every_message_once(settings, kafka_broker, topic)


@pytest.mark.parametrize("point", ["before_commit", pytest.param("after_commit", marks=pytest.mark.full)])
def test_a_kafka_job_killed_at_a_commit_point_resumes_exactly(spark, settings, kafka_registry, kafka_broker,
                                                               lakehouse_env, point):
    registry, topic = kafka_registry
    produce(kafka_broker, topic, events=1200, seed=43)
    killed = run_cli(["run", "bronze_payments"], {**lakehouse_env, **kill_env("bronze_payments", point, 1)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)  # the restart: the same code as a process's
    assert_every_message_once(settings, kafka_broker, topic)


def test_partitions_added_to_the_topic_are_read_from_their_start(spark, settings, kafka_registry, kafka_broker,
                                                                 lakehouse_env):
    from confluent_kafka.admin import AdminClient, NewPartitions

    from include.kafka.offsets import topic_ranges
    from include.ops.metric_sources import kafka_lags

    registry, topic = kafka_registry
    on_broker = replace(settings, kafka_bootstrap=kafka_broker, kafka_bootstrap_set=True)

    def lag() -> dict[int, int]:  # `lakehouse metrics`' lakehouse_kafka_lag_messages of the job, per partition
        return {x.partition: x.messages for x in kafka_lags(on_broker, registry) if x.job == "bronze_payments"}

    assert lag() == {}  # no checkpoint yet: nothing read, no lag said
    produce(kafka_broker, topic, events=400, seed=44, partitions=2)
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    assert lag() == {0: 0, 1: 0}
    read = sum(r.latest for r in topic_ranges(kafka_broker, (topic,))[topic])
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    produce(kafka_broker, topic, events=800, seed=45)
    assert {p for p, _ in topic_offsets(kafka_broker, topic)} == {0, 1, 2, 3}
    ranges = {r.partition: r for r in topic_ranges(kafka_broker, (topic,))[topic]}
    assert sum(lag().values()) == sum(r.latest for r in ranges.values()) - read > 0  # what came since the run
    assert {p: lag()[p] for p in (2, 3)} == {p: ranges[p].latest - ranges[p].earliest for p in (2, 3)}  # all new

    plan = run_cli(["checkpoint", "plan", "bronze_payments"], lakehouse_env)
    assert plan.returncode == 0 and "bronze_payments: resume" in plan.stdout, plan.stdout + plan.stderr
    assert "partition(s) 2, 3 are new since the checkpoint and are read from their earliest offsets" in plan.stdout
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    assert_every_message_once(settings, kafka_broker, topic)
    assert lag() == dict.fromkeys(range(4), 0)


def test_kafka_commands_and_a_missing_topic(settings, kafka_registry, kafka_broker, lakehouse_env):
    registry, topic = kafka_registry
    again = run_cli(["kafka", "up"], lakehouse_env)
    assert again.returncode == 0 and "already answers" in again.stderr, again.stderr

    generated = run_cli(["generate", "--source", "payments", "--events", "300", "--seed", "5"], lakehouse_env)
    assert generated.returncode == 0, generated.stderr[-2000:]
    assert f'"topic": "{topic}"' in generated.stdout
    status = run_cli(["kafka", "status"], lakehouse_env)
    assert status.returncode == 0 and f"{topic}: 3 partition(s)" in status.stdout, status.stdout
    files = run_cli(["generate", "--source", "payments", "--events", "10", "--seed", "5", "--to", "files"],
                    lakehouse_env)
    assert files.returncode == 2 and "not files: use --to kafka" in files.stderr, files.stderr

    # a partition's offsets the broker does not give (a partition it lacks here; one without a leader past the
    # timeout): one line, not a Kafka exception through the supervision (passing errors are asked again)
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from include.kafka.broker import BrokerError
    from include.kafka.offsets import partition_offsets

    admin = AdminClient({"bootstrap.servers": kafka_broker})
    with pytest.raises(BrokerError, match=re.escape(f"gave no offsets of {topic} partition 7 (")) as refused:
        partition_offsets(admin, TopicPartition(topic, 7), kafka_broker, timeout=2)
    assert len(str(refused.value).splitlines()) == 1

    missing = payments_from_kafka_env(lakehouse_env, f"absent-{uuid.uuid4().hex[:6]}")
    run = run_cli(["run", "bronze_payments"], {**lakehouse_env, **missing})
    assert run.returncode != 0 and "do not exist on the broker" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def payments_from_kafka_env(env: dict, topic: str) -> dict:
    """LAKEHOUSE_REGISTRY of a copy of `env`'s registry whose payments read `topic`."""
    from pathlib import Path

    import yaml

    path = Path(env["LAKEHOUSE_REGISTRY"])
    raw = yaml.safe_load(path.read_text())
    raw["sources"]["payments"]["kafka"]["topic"] = topic
    other = path.with_name(f"{topic}.yaml")
    other.write_text(yaml.safe_dump(raw, sort_keys=False))
    return {"LAKEHOUSE_REGISTRY": str(other)}


def test_a_broker_that_cannot_start_says_why_in_one_line(tmp_path, lakehouse_env):
    import socket

    from include.kafka.broker import free_port_pair

    port = free_port_pair()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        env = {**lakehouse_env, "LAKEHOUSE_KAFKA_BOOTSTRAP": f"127.0.0.1:{port}"}
        result = run_cli(["kafka", "up"], env, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().count("\n") == 0 and f"port {port} on 127.0.0.1 is taken" in result.stderr, result.stderr
    status = run_cli(["kafka", "status"], env, timeout=60)
    assert status.returncode == 1 and "no Kafka broker answers" in status.stderr, status.stderr


def test_a_recreated_topic_is_refused_then_reset_from_earliest_reads_it_whole(spark, settings, kafka_registry,
                                                                            kafka_broker, lakehouse_env):
    from confluent_kafka.admin import AdminClient

    registry, topic = kafka_registry
    produce(kafka_broker, topic, events=900, seed=46)
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 60, "the topic to be deleted")
    produce(kafka_broker, topic, events=300, seed=47, partitions=2)  # same name, fewer partitions and messages
    recreated = topic_offsets(kafka_broker, topic)

    refused = run_cli(["run", "bronze_payments"], lakehouse_env)
    assert refused.returncode == 2, refused.stderr[-3000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert f"topic {topic} partition" in line and "deleted and re-created" in line, line
    assert f"topic {topic} has 2 partition(s), fewer than the checkpoint's 3: partition(s) 2 are gone" in line, line
    assert "lakehouse checkpoint reset-checkpoint bronze_payments --from-earliest|--from-latest" in line, line
    plan = run_cli(["checkpoint", "plan", "bronze_payments"], lakehouse_env)
    assert "bronze_payments: reset-checkpoint" in plan.stdout, plan.stdout

    version = run_cli(["checkpoint", "reset-checkpoint", "bronze_payments", "--from-version", "0"], lakehouse_env)
    assert version.returncode != 0 and "no versions: use --from-earliest" in version.stderr + version.stdout
    bronze = settings.layout.table("bronze/payments")
    before = delta_store.count_rows(bronze) + delta_store.count_rows(settings.layout.table("bronze/payments_quarantine"))
    reset = run_cli(["checkpoint", "reset-checkpoint", "bronze_payments", "--from-earliest"], lakehouse_env)
    assert reset.returncode == 0, reset.stdout + reset.stderr[-3000:]
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    after = delta_store.count_rows(bronze) + delta_store.count_rows(settings.layout.table("bronze/payments_quarantine"))
    assert after - before == len(recreated)  # every message of the new topic, once


def test_the_demo_starts_a_broker_only_when_none_answers_and_stops_what_it_started(settings, kafka_broker,
                                                                                   monkeypatch):
    import contextlib
    import os
    import sys
    from dataclasses import replace

    from include.cli import broker_for_demo
    from include.kafka import broker
    from include.kafka.broker import free_port_pair

    with broker_for_demo(settings):  # the session's broker answers: nothing started, nothing stopped
        assert broker.answers(kafka_broker)
    assert broker.answers(kafka_broker)

    bootstrap = f"127.0.0.1:{free_port_pair()}"
    own = replace(settings, kafka_bootstrap=bootstrap, kafka_bootstrap_set=True)
    with broker_for_demo(own):
        assert broker.answers(bootstrap) and broker.running_pid(broker.BrokerFiles(own.layout.kafka))
    assert not broker.answers(bootstrap, timeout=1.0)
    assert broker.running_pid(broker.BrokerFiles(own.layout.kafka)) is None

    reader, writer = os.pipe()  # the demo's stderr read by nobody any more (`lakehouse demo | head`, a closed terminal)
    os.close(reader)
    closed = open(writer, "w", buffering=1)  # noqa: SIM115 - closed below, where the pipe's error is expected
    monkeypatch.setattr(sys, "stderr", closed)
    with pytest.raises(BrokenPipeError), broker_for_demo(own):
        pass
    monkeypatch.undo()
    with contextlib.suppress(BrokenPipeError):
        closed.close()  # the unwritten line: the fd is closed all the same
    assert broker.running_pid(broker.BrokerFiles(own.layout.kafka)) is None  # what it started is stopped anyway


def test_a_live_job_waits_for_its_broker_and_resumes_where_its_checkpoint_says(raw, settings, tmp_path, lakehouse_env):
    """The live supervision of a Kafka job: its broker lost under the running query, the job ends with one line;
    supervision then waits (an alert, no restart spent); the broker back, the job starts from its checkpoint and reads
    what was produced meanwhile, nothing lost or twice."""
    from dataclasses import replace

    from include.kafka import broker
    from include.kafka.broker import free_port_pair
    from include.kafka.offsets import topic_ranges
    from include.ops.processes import stop_job
    from include.ops.supervisor import supervise_job

    bootstrap = f"127.0.0.1:{free_port_pair()}"
    topic = payments_from_kafka(raw)
    raw["jobs"]["bronze_payments"]["triggers"] = {"live": "processing-time=2 seconds"}
    raw["jobs"]["bronze_payments"].pop("group", None)  # alone in its driver
    env = {**lakehouse_env, "LAKEHOUSE_KAFKA_BOOTSTRAP": bootstrap, "LAKEHOUSE_KAFKA_TIMEOUT_SECONDS": "5"}
    registry = saved_registry(raw, tmp_path / "live.yaml", env)
    own = replace(settings, kafka_bootstrap=bootstrap, kafka_bootstrap_set=True, registry_path=tmp_path / "live.yaml",
                  kafka_timeout_seconds=5)
    broker.up(own, bootstrap)
    try:
        produce(bootstrap, topic, events=300, seed=48)
        assert supervise_job(own, registry, "bronze_payments") == "started"
        wait_for(lambda: messages_read(own) == len(topic_offsets(bootstrap, topic)), 180,
                 "the live job to read the topic", interval=1)
        from include.records import lease

        broker.down(own)  # under the running query: it fails after 3 tries of the (test's 5 s) Kafka timeout
        wait_for(lambda: not lease.is_held(own, "bronze_payments"), 120, "the job to end without its broker")
        job_log = own.layout.job_log("bronze_payments")
        # The driver writes its last line after it released the lease: await that line, then check what it says.
        wait_for(lambda: job_log.read_text().strip().splitlines()[-1].startswith("lakehouse run:"), 30,
                 "the driver's last line")
        last = job_log.read_text().strip().splitlines()[-1]
        assert last.startswith(f"lakehouse run: job 'bronze_payments' stopped: broker unreachable at {bootstrap} (it "
                               "resumes from its checkpoint when the broker is back); job=bronze_payments failed:"), last

        assert supervise_job(own, registry, "bronze_payments") == "waiting"
        alerts = delta_store.read_table(own.layout.ops_table("alerts")).to_pylist()
        assert any(a["reason"] == f"broker unreachable at {bootstrap}: not started until it answers (its checkpoint "
                   "keeps its place)" for a in alerts), alerts[-3:]
        refused = run_cli(["run", "bronze_payments"], env)
        assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1].startswith(
            f"lakehouse run: broker unreachable at {bootstrap}"), refused.stderr[-2000:]

        broker.up(own, bootstrap)  # it answers before its partitions have a leader again (NOT_LEADER_FOR_PARTITION)
        # asked right away, the offsets come once the leader is back: the supervision does not crash on the moment
        ranges = topic_ranges(bootstrap, (topic,))[topic]
        assert ranges and sum(r.latest - r.earliest for r in ranges) == len(topic_offsets(bootstrap, topic))
        assert supervise_job(own, registry, "bronze_payments") == "restarted"  # it had failed: a restart, counted
        produce(bootstrap, topic, events=200, seed=49)
        wait_for(lambda: messages_read(own) == len(topic_offsets(bootstrap, topic)), 180,
                 "the live job to catch up", interval=1)
        assert stop_job(own, "bronze_payments", "test", wait_seconds=120)
        assert_every_message_once(own, bootstrap, topic)
    finally:
        stop_job(own, "bronze_payments", "test", wait_seconds=60)
        broker.down(own)


def test_retention_loss_is_refused_or_with_fail_on_data_loss_false_one_alert_per_partition(
        spark, settings, raw, tmp_path, lakehouse_env, kafka_registry, kafka_broker):
    """Messages deleted (retention: delete-records here) before the job read them: by default the job refuses to
    start naming the offsets; with `fail_on_data_loss: false` it goes on from the partition's new start and each
    partition's loss is an `_ops/alerts` row. Every message still on the topic is read once."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from include.checkpoints.kafka_offsets import checkpoint_offsets
    from include.checkpoints.plan import PlanRequired

    registry, topic = kafka_registry
    produce(kafka_broker, topic, events=300, seed=48)
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    read_before, _ = read_coordinates(settings)
    start = checkpoint_offsets(settings.layout.checkpoint("bronze_payments"))[topic][0]
    produce(kafka_broker, topic, events=300, seed=49)
    upto = start + 5
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    [deleted] = admin.delete_records([TopicPartition(topic, 0, upto)]).values()
    deleted.result(30)

    with pytest.raises(PlanRequired, match=rf"topic {topic} partition 0: offsets {start}..{upto - 1} were deleted by "
                                           "retention before being read"):
        run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)

    raw["sources"]["payments"]["kafka"]["fail_on_data_loss"] = False
    lenient = saved_registry(raw, tmp_path / "lenient.yaml", lakehouse_env)
    run_job(spark, settings, lenient, "bronze_payments", AVAILABLE_NOW)
    alerts = delta_store.read_table(settings.layout.ops_table("alerts")).to_pylist()
    assert [(a["job"], a["severity"]) for a in alerts] == [("bronze_payments", "error")], alerts
    assert f"topic {topic} partition 0: offsets {start}..{upto - 1} were deleted (retention)" in alerts[0]["reason"]
    coordinates, _ = read_coordinates(settings)
    assert len(coordinates) == len(set(coordinates)), "a message was written twice"
    assert set(coordinates) == set(read_before) | topic_offsets(kafka_broker, topic)
    assert not any(p == 0 and start <= o < upto for p, o in coordinates)


def payment_message(payment_id: str) -> bytes:
    return (f'{{"payment_id": "{payment_id}", "order_id": "o-{payment_id}", "amount": 1.5, '
            f'"payment_time": "2026-01-01T00:00:00Z"}}').encode()


@pytest.mark.airflow
def test_reset_checkpoint_of_a_kafka_job_from_a_time_and_from_latest(spark, settings, kafka_registry, kafka_broker,
                                                                     fresh_assets, lakehouse_env, monkeypatch):
    """`reset-checkpoint --from-timestamp T` reads, in each partition, the messages produced at or after T (Kafka's
    offsets by time); `--from-latest` only what is produced afterwards; the tables are kept. The checkpoint_reset
    DAG's form takes the same position: its dry run (the default) plans it, with the Kafka effect, and audits it."""
    from airflow.utils.state import DagRunState

    from include.checkpoints.request import CheckpointRequest
    from include.records import checkpoint_audit
    from spark_jobs.checkpoint_actions import apply
    from tests.support.airflow_dags import dagbag

    registry, topic = kafka_registry
    monkeypatch.setenv("LAKEHOUSE_REGISTRY", lakehouse_env["LAKEHOUSE_REGISTRY"])
    monkeypatch.setenv("LAKEHOUSE_TASK_RETRIES", "0")
    from include.kafka.produce import ensure_topic

    ensure_topic(kafka_broker, topic, 3)
    day = 1767225600000  # 2026-01-01T00:00:00Z, in Kafka's milliseconds
    produce_raw(kafka_broker, topic, [payment_message(f"old-{i}") for i in range(6)], timestamp=day)
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    produce_raw(kafka_broker, topic, [payment_message(f"new-{i}") for i in range(4)], timestamp=day + 86_400_000)

    conf = {"jobs": ["bronze_payments"], "mode": "reset-checkpoint", "from_timestamp": "2026-01-01T12:00:00Z"}
    dry = dagbag().dags["checkpoint_reset"].test(run_conf=conf)  # dry_run is the default
    assert dry.state == DagRunState.SUCCESS
    [row] = [r for r in checkpoint_audit.outcomes(settings) if r["actor"] == f"dag:checkpoint_reset/{dry.run_id}"]
    assert row["outcome"] == "dry-run" and "produced at or after 2026-01-01T12:00:00Z" in row["detail"], row
    assert f"{topic} up to offsets" in row["detail"], row

    def payment_ids() -> list[str]:
        return sorted(r["payment_id"] for r in delta_store.read_table(settings.layout.table("bronze/payments"))
                      .to_pylist())

    apply(spark, settings, registry, CheckpointRequest("reset-checkpoint", ("bronze_payments",),
                                                       options={"from_timestamp": "2026-01-01T12:00:00Z"}))
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    assert payment_ids() == sorted([f"old-{i}" for i in range(6)] + [f"new-{i}" for i in range(4)])

    produce_raw(kafka_broker, topic, [payment_message(f"unread-{i}") for i in range(3)])  # not read: from latest on
    apply(spark, settings, registry, CheckpointRequest("reset-checkpoint", ("bronze_payments",),
                                                       options={"from_latest": True}))
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    produce_raw(kafka_broker, topic, [payment_message(f"latest-{i}") for i in range(2)])
    run_job(spark, settings, registry, "bronze_payments", AVAILABLE_NOW)
    ids = payment_ids()
    assert not any(i.startswith("unread-") for i in ids) and [i for i in ids if i.startswith("latest-")] == [
        "latest-0", "latest-1"]
    assert len(ids) == len(set(ids)) == 12


def test_a_new_field_in_kafka_messages_is_rescued_then_evolves_without_reading_the_topic_again(
        spark, settings, kafka_registry, kafka_broker, raw, tmp_path, lakehouse_env):
    """A producer starts sending `method`: bronze keeps it in `_rescued`; once the registry names it, the plan is
    `evolve`, the next runs add the column and read only the new messages (every message once), and silver follows."""
    import copy
    import json

    from include.checkpoints.plan import plan_job

    registry, topic = kafka_registry
    produce(kafka_broker, topic, events=300, seed=61)  # one batch of bronze with the 40 below (150 a batch)

    def with_method(prefix: str, hour: int, count: int) -> list[bytes]:
        """Payments an hour after the others, seconds apart: none is behind silver's watermark."""
        return [json.dumps({"payment_id": f"{prefix}-{n}", "order_id": f"o-{prefix}-{n}", "amount": 2.5,
                            "payment_time": f"2026-01-01T{hour:02d}:00:{n:02d}Z", "method": "card" if n % 2 else
                            "wallet"}).encode() for n in range(count)]

    produce_raw(kafka_broker, topic, with_method("early", 3, 40))
    for job_id in ("bronze_payments", "silver_payments"):
        run_job(spark, settings, registry, job_id, AVAILABLE_NOW)
    bronze = delta_store.read_table(settings.layout.table("bronze/payments")).to_pylist()
    rescued = {r["payment_id"]: json.loads(r["_rescued"]) for r in bronze if r["_rescued"]}
    assert rescued == {f"early-{n}": {"method": "card" if n % 2 else "wallet"} for n in range(40)}
    [check] = run_quality(settings, registry, ["bronze/payments"]).results  # the check names the new field
    assert not check.success and json.loads(check.observed_value)["fields"] == {"method": 40}

    declared = copy.deepcopy(raw)
    declared["sources"]["payments"]["schema"]["method"] = "string"
    evolved = saved_registry(declared, tmp_path / "with_method.yaml", lakehouse_env)
    assert {j: plan_job(evolved.job(j), evolved, settings.layout.checkpoint(j), settings=settings).mode
            for j in ("bronze_payments", "silver_payments")} == {"bronze_payments": "evolve", "silver_payments": "evolve"}
    read_before = messages_read(settings)
    produce_raw(kafka_broker, topic, with_method("late", 4, 30))
    for job_id in ("bronze_payments", "silver_payments"):
        run_job(spark, settings, evolved, job_id, AVAILABLE_NOW)

    assert_every_message_once(settings, kafka_broker, topic)  # nothing read twice, nothing skipped
    assert messages_read(settings) == read_before + 30
    bronze = {r["payment_id"]: r for r in delta_store.read_table(settings.layout.table("bronze/payments")).to_pylist()}
    assert {p: r["method"] for p, r in bronze.items() if p.startswith("late-")} == {
        f"late-{n}": "card" if n % 2 else "wallet" for n in range(30)}
    assert all(r["method"] is None for p, r in bronze.items() if not p.startswith("late-"))
    assert all(r["_rescued"] is None for p, r in bronze.items() if p.startswith("late-"))
    silver = delta_store.read_table(settings.layout.table("silver/payments")).to_pylist()
    assert sum(r["method"] is not None for r in silver) == 30 and sum(r["_rescued"] is not None for r in silver) == 40

    # the history completed from _rescued by the command, in bronze and silver; the next messages flow on
    env = {**lakehouse_env, "LAKEHOUSE_REGISTRY": str(tmp_path / "with_method.yaml")}
    filled = run_cli(["schema", "backfill", "bronze_payments"], env)
    assert filled.returncode == 0, filled.stderr[-2000:]
    assert "bronze/payments method: filled 40 rows" in filled.stdout and "silver/payments method: filled 40 rows" in \
        filled.stdout, filled.stdout
    produce_raw(kafka_broker, topic, with_method("later", 5, 10))
    for job_id in ("bronze_payments", "silver_payments"):
        run_job(spark, settings, evolved, job_id, AVAILABLE_NOW)
    assert_every_message_once(settings, kafka_broker, topic)
    assert messages_read(settings) == read_before + 40
    for table in ("bronze/payments", "silver/payments"):
        rows = delta_store.read_table(settings.layout.table(table)).to_pylist()
        assert {r["payment_id"]: r["method"] for r in rows if r["payment_id"].startswith(("early-", "late-", "later-"))} == {
            f"{prefix}-{n}": "card" if n % 2 else "wallet" for prefix, count in (("early", 40), ("late", 30),
                                                                                  ("later", 10)) for n in range(count)}
        assert not any(r["_rescued"] for r in rows), table
