"""Where everything lives under `LAKEHOUSE_ROOT` (a local directory or an S3 prefix: storage paths,
include/storage/paths.py) and under this host's own directory (`local`, LAKEHOUSE_LOCAL_DIR: the root itself when
it is local): the one place these paths are built.

Under the root:

    landing/<source>/             landing files (the registry's source `path`)
    <layer>/<table>/              Delta tables (registry table names such as `bronze/clickstream`)
    _checkpoints/<job>/           a job's Structured Streaming checkpoint
    _checkpoints/<job>.lease      its one-writer lease (beside the checkpoint: a reset keeps it)
    _checkpoints/<job>.reset-<n>/ a checkpoint a reset moved aside (numbered; never deleted in place)
    _checkpoints/_actions/<id>.json the journal of a checkpoint action until it finishes
    _ops/<table>/                 operational Delta tables (query_progress, alerts, dq_results)
    _ops/heartbeats/<job>.json    a running job's heartbeat
    _ops/stop_requests/<job>.json a request to stop at the next batch boundary
    _ops/start_requests/<job>.json a request to a group's running driver to start one of its jobs
    _ops/groups/<group>.lease     the one driver of a group of live jobs (include/records/groups.py)
    _ops/supervisor/<job>.json    the live supervisor's bookkeeping
    _ops/run_outcomes/<run>/<job>.json how each job of a several-job driver run ended (the backfill's `run_jobs`)
    _reports/data_docs/           Great Expectations Data Docs
    _reports/gx/                  the GE project the quality runs use
    _reports/health/              the pipeline-health report (include/ops/health_report.py)

Under this host's directory (`local`, always a local path):
    _ops/logs/<job>.log           the output of a live job started here by the supervisor (a group's: <group>.log)
    _ops/groups/starting.lock     held while a live driver's JVM starts on this host
    _reports/demo/                `lakehouse demo`'s Airflow log
    _kafka/                       the broker `lakehouse kafka up` starts: data/ (its log segments), broker.log
    _cluster/                     `lakehouse cluster`: postgres/, airflow/, spark/, logs/, run/ (include/cluster)
    _s3/                          the S3 server `lakehouse storage up` starts: data/, server.log (include/storage/server.py)
    _cdc/                         `lakehouse cdc up` (include/cdc): postgres/ (the local database), connect/ (the Connect
                                  worker's properties, log, pid file), secrets.json, shop/ (the generator's transactions)
    _work/                        working copies of what lives on an S3 root (the GE project)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from include.storage.paths import StoragePath


@dataclass(frozen=True)
class Layout:
    root: StoragePath
    local: Path  # this host's own directory

    def landing(self, source_path: str) -> StoragePath:
        """A landing source's directory; `source_path` is the registry's (relative to the root)."""
        return self.root / source_path

    def table(self, name: str) -> StoragePath:
        """A Delta table by registry name (``bronze/clickstream``, ``_ops/alerts``)."""
        return self.root / name

    @property
    def checkpoints(self) -> StoragePath:
        return self.root / "_checkpoints"

    def checkpoint(self, job_id: str) -> StoragePath:
        return self.checkpoints / job_id

    def archived_checkpoint(self, job_id: str, number: int) -> StoragePath:
        return self.root / "_checkpoints" / f"{job_id}.reset-{number}"

    def archived_checkpoints(self, job_id: str) -> list[StoragePath]:
        """The checkpoints resets moved aside, oldest first."""
        found = (self.root / "_checkpoints").glob(f"{job_id}.reset-*")
        return sorted((p for p in found if p.name.rsplit("-", 1)[1].isdigit()),
                      key=lambda p: int(p.name.rsplit("-", 1)[1]))

    def lease(self, job_id: str) -> StoragePath:
        return self.root / "_checkpoints" / f"{job_id}.lease"

    def ops_table(self, name: str) -> StoragePath:
        return self.root / "_ops" / name

    def heartbeat(self, job_id: str) -> StoragePath:
        return self.root / "_ops" / "heartbeats" / f"{job_id}.json"

    def job_request(self, kind: str, job_id: str) -> StoragePath:
        """A `stop` or `start` request for the job (include/records/job_requests.py)."""
        return self.root / "_ops" / f"{kind}_requests" / f"{job_id}.json"

    def group_lease(self, group: str) -> StoragePath:
        return self.root / "_ops" / "groups" / f"{group}.lease"

    @property
    def live_start_lock(self) -> Path:
        """Held while a live driver's JVM starts (include/ops/admission.py)."""
        return self.local / "_ops" / "groups" / "starting.lock"

    def supervisor_state(self, job_id: str) -> StoragePath:
        return self.root / "_ops" / "supervisor" / f"{job_id}.json"

    def job_log(self, job_id: str) -> Path:
        return self.local / "_ops" / "logs" / f"{job_id}.log"

    def run_outcomes(self, run_key: str) -> StoragePath:
        """The outcomes of one several-job driver run (`lakehouse run --outcomes`), e.g. a backfill DAG run's."""
        return self.root / "_ops" / "run_outcomes" / quote(run_key, safe="")

    @property
    def reports(self) -> StoragePath:
        return self.root / "_reports"

    @property
    def data_docs(self) -> StoragePath:
        return self.reports / "data_docs"

    @property
    def health_report(self) -> StoragePath:
        return self.reports / "health"

    @property
    def health_report_index(self) -> StoragePath:
        return self.health_report / "index.html"

    @property
    def gx_project(self) -> StoragePath:
        return self.reports / "gx"

    @property
    def demo_log(self) -> Path:
        return self.local / "_reports" / "demo" / "airflow.log"

    @property
    def kafka(self) -> Path:
        return self.local / "_kafka"

    @property
    def catalog(self) -> Path:
        """The Hive metastore `lakehouse catalog up` runs: its Derby database, configuration, log."""
        return self.local / "_catalog"

    @property
    def sql_endpoint(self) -> Path:
        """The SQL endpoint `lakehouse sql up` runs: its log, pid file and the password it made."""
        return self.local / "_sql"

    @property
    def cluster(self) -> Path:
        return self.local / "_cluster"

    @property
    def monitor(self) -> Path:
        """What `lakehouse monitor up` runs: Prometheus' and Alertmanager's configuration, rules and data, logs."""
        return self.local / "_monitor"

    @property
    def cdc(self) -> Path:
        """The change data capture `lakehouse cdc up` runs: the local database, the Connect worker (include/cdc)."""
        return self.local / "_cdc"

    @property
    def spark_warehouse(self) -> Path:
        return self.local / "_spark_warehouse"

    @property
    def s3_server(self) -> Path:
        return self.local / "_s3"

    @property
    def work(self) -> Path:
        """Working copies of what lives on an S3 root (a local root needs none)."""
        return self.local / "_work"
