"""docker-compose.yaml cannot run here (no Docker engine): parse it and cross-check it with the repo; and what of
`lakehouse cluster` needs no process (its settings, its messages; the cluster itself: tests/test_cluster.py)."""

from __future__ import annotations

import json
import socket

import pytest
import yaml

from tests.support.helpers import REPO


def load_compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def test_services_reference_what_exists():
    compose = load_compose()
    services = compose["services"]
    assert {"postgres", "airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
            "airflow-triggerer", "spark-master", "spark-worker"} <= set(services)
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in compose["volumes"], f"{name} uses undeclared volume {source}"
        if "build" in service:
            assert (REPO / service["build"] / "Dockerfile").exists()


def test_airflow_and_spark_agree():
    services = load_compose()["services"]
    env = services["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/lakehouse/app/dags"
    assert "./dags:/opt/lakehouse/app/dags:ro" in services["airflow-scheduler"]["volumes"]
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    connection = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert connection["conn_type"] == "spark"
    assert connection["host"] == env["LAKEHOUSE_SPARK_MASTER"] == "spark://spark-master:7077"
    assert "7077:7077" in services["spark-master"]["ports"]
    assert "spark://spark-master:7077" in " ".join(services["spark-worker"]["command"])


def test_airflow_components_restart_as_under_the_clusters_keeper():
    """Airflow's components exit when PostgreSQL goes away: restarted by Docker here, by include/daemons/keeper.py
    under `lakehouse cluster` (include/cluster/airflow_services.py)."""
    from include.cluster.airflow_services import COMPONENTS

    services = load_compose()["services"]
    for component in COMPONENTS:
        service = "airflow-apiserver" if component == "api-server" else f"airflow-{component}"
        assert services[service].get("restart") == "always", service
    from include.cluster.airflow_services import HISTORY_COMMAND

    history = services["airflow-history"]  # runs what the cluster's `history` part runs, on the same settings
    assert history["command"] == ["lakehouse", *HISTORY_COMMAND]
    assert history["environment"] is services["airflow-scheduler"]["environment"]
    assert "airflow-home:/opt/airflow" in history["volumes"]  # the task logs it deletes


def test_image_installs_the_pinned_requirements_and_delta_jars():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY requirements.txt" in dockerfile and "pip install --no-cache-dir -r requirements.txt" in dockerfile
    assert "openjdk-17" in dockerfile and "delta-spark_4.2_2.13-${DELTA_VERSION}.jar" in dockerfile
    pom = (REPO / "include" / "jars" / "pom.xml").read_text()
    assert "<artifactId>delta-spark_4.2_2.13</artifactId>" in pom and "delta-storage" in pom
    pins = dict(line.split("==") for line in (REPO / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert 'ARG DELTA_VERSION=' + pins["delta_spark"] in dockerfile
    assert f"<version>{pins['delta_spark']}</version>" in pom  # the Python package and the jars match


def test_kafka_service_is_the_connection_the_jobs_use():
    compose = load_compose()
    services, env = compose["services"], compose["services"]["airflow-scheduler"]["environment"]
    kafka = services["kafka"]["environment"]
    assert kafka["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    connection = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])
    assert connection["conn_type"] == "kafka"
    assert connection["extra"]["bootstrap.servers"] == env["LAKEHOUSE_KAFKA_BOOTSTRAP"] == "kafka:9092"
    embedded = json.loads((REPO / "include" / "airflow" / "connections.json").read_text())["kafka_default"]
    assert embedded["conn_type"] == "kafka" and set(embedded["extra"]) == set(connection["extra"])
    pom = (REPO / "include" / "jars" / "pom.xml").read_text()
    dockerfile = (REPO / "Dockerfile").read_text()
    for artifact in ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients",
                     "commons-pool2"):
        assert f"<artifactId>{artifact}</artifactId>" in pom and artifact in dockerfile


def test_the_lakehouse_lives_on_the_storage_service_as_lakehouse_storage_runs_it():
    """No volume is shared between machines: every part reaches the lakehouse on the S3 server, started as
    `lakehouse storage up` starts it (include/objectstore/server.py), from the image's pinned `weed`."""
    from include.objectstore.server import ServerFiles, command

    services = load_compose()["services"]
    env = services["airflow-scheduler"]["environment"]
    assert env["LAKEHOUSE_ROOT"].startswith("s3://") and env["LAKEHOUSE_S3_ENDPOINT"] == "http://storage:8333"
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(env)
    storage = services["storage"]["command"]
    ours = command(ServerFiles(REPO / "x"), "storage", 8333, ["lakehouse"])
    shared = {a for a in ours if a.startswith(("-s3.port.iceberg", "-s3.port.lance", "-webdav", "-admin.ui",
                                               "-master.telemetry"))}
    assert storage[:2] == ["weed", "mini"] and shared <= set(storage) and "-bucket=lakehouse" in storage
    assert env["LAKEHOUSE_ROOT"].removeprefix("s3://").split("/")[0] == "lakehouse"
    assert all("storage" in services[s].get("depends_on", {}) for s in ("airflow-init",))
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "include/objectstore/seaweedfs.txt" in dockerfile and "--require-hashes" in dockerfile
    for artifact in ("hadoop-aws", "bundle", "analyticsaccelerator-s3"):
        assert f"<artifactId>{artifact}</artifactId>" in (REPO / "include" / "jars" / "pom.xml").read_text()
        assert artifact in dockerfile


def test_compose_and_lakehouse_cluster_share_their_settings(tmp_path):
    """One source: include/cluster/topology.py. The compose file sets the shared settings to the same values and
    every deployment-specific one; its connections are the ones `lakehouse cluster` writes, on its own hosts."""
    from include.cluster.topology import (
        DEPLOYMENT_AIRFLOW_SETTINGS,
        SHARED_AIRFLOW_SETTINGS,
        WORKER_CORES,
        WORKER_MEMORY,
        Ports,
        Topology,
        airflow_settings,
        cluster_connections,
    )

    compose = load_compose()
    services = compose["services"]
    env = services["airflow-scheduler"]["environment"]
    top = Topology(tmp_path, Ports())
    cluster = airflow_settings(top)
    for name, value in SHARED_AIRFLOW_SETTINGS.items():
        assert env[name] == cluster[name] == value, name
    for name in DEPLOYMENT_AIRFLOW_SETTINGS:
        assert env.get(name), f"docker-compose.yaml does not set {name}"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].endswith("/execution/")
    assert cluster["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].endswith("/execution/")
    assert "${AIRFLOW_JWT_SECRET" in env["AIRFLOW__API_AUTH__JWT_SECRET"]  # one secret, from .env, for all
    for component in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                      "spark-master", "spark-worker"):
        assert services[component]["environment"] is services["airflow-scheduler"]["environment"], component
        assert not any("/opt/lakehouse/data" in v for v in services[component]["volumes"]), component  # no shared disk
        assert "healthcheck" in services[component] or component == "spark-worker", component
    assert "healthcheck" in services["kafka"] and "healthcheck" in services["postgres"]

    project = json.loads((REPO / "include" / "airflow" / "connections.json").read_text())
    written = cluster_connections(project, top)
    composed = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert composed["extra"] == written["spark_default"]["extra"] == {"deploy-mode": "client"}
    assert written["spark_default"]["host"] == top.spark_master and composed["host"].endswith(":7077")
    worker = " ".join(services["spark-worker"]["command"])
    assert f"--cores {WORKER_CORES}" in worker and f"--memory {WORKER_MEMORY}" in worker
    assert services["airflow-init"]["command"] == ["lakehouse", "airflow-setup"]  # the pool, as the cluster makes it


def test_the_cluster_ports_setting_takes_three_or_four_ports_and_names_a_bad_value():
    from include.cluster.topology import SPARK_MASTER_PORT, Ports

    assert Ports.parse("") == Ports()
    assert Ports.parse("5500,8300,8200") == Ports(5500, 8300, SPARK_MASTER_PORT, 8200)
    assert Ports.parse("5500,8300,8200,7100") == Ports(5500, 8300, 7100, 8200)
    for bad in ("5500,8300", "5500,8300,8200,7100,1", "5500,x,8200"):
        with pytest.raises(ValueError, match=rf"LAKEHOUSE_CLUSTER_PORTS='{bad}': expected three or four ports"):
            Ports.parse(bad)


def test_the_catalog_service_is_the_uri_every_driver_uses_on_its_own_database():
    from include.settings import metastore_host_port, postgres_address

    services = load_compose()["services"]
    env = services["airflow-scheduler"]["environment"]
    metastore = services["metastore"]
    assert metastore_host_port(env["LAKEHOUSE_METASTORE_URI"]) == ("metastore", 9083)
    assert metastore["command"] == ["lakehouse", "catalog", "serve"] and "9083:9083" in metastore["ports"]
    database = postgres_address(metastore["environment"]["LAKEHOUSE_METASTORE_DB"])
    assert (database.host, database.database, database.user) == ("postgres", "metastore", "metastore")
    init = (REPO / "include" / "cluster" / "postgres-init.sql").read_text()
    assert f"CREATE ROLE metastore LOGIN PASSWORD '{database.password}'" in init
    assert "CREATE DATABASE metastore OWNER metastore" in init
    mounted = [v for v in services["postgres"]["volumes"] if "postgres-init.sql" in v]
    assert mounted and mounted[0].startswith("./include/cluster/postgres-init.sql:/docker-entrypoint-initdb.d/")


def test_a_taken_port_of_a_spark_daemon_is_named_with_the_setting_that_moves_it():
    from include.cluster.manager import ClusterError, _require_free
    from include.daemons import free_port_block

    with socket.socket() as holder:
        port = free_port_block([0])
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(ClusterError) as taken:
            _require_free("spark-master UI", port)
    assert str(taken.value) == (f"spark-master UI: port {port} on 127.0.0.1 is taken by another program (free it, or "
                                "set LAKEHOUSE_CLUSTER_PORTS=postgres,airflow,spark_ui[,spark_master])")
    _require_free("spark-master UI", port)  # free again: no error


def test_ports_chosen_in_one_process_never_coincide_before_their_servers_listen():
    """A test chooses the ports of several servers before any listens (a cluster: its S3 server's ten, then the others
    for `cluster up`): 300 blocks like the S3 server's (a port and its gRPC port 10,000 above), none bound, none shared."""
    from include.daemons import free_port_block

    chosen = [p + offset for p in (free_port_block([0, 10_000]) for _ in range(300)) for offset in (0, 10_000)]
    assert len(set(chosen)) == len(chosen)


def test_ports_chosen_by_processes_at_once_never_coincide():
    """Two living processes (the suite's workers) choose 150 S3-like blocks each at the same time: none shared. Each
    lives on until both have chosen: a chooser's claims end with it (the ports are free to choose again then)."""
    import json
    import subprocess
    import sys

    from tests.support.helpers import REPO

    code = ("import json, sys; from include.daemons import free_port_block; print(json.dumps([p + o for p in "
            "(free_port_block([0, 10_000]) for _ in range(150)) for o in (0, 10_000)]), flush=True); sys.stdin.read()")
    choosers = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for _ in range(2)]
    try:
        first, second = (set(json.loads(chooser.stdout.readline() or "[]")) for chooser in choosers)
    finally:
        for chooser in choosers:
            chooser.stdin.close()
            chooser.wait(timeout=120)
    assert len(first) == len(second) == 300 and not first & second, sorted(first & second)


def test_the_cdc_services_run_the_chain_as_lakehouse_cdc_does():
    """The captured database with logical decoding and the demo's tables (include/cdc/shop.sql), a Connect worker
    started as `lakehouse cdc serve` with the image's jars from the same pom, and `lakehouse cdc up` once both answer,
    on the URLs every service shares."""
    from include.addresses import http_host_port, postgres_address
    from include.cdc.database import LOCAL_DATABASE

    services = load_compose()["services"]
    env = services["airflow-scheduler"]["environment"]
    database = postgres_address(env["LAKEHOUSE_CDC_DATABASE_URL"], "LAKEHOUSE_CDC_DATABASE_URL")
    cdc_postgres = services[database.host]
    assert {"wal_level=logical", "max_replication_slots=10", "max_wal_senders=10"} <= set(cdc_postgres["command"])
    assert cdc_postgres["environment"] == {"POSTGRES_USER": database.user, "POSTGRES_PASSWORD": database.password,
                                           "POSTGRES_DB": database.database} and database.database == LOCAL_DATABASE
    assert "./include/cdc/shop.sql:/docker-entrypoint-initdb.d/shop.sql:ro" in cdc_postgres["volumes"]
    host, port = http_host_port("LAKEHOUSE_CONNECT_URL", env["LAKEHOUSE_CONNECT_URL"])
    assert services[host]["command"] == ["lakehouse", "cdc", "serve"] and f"{port}:{port}" in services[host]["ports"]
    assert services[host]["environment"] is env and "kafka" in services[host]["depends_on"]
    assert services["cdc-init"]["command"] == ["lakehouse", "cdc", "up"]
    assert set(services["cdc-init"]["depends_on"]) == {host, database.host}
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "LAKEHOUSE_CONNECT_JARS_DIR=/opt/lakehouse/connect" in dockerfile
    assert "-f /tmp/kafka-connect.pom.xml dependency:copy-dependencies -DincludeScope=runtime" in dockerfile


def test_the_monitor_service_runs_what_lakehouse_monitor_runs_on_the_settings_ports():
    """`lakehouse monitor serve` in the image (Debian's prometheus and prometheus-alertmanager installed as the
    bootstrap installs them), listening beyond the container on the ports the settings default to, its data kept."""
    from include.settings import SETTINGS

    monitor = load_compose()["services"]["monitor"]
    assert monitor["command"] == ["lakehouse", "monitor", "serve"]
    assert monitor["environment"]["LAKEHOUSE_METRICS_BIND"] == "0.0.0.0"
    assert monitor["environment"]["LAKEHOUSE_ROOT"] == load_compose()["services"]["airflow-scheduler"]["environment"][
        "LAKEHOUSE_ROOT"]  # the lakehouse the drivers write: their heartbeats say where each one is
    defaults = {s.name: s.default for s in SETTINGS}
    ports = [defaults[name] for name in ("LAKEHOUSE_PROMETHEUS_PORT", "LAKEHOUSE_ALERTMANAGER_PORT",
                                         "LAKEHOUSE_METRICS_PORT")]
    assert monitor["ports"] == [f"{port}:{port}" for port in ports]
    assert monitor["volumes"] == ["monitor-data:/opt/lakehouse/local/_monitor"]
    assert monitor["environment"]["LAKEHOUSE_LOCAL_DIR"] == "/opt/lakehouse/local"
    assert "prometheus prometheus-alertmanager" in (REPO / "Dockerfile").read_text()
    assert "prometheus prometheus-alertmanager" in (REPO / "Makefile").read_text()
