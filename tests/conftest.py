"""Shared fixtures: one SparkSession for the whole test session, a fresh lakehouse root per test, and one demo
lakehouse per session for the tests that only read it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from include.registry import load_registry
from include.settings import Settings, load_settings
from tests.support.kafka import delete_topics

LINEAGE_TOPIC = "lakehouse.lineage"  # LAKEHOUSE_LINEAGE_TOPIC's default, the registry's `lineage` source (test_lineage)

# how the workers share the suite; its CPU; the CDC chain's session fixture (`cdc_chain`)
pytest_plugins = ["tests.support.scheduling", "tests.support.cpu_profile", "tests.support.cdc"]


@pytest.fixture
def settings(tmp_path):
    """Settings rooted in a fresh directory; also exported for subprocesses via `lakehouse_env`."""
    return replace(load_settings(), root=tmp_path / "lakehouse")


@pytest.fixture
def lakehouse_env(settings):
    env = dict(os.environ)
    env["LAKEHOUSE_ROOT"] = str(settings.root)
    env["PYSPARK_PYTHON"] = sys.executable
    env["AIRFLOW_HOME"] = str(settings.root.parent / "airflow_home")
    env.pop("LAKEHOUSE_TEST_KILL_AT", None)
    env.pop("LAKEHOUSE_BATCH_HOOKS", None)
    return env


@pytest.fixture
def raw():
    """The real registry document, parsed but not validated (tests mutate it)."""
    import yaml

    return yaml.safe_load(load_settings().registry_path.read_text())


@pytest.fixture(scope="session")
def registry():
    return load_registry(load_settings().registry_path)


@pytest.fixture
def small_batch_registry(raw, tmp_path, lakehouse_env):
    """The registry with backfills admitted as live runs are (2 landing files, 1 upstream commit per batch):
    several micro-batches per run, for tests about what happens between them. Subprocesses get it too."""
    from tests.support.helpers import saved_registry

    raw["defaults"]["backfill"] = {"max_files_per_trigger": 1}
    raw["jobs"]["bronze_clickstream"]["source"]["backfill"] = {"max_files_per_trigger": 2}
    return saved_registry(raw, tmp_path / "small_batches.yaml", lakehouse_env)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from include.spark_session import get_spark

    # This long-lived driver runs most of the suite's batches, on small data: like the job processes, it compiles
    # with C1 alone (LAKEHOUSE_SPARK_JAVA_OPTIONS, pytest_configure); C2's compiler threads cost 15% more CPU of
    # the two cores (tests/test_pipeline, test_checkpoints, test_joins, test_stateful: 418 s -> 357 s)
    settings = replace(load_settings(), root=tmp_path_factory.mktemp("spark"))
    session = get_spark(settings, app_name="lakehouse-tests")
    yield session
    session.stop()


def pytest_configure(config):
    """Quiet py4j, and point Airflow at a throwaway home before anything imports it."""
    import logging
    import tempfile

    logging.getLogger("py4j").setLevel(logging.WARNING)
    # The Spark drivers of the suite (and the cluster's executors) run small data: C1 alone compiles what they run
    # sooner than tiered C1 + C2 on 2 cores (a five-job backfill: 29 s of CPU -> 16 s), and the serial collector
    # costs less than G1's threads (a three-job `lakehouse run`: 10% fewer CPU-s in each of ten pairs). The product's
    # defaults are unchanged.
    from include.registry.specs import JIT_OPTIONS

    java_options = f"{JIT_OPTIONS['c1']} -XX:+UseSerialGC"
    os.environ.setdefault("LAKEHOUSE_SPARK_JAVA_OPTIONS", java_options)
    os.environ.setdefault("LAKEHOUSE_SPARK_EXECUTOR_JAVA_OPTIONS", java_options)  # the cluster's, likewise
    # The suite's registry: the shipped one with 2 state partitions, not 4 (tests/support/suite_registry.py); every
    # process the suite starts inherits it, but `lakehouse demo`, which runs the registry as shipped.
    from tests.support.suite_registry import write_suite_registry

    os.environ["LAKEHOUSE_REGISTRY"] = str(write_suite_registry(Path(tempfile.mkdtemp(prefix="lakehouse-registry-"))))
    # The `lakehouse` commands the tests start (the entry point, as a person runs it) import the tests' batch hooks
    # (LAKEHOUSE_BATCH_HOOKS=tests.support.kill_hooks:...) from the repository, as a person's own hooks would be found
    from tests.support.helpers import REPO

    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), *paths) if p)
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # under `-n`: each worker process has its own metadata DB
    if "AIRFLOW_HOME" not in os.environ or os.environ.get("CI") or worker:
        os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix=f"lakehouse-airflow-{worker or 'main'}-")
    from include.airflow.environment import airflow_environment

    env = airflow_environment(load_settings())
    for key, value in env.items():
        if key.startswith("AIRFLOW"):
            os.environ[key] = value
    # The session's Kafka broker (the `kafka_broker` fixture starts it when a test first needs it) listens on free ports
    # of its own: one per xdist worker (a worker inherits its controller's environment: chosen again here), never a
    # broker the developer runs (the tests delete topics).
    from include.kafka.broker import free_port_pair

    os.environ["LAKEHOUSE_KAFKA_BOOTSTRAP"] = f"127.0.0.1:{free_port_pair()}"
    # Likewise the session's S3 server (the `s3_server` fixture starts it when a test first needs it): its own ports,
    # and credentials of its own, which every process the suite starts inherits.
    from tests.support.s3 import free_s3_port

    os.environ["LAKEHOUSE_S3_ENDPOINT"] = f"http://127.0.0.1:{free_s3_port()}"
    # The catalog: a port of its own where nothing answers (every driver runs without a catalog, warned once) unless a
    # test starts one there; never a metastore the developer runs.
    from include.daemons import free_port_block

    os.environ["LAKEHOUSE_METASTORE_URI"] = f"thrift://127.0.0.1:{free_port_block([0])}"
    # The CDC chain a test or `lakehouse demo` starts (the local database, the Connect worker): ports of their own per
    # worker, never a chain the developer runs
    os.environ["LAKEHOUSE_CDC_POSTGRES_PORT"] = str(free_port_block([0]))
    os.environ["LAKEHOUSE_CONNECT_URL"] = f"http://127.0.0.1:{free_port_block([0])}"
    # OpenLineage events: none, but in the tests of lineage and the demo's (a topic of their own on the session's
    # broker): a driver sending them to a broker that is not started would wait for it (include/lineage/emitter.py)
    os.environ["LAKEHOUSE_LINEAGE"] = "off"
    os.environ["AWS_ACCESS_KEY_ID"] = f"lakehouse-tests-{worker or 'main'}"
    os.environ["AWS_SECRET_ACCESS_KEY"] = uuid.uuid4().hex
    # Each test's DAGs point at its own lakehouse root: dag.test() must store the new serialized DAG
    # even when the previous test stored one seconds ago (Airflow throttles that to every 30 s).
    os.environ["AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL"] = "0"


@pytest.fixture(scope="session")
def airflow_db():
    """An Airflow metadata DB (SQLite) migrated once per test session."""
    import subprocess

    from include.airflow.environment import airflow_command

    result = subprocess.run(airflow_command() + ["db", "migrate"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture
def payments_topic(kafka_broker) -> str:
    """The default registry's `payments` topic, empty: deleted with what an earlier test of the worker produced, and
    created again with 3 partitions."""
    from include.kafka.produce import ensure_topic

    delete_topics(kafka_broker, ["payments"])
    ensure_topic(kafka_broker, "payments", 3)
    return "payments"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> str:
    """A real Kafka broker for the session, started and stopped by `lakehouse kafka up` / `down`; its bootstrap."""
    from tests.support.helpers import run_cli

    env = {**os.environ, "LAKEHOUSE_ROOT": str(tmp_path_factory.mktemp("kafka") / "lakehouse")}
    up = run_cli(["kafka", "up"], env, timeout=180)
    assert up.returncode == 0, up.stderr[-3000:]
    bootstrap = up.stdout.strip()
    assert bootstrap == os.environ["LAKEHOUSE_KAFKA_BOOTSTRAP"], up.stdout
    yield bootstrap
    down = run_cli(["kafka", "down"], env, timeout=120)
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> str:
    """A real S3 server (SeaweedFS) for the session, started and stopped by `lakehouse storage up` / `down`; its
    endpoint. Its data lives under the session's temporary directory."""
    from tests.support.helpers import run_cli
    from tests.support.s3 import BUCKET

    env = {**os.environ, "LAKEHOUSE_ROOT": f"s3://{BUCKET}/session",
           "LAKEHOUSE_LOCAL_DIR": str(tmp_path_factory.mktemp("s3server"))}
    up = run_cli(["storage", "up"], env, timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr[-3000:]
    yield os.environ["LAKEHOUSE_S3_ENDPOINT"]
    down = run_cli(["storage", "down"], env, timeout=120)
    assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr


@pytest.fixture
def s3_settings(s3_server, tmp_path) -> Settings:
    """Settings rooted in a fresh prefix of the session's S3 bucket; this host's own files under the test's tmp_path."""
    from tests.support.s3 import BUCKET

    return replace(load_settings(), root=f"s3://{BUCKET}/{tmp_path.name}-{uuid.uuid4().hex[:6]}",
                   local_dir=tmp_path / "local")


@pytest.fixture
def s3_env(s3_settings) -> dict:
    """The environment of a subprocess working on `s3_settings`' lakehouse."""
    env = {**os.environ, **s3_settings.storage_environment(), "PYSPARK_PYTHON": sys.executable}
    for name in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS"):
        env.pop(name, None)
    return env


@dataclass(frozen=True)
class DemoRun:
    settings: Settings
    env: dict
    result: subprocess.CompletedProcess  # `lakehouse demo`'s exit code, stdout and stderr
    run_id: str  # the lakehouse_backfill run it made, in this session's Airflow metadata DB
    messages: dict[str, int]  # the messages it produced, per Kafka source (counted on the topic right after)


@pytest.fixture(scope="session")
def demo(tmp_path_factory, airflow_db, kafka_broker) -> DemoRun:
    """`lakehouse demo` once per session: every source generated, the whole `lakehouse_backfill` DAG run through
    Airflow (a spark-submit per job: the launch path), quality and the health report. The tests that only read
    its lakehouse share it (tests/test_demo.py); none may change it. It runs the registry as shipped (4 state
    partitions), as `make demo` does."""
    from tests.support.helpers import run_cli
    from tests.support.suite_registry import SHIPPED_REGISTRY

    root = tmp_path_factory.mktemp("demo") / "lakehouse"
    env = {**os.environ, "LAKEHOUSE_ROOT": str(root), "PYSPARK_PYTHON": sys.executable,
           "LAKEHOUSE_LINEAGE": "kafka"}  # the default transport, which the registry's ops_lineage reads
    for name in ("LAKEHOUSE_TEST_KILL_AT", "LAKEHOUSE_BATCH_HOOKS", "LAKEHOUSE_REGISTRY", "LAKEHOUSE_LINEAGE_TOPIC"):
        env.pop(name, None)
    delete_topics(kafka_broker, ["payments", LINEAGE_TOPIC])  # the demo's payments and lineage alone on their topics
    from airflow.models.asset import AssetActive
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    with create_session() as session:  # the demo's Assets (its lakehouse's tables) become the active ones
        session.execute(delete(AssetActive))
    result = run_cli(["demo", "--events", "1500", "--files", "3", "--seed", "51"], env, timeout=1200)

    with create_session() as session:
        run_id = session.scalar(select(DagRun.run_id).where(DagRun.dag_id == "lakehouse_backfill")
                                .order_by(DagRun.id.desc()).limit(1))
    from include.kafka.offsets import topic_ranges

    on_topic = topic_ranges(kafka_broker, ("payments",))["payments"]
    return DemoRun(replace(load_settings(), root=root, registry_path=SHIPPED_REGISTRY), env, result, run_id or "",
                   {"payments": sum(r.latest - r.earliest for r in on_topic)})


@pytest.fixture
def lakehouse_root(settings, monkeypatch):
    """DAG files read the settings at parse time: point them at this test's lakehouse."""
    monkeypatch.setenv("LAKEHOUSE_ROOT", str(settings.root))
    return settings.root


@pytest.fixture
def fresh_assets(lakehouse_root, airflow_db):
    """Let this test's Assets become active in the shared metadata DB.

    Assets are named after their table and point at this test's lakehouse root; Airflow activates an
    asset only when no active one has its name, so an earlier test's assets would shadow these. A
    running scheduler deactivates assets no DAG references any more (its orphanage pass); dag.test()
    runs none, so this fixture does that step.
    """
    from airflow.models.asset import AssetActive
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    with create_session() as session:
        session.execute(delete(AssetActive))
    return lakehouse_root
