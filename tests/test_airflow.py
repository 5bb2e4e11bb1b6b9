"""The DAGs on real Airflow: DagBag parsing, the backfill DAG end to end with dag.test(), failures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import timedelta

import pytest

from include.generator import DEFAULT_START
from include.quality.suites import quality_tables
from include.records import lease
from include.registry import Trigger
from include.storage import delta as delta_store
from spark_jobs.streaming_query import run_job
from tests.support.airflow_dags import dagbag, stored_xcom
from tests.support.helpers import REPO, generate
from tests.support.suite_registry import SUITE_STATE_PARTITIONS

pytestmark = pytest.mark.airflow


def test_dagbag_parses_without_errors_and_light(registry):
    probe = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'great_expectations', 'deltalake'))
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
                  "heavy": heavy}))
"""
    out = subprocess.run([sys.executable, "-c", probe, str(REPO / "dags")], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip().splitlines()[-1]
    result = json.loads(out)
    assert result["errors"] == {}
    assert {"lakehouse_backfill", "lakehouse_live", "data_quality"} <= set(result["dags"])
    assert result["heavy"] == []  # how fast it parses: bench/dag_parse.py (a timed assertion fails on a busy machine)


def test_backfill_graph_follows_the_registry(registry, lakehouse_root):
    bag = dagbag()
    backfill = bag.dags["lakehouse_backfill"]
    assert [t.task_id for t in backfill.topological_sort()] == ["select_jobs", "run_jobs", *registry.order,
                                                                "quality_check", "health_report"]
    shared = backfill.get_task("run_jobs")  # one driver for the jobs that drain by themselves: every one here
    assert shared.upstream_task_ids == {"select_jobs"} and shared.job_ids == list(registry.order)
    assert shared.application.endswith("spark_jobs/entrypoints/run_job.py") and shared._conn_id == "spark_default"
    assert backfill.get_task("health_report").upstream_task_ids == set(registry.order)
    assert backfill.get_task("health_report").trigger_rule == "all_done"
    suites = quality_tables(registry)  # windows, sessions and joins
    gold_jobs = {j for j in registry.order if registry.job(j).sink.table in suites}
    assert backfill.get_task("quality_check").upstream_task_ids == set(registry.order)  # a failed job fails it
    assert gold_jobs and backfill.get_task("quality_check").trigger_rule == "none_failed"
    for job_id in registry.order:
        task = backfill.get_task(job_id)
        assert task.upstream_task_ids == {"run_jobs", *registry.upstream(job_id)}
        assert {a.name for a in task.outlets} == set(registry.job(job_id).tables_written())
        assert all(a.uri.startswith(f"file://{lakehouse_root}") for a in task.outlets)
        assert task.application_args == [job_id, "--trigger", "available-now"]
        assert task._conn_id == "spark_default"
    assert backfill.max_active_runs == 1 and not backfill.catchup
    live = bag.dags["lakehouse_live"]
    units = registry.live_units()  # the default registry's groups: 16 live jobs in 4 drivers
    assert units["clickstream_ingest"] == ["bronze_clickstream", "silver_clickstream"] and len(units) == 4
    supervised = {f"supervise_{u}" for u in units}
    assert {t.task_id for t in live.tasks} == supervised | {"health_report"}
    assert "`gold_user_sessions`" in live.get_task("supervise_clickstream_gold").doc_md
    assert live.get_task("health_report").upstream_task_ids == supervised
    quality = bag.dags["data_quality"]
    assert {t.task_id for t in quality.tasks} == {f"validate_{t.replace('/', '__')}" for t in suites} | {
        "gold_summary_by_name"}  # and the pattern of a task reading tables by name (tests/test_catalog.py)
    assert {"gold/user_sessions", "gold/order_payments"} <= set(suites)
    assert {a.name for a in quality.timetable.asset_condition.objects} == {
        registry.job(j).sink.table for j in gold_jobs}
    maintenance = bag.dags["lakehouse_maintenance"]
    [maintain] = maintenance.tasks
    assert maintain.application.endswith("spark_jobs/entrypoints/maintain_tables.py") and maintain._conn_id == "spark_default"
    assert maintenance.params.get_param("tables").schema["items"]["enum"] == registry.tables_written()
    from include.checkpoints.request import APPLIED_MODES

    reset = bag.dags["checkpoint_reset"]
    mode = reset.params.get_param("mode")  # nothing chosen when the form opens: no destructive default
    assert mode.value is None and mode.schema["enum"] == [None, *APPLIED_MODES]
    assert all(m in mode.schema["values_display"][m] for m in APPLIED_MODES)
    assert "(destroys state)" in mode.schema["values_display"]["full-refresh"]
    sections = {name: reset.params.get_param(name).schema["section"] for name in reset.params}
    assert sections["to_batch"].startswith("Only for rollback: ") and sections["cascade"].startswith(
        "Only for full-refresh: ") and sections["from_version"] == sections["from_latest"] == sections["from_timestamp"]
    assert reset.get_task("approve").defaults == ["Reject"]  # the safe answer, drawn apart from Approve
    for dag in bag.dags.values():  # the DAG list says what each one is for
        assert dag.description and len(dag.description) < 200, dag.dag_id
    # unpausing a scheduled DAG schedules its next tick, not an immediate run of the past interval
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction
    from airflow.utils import timezone

    for dag in (backfill, live, maintenance):
        scheduled = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the scheduler reads
        first = scheduled.timetable.next_dagrun_info(
            last_automated_data_interval=None,
            restriction=TimeRestriction(scheduled.start_date, scheduled.end_date, scheduled.catchup))
        assert first.run_after > timezone.utcnow(), dag.dag_id
    # list params are multi-selects with their choices visible (examples), optional where empty means "all/none"
    for dag, name, optional in ((backfill, "jobs", True), (live, "stop", True), (live, "start", True),
                                (maintenance, "tables", True), (bag.dags["checkpoint_reset"], "jobs", True)):
        schema = dag.params.get_param(name).schema
        assert schema["examples"] == schema["items"]["enum"] and schema["examples"], (dag.dag_id, name)
        assert ("null" in schema["type"]) == optional and "array" in schema["type"], (dag.dag_id, name)
        assert "empty" in dag.params.get_param(name).description or not optional, (dag.dag_id, name)
    for dag in (backfill, live, quality, maintenance, bag.dags["checkpoint_reset"]):
        assert dag.doc_md and dag.tags and "lakehouse" in dag.tags
        for task in dag.tasks:
            assert task.doc_md and task.owner == "data-platform"
            assert task.on_failure_callback
    assert all(t.retries >= 1 for t in backfill.tasks)
    spark_tasks = [*(backfill.get_task(j) for j in ("run_jobs", *registry.order)), *maintenance.tasks,
                   bag.dags["checkpoint_reset"].get_task("apply"), bag.dags["checkpoint_reset"].get_task("verify")]
    assert {t.pool for t in spark_tasks} == {"lakehouse_spark"}  # Spark drivers at once: the pool's slots
    # the report link is on the tasks that validate something, and only there
    linked = {t.task_id for dag in (backfill, quality) for t in dag.tasks if t.operator_extra_links}
    assert linked == {"quality_check", *(t.task_id for t in quality.tasks if t.task_id.startswith("validate_"))}
    assert quality.get_task("gold_summary_by_name").pool == "lakehouse_spark"


@pytest.mark.airflow
def test_the_demo_deactivates_its_tables_assets_active_at_another_root(settings, airflow_db):
    """A demo at a new root after one at another (the same Airflow home): Airflow activates an asset only when no
    active one has its name, so the earlier root's would leave this one's inactive and every job task failing (`airflow
    dags test` runs no scheduler to retire them); `forget_other_roots` retires those of the tables it names, only."""
    from dataclasses import replace

    from airflow.models.asset import AssetActive, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete, select

    from include.airflow.assets import table_asset
    from include.airflow.run_follower import forget_other_roots

    elsewhere = replace(settings, root=settings.root.parent / "earlier")
    kept = [("bronze/clickstream", table_asset(settings, "bronze/clickstream").uri),
            ("gold/alerts", table_asset(elsewhere, "gold/alerts").uri), ("reports", "file:///elsewhere/reports")]
    stale = ("silver/clickstream", table_asset(elsewhere, "silver/clickstream").uri)
    with create_session() as session:
        session.execute(delete(AssetActive))
        for name, uri in [*kept, stale]:  # an active asset is one of the assets Airflow knows
            if session.scalar(select(AssetModel.id).where(AssetModel.name == name, AssetModel.uri == uri)) is None:
                session.add(AssetModel(name=name, uri=uri, group="delta"))
        session.flush()
        session.add_all([AssetActive(name=n, uri=u) for n, u in [*kept, stale]])
    assert forget_other_roots(settings, ["bronze/clickstream", "silver/clickstream"]) == 1
    with create_session() as session:
        assert sorted(session.execute(select(AssetActive.name, AssetActive.uri)).all()) == sorted(kept)
        session.execute(delete(AssetActive))


@pytest.mark.spark
@pytest.mark.slow
def test_a_manual_run_of_a_subset_runs_only_those_jobs(settings, registry, fresh_assets):
    """The whole DAG end to end is tests/test_demo.py (one run per session); here the `jobs` param."""
    from airflow.utils.state import DagRunState, TaskInstanceState

    landed = generate(settings, events=300, seed=52, files=1)
    subset = dagbag().dags["lakehouse_backfill"].test(run_conf={"jobs": ["bronze_clickstream"]})
    assert subset.state == DagRunState.SUCCESS
    states = {ti.task_id: ti.state for ti in subset.get_task_instances()}
    assert states["bronze_clickstream"] == TaskInstanceState.SUCCESS
    assert {states[j] for j in registry.order if j != "bronze_clickstream"} == {TaskInstanceState.SKIPPED}
    tries = {ti.task_id: ti.try_number for ti in subset.get_task_instances()}  # 0: never started, held no slot
    assert tries["bronze_clickstream"] == 1 and {tries[j] for j in registry.order if j != "bronze_clickstream"} == {0}
    assert stored_xcom("lakehouse_backfill", subset.run_id, "run_jobs") == {"bronze_clickstream": "finished"}
    assert states["quality_check"] == TaskInstanceState.SUCCESS
    assert states["health_report"] == TaskInstanceState.SUCCESS and settings.layout.health_report_index.is_file()
    assert delta_store.count_rows(settings.layout.table("silver/clickstream")) == 0
    assert delta_store.count_rows(settings.layout.table("bronze/clickstream")) + delta_store.count_rows(
        settings.layout.table("bronze/clickstream_quarantine")) == landed.lines


@pytest.mark.spark
@pytest.mark.slow
def test_backfill_skips_a_job_that_runs_live(settings, fresh_assets):
    """Both DAGs at once: a backfill of a job whose lease a live process holds is skipped with the reason; its
    reader is left out of `run_jobs` too (there it would run before the job adds what it reads) and runs after it,
    in its own task."""
    from airflow.utils.state import DagRunState, TaskInstanceState

    generate(settings, events=100, seed=53, files=1)
    held = lease.acquire(settings, "bronze_clickstream", trigger="processing-time=10 seconds")
    try:
        run = dagbag().dags["lakehouse_backfill"].test(run_conf={"jobs": ["bronze_clickstream", "silver_clickstream"]})
    finally:
        held.release()
    assert run.state == DagRunState.SUCCESS
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["bronze_clickstream"] == TaskInstanceState.SKIPPED
    assert stored_xcom("lakehouse_backfill", run.run_id, "run_jobs") == {}  # neither ran in the shared driver
    assert states["silver_clickstream"] == TaskInstanceState.SUCCESS  # alone, after bronze's task
    assert delta_store.table_exists(settings.layout.table("silver/clickstream"))
    assert delta_store.count_rows(settings.layout.table("bronze/clickstream")) == 0
    assert not delta_store.table_exists(settings.layout.ops_table("alerts"))


@pytest.mark.spark
@pytest.mark.slow
def test_failed_job_fails_the_task_and_records_an_alert(settings, fresh_assets, monkeypatch):
    from airflow.utils.state import DagRunState

    monkeypatch.setenv("LAKEHOUSE_TASK_RETRIES", "0")
    monkeypatch.setenv("LAKEHOUSE_BATCH_HOOKS", "no_such_module:hook")  # the job process exits 2 at start
    generate(settings, events=100, seed=53, files=1)
    run = dagbag().dags["lakehouse_backfill"].test(run_conf={"jobs": ["bronze_clickstream"]})
    assert run.state == DagRunState.FAILED
    alerts = delta_store.read_table(settings.layout.ops_table("alerts")).to_pylist()
    assert [(a["job"], a["dag_id"], a["task_id"]) for a in alerts] == [
        ("bronze_clickstream", "lakehouse_backfill", "bronze_clickstream")]
    assert alerts[0]["run_id"] == run.run_id and "Error code is: 2" in alerts[0]["reason"]


@pytest.mark.spark
@pytest.mark.slow
def test_maintenance_dag_compacts_the_selected_tables(spark, settings, small_batch_registry, fresh_assets):
    from airflow.utils.state import DagRunState

    generate(settings, events=400, seed=54, files=4)  # two bronze commits
    run_job(spark, settings, small_batch_registry, "bronze_clickstream", Trigger(available_now=True))
    run = dagbag().dags["lakehouse_maintenance"].test(run_conf={"tables": ["bronze/clickstream"]})
    assert run.state == DagRunState.SUCCESS
    done = delta_store.read_table(settings.layout.ops_table("maintenance")).to_pylist()
    assert {(r["table"], r["operation"], r["outcome"], r["run_id"]) for r in done} == {
        ("bronze/clickstream", "optimize", "done", run.run_id), ("bronze/clickstream", "vacuum", "done", run.run_id)}
    assert next(r for r in done if r["operation"] == "optimize")["files_before"] == 2


class Approver:
    """Answers the pending approval of a `dag.test()` run the way the REST API does (Browse -> Required
    Actions): dag.test() waits for a person, so a test plays that person from a thread."""

    def __init__(self, dag_id: str, option: str):
        import threading

        self.dag_id, self.option, self.answered, self.asked = dag_id, option, [], []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join(timeout=10)

    def _poll(self) -> None:
        from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
        from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
        from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail
        from airflow.models.hitl import HITLDetail
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        while not self._done.wait(0.5):
            with create_session() as session:
                pending = session.execute(
                    select(TaskInstance.run_id, TaskInstance.task_id, TaskInstance.map_index, HITLDetail.subject,
                           HITLDetail.body, HITLDetail.defaults, HITLDetail.options)
                    .join(HITLDetail, HITLDetail.ti_id == TaskInstance.id)
                    .where(TaskInstance.dag_id == self.dag_id, HITLDetail.responded_at.is_(None),
                           TaskInstance.state == TaskInstanceState.AWAITING_INPUT)).first()
                if pending:
                    self.asked.append({"subject": pending.subject, "body": pending.body, "defaults": pending.defaults,
                                       "options": pending.options})
                    update_hitl_detail(
                        dag_id=self.dag_id, dag_run_id=pending.run_id, task_id=pending.task_id,
                        map_index=pending.map_index, session=session,
                        update_hitl_detail_payload=UpdateHITLDetailPayload(chosen_options=[self.option], params_input={}),
                        user=SimpleAuthManagerUser(username="test-approver", role="admin"))
                    self.answered.append(pending.run_id)


@pytest.mark.spark
@pytest.mark.slow
def test_checkpoint_reset_dag_plans_applies_and_asks_a_person(spark, settings, registry, raw, fresh_assets,
                                                              monkeypatch, tmp_path, capfd):
    import yaml
    from airflow.utils.state import DagRunState, TaskInstanceState

    from include import checkpoints
    from include.records import checkpoint_audit

    generate(settings, events=600, seed=55, files=2)
    for job_id in ("bronze_clickstream", "silver_clickstream", "gold_user_activity_5m"):
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    raw["jobs"]["gold_user_activity_5m"]["state_store"] = {"shuffle_partitions": 1}  # from the suite's 2
    changed = tmp_path / "jobs.yaml"
    changed.write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.setenv("LAKEHOUSE_REGISTRY", str(changed))
    monkeypatch.setenv("LAKEHOUSE_TASK_RETRIES", "0")
    checkpoint = settings.layout.checkpoint("gold_user_activity_5m")
    gold = settings.layout.table("gold/user_activity_5m")

    asked = []  # what each approval showed the person

    dag = dagbag().dags["checkpoint_reset"]  # parsed once: what it reads (the registry, the root) is set above

    def run(conf: dict, answer: str | None = None):
        if answer is None:
            return dag.test(run_conf=conf)
        with Approver("checkpoint_reset", answer) as approver:
            result = dag.test(run_conf=conf)
        assert approver.answered == [result.run_id]
        asked.extend(approver.asked)
        return result

    def states(result) -> dict:
        return {ti.task_id: ti.state for ti in result.get_task_instances()}

    def audit(result) -> list[tuple]:
        return [(r["job"], r["mode"], r["outcome"]) for r in checkpoint_audit.outcomes(settings)
                if r["actor"] == f"dag:checkpoint_reset/{result.run_id}"]

    held = lease.acquire(settings, "gold_user_activity_5m", trigger="processing-time=10 seconds")  # it runs live
    try:
        dry = run({"jobs": ["gold_user_activity_5m"], "mode": "repartition"})  # dry_run is the default
        assert lease.is_held(settings, "gold_user_activity_5m")  # a dry run stops (and restarts) nothing
    finally:
        held.release()
    assert dry.state == DagRunState.SUCCESS and states(dry)["approve"] == TaskInstanceState.SKIPPED
    assert states(dry)["verify"] == TaskInstanceState.SKIPPED
    assert audit(dry) == [("gold_user_activity_5m", "repartition", "dry-run")] and checkpoints.shuffle_partitions(
        checkpoint) == SUITE_STATE_PARTITIONS
    [dry_row] = [r for r in checkpoint_audit.outcomes(settings) if r["actor"] == f"dag:checkpoint_reset/{dry.run_id}"]
    assert "(it runs now: it must be stopped first)" in dry_row["detail"], dry_row

    generate(settings, events=300, seed=56, files=1, start=DEFAULT_START + timedelta(hours=2))  # pending input
    for job_id in ("bronze_clickstream", "silver_clickstream"):
        run_job(spark, settings, registry, job_id, Trigger(available_now=True))
    before = checkpoints.latest_committed_batch(checkpoint)
    moved = run({"jobs": ["gold_user_activity_5m"], "mode": "repartition", "dry_run": False})  # no state destroyed
    assert moved.state == DagRunState.SUCCESS and states(moved)["approve"] == TaskInstanceState.SKIPPED
    assert sorted(audit(moved)) == [("gold_user_activity_5m", "repartition", "done"),
                                    ("gold_user_activity_5m", "verify", "done")]
    assert checkpoints.shuffle_partitions(checkpoint) == 1
    assert checkpoints.latest_committed_batch(checkpoint) > before  # verify's available-now run, on 1 partition

    versions, rows = delta_store.latest_version(gold), delta_store.count_rows(gold)
    refresh = {"jobs": ["gold_user_activity_5m"], "mode": "full-refresh", "dry_run": False}
    rejected = run(refresh, "Reject")
    assert rejected.state == DagRunState.SUCCESS and states(rejected)["apply"] == TaskInstanceState.SKIPPED
    assert audit(rejected) == [("gold_user_activity_5m", "full-refresh", "not applied")]
    assert delta_store.latest_version(gold) == versions
    [approval] = asked  # the plan itself, Reject proposed
    assert approval["defaults"] == ["Reject"] and approval["options"] == ["Approve", "Reject"], approval
    body = approval["body"]
    for text in ("**destroys state**", "plan: `resume`", "not needed for compatibility",
                 f"**Will**: move {checkpoint} aside, empty gold/user_activity_5m",
                 f"Table `gold/user_activity_5m`: {rows:,} rows at Delta version {versions}",
                 "Downstream jobs: none", "Runs now: no",
                 f"Undo: `` RESTORE TABLE delta.`{gold}` TO VERSION AS OF {versions} ``; replace {checkpoint} with "
                 f"{settings.layout.archived_checkpoint('gold_user_activity_5m', 2)}"):
        assert text in body, (text, body)

    # A bad combination: the plan task refuses it (one line, no traceback), audit records why, no alert.
    capfd.readouterr()
    refused = run({"jobs": ["gold_user_activity_5m"], "mode": "reset-checkpoint", "dry_run": False})
    output = "".join(capfd.readouterr())
    assert "refused: reset-checkpoint needs exactly one of --from-version" in output, output[-5000:]
    assert "Traceback" not in output and "RequestRefused" not in output, output[-5000:]
    assert states(refused)["plan"] == TaskInstanceState.FAILED and states(refused)["audit"] == TaskInstanceState.SUCCESS
    assert states(refused)["apply"] == TaskInstanceState.UPSTREAM_FAILED
    assert refused.state == DagRunState.SUCCESS  # like a rejected run: nothing applied, the plan task says why
    [row] = [r for r in checkpoint_audit.outcomes(settings) if r["actor"] == f"dag:checkpoint_reset/{refused.run_id}"]
    assert (row["job"], row["outcome"]) == ("gold_user_activity_5m", "refused") and row["detail"] == (
        "reset-checkpoint needs exactly one of --from-version, --from-timestamp, --from-latest, --from-earliest"), row
    alerts = settings.layout.ops_table("alerts")
    assert not delta_store.table_exists(alerts) or not [
        a for a in delta_store.read_table(alerts).to_pylist() if a.get("run_id") == refused.run_id]
    unchosen = run({"jobs": None, "mode": None})  # the form as it opens: nothing chosen, nothing done
    assert states(unchosen)["plan"] == TaskInstanceState.FAILED
    assert [r["detail"] for r in checkpoint_audit.outcomes(settings)
            if r["actor"] == f"dag:checkpoint_reset/{unchosen.run_id}"] == [
        "choose a mode: one of full-refresh, reset-checkpoint, repartition, rollback, resume-action"]


def test_data_docs_plugin_serves_the_report_behind_login_and_offline(settings, lakehouse_root, airflow_db, tmp_path):
    """Through Airflow's own API app (the plugin mounted as the API server mounts it): anonymous and bad
    credentials refused, the UI's cookie and a bearer token served; traversal, absolute paths and symlinks
    refused; GE's CDN links rewritten to the project's offline copies, which are served."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    docs = settings.layout.data_docs
    (docs / "validations").mkdir(parents=True)
    (docs / "index.html").write_text('<html><script src="https://code.jquery.com/jquery-3.7.1.min.js" '
                                     'integrity="sha384-x" crossorigin="anonymous"></script>lakehouse data docs</html>')
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "index.html").write_text("outside the docs folder")
    (docs / "linked.html").symlink_to(secret / "index.html")
    (docs / "linked_dir").symlink_to(secret)

    client = TestClient(create_app("core"))
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    assert client.get("/lakehouse-data-docs/index.html").status_code == 401
    assert client.get("/lakehouse-data-docs/index.html", cookies={"_token": "forged"}).status_code == 403
    page = client.get("/lakehouse-data-docs/index.html", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and "lakehouse data docs" in page.text
    assert "https://" not in page.text and "integrity=" not in page.text  # the copy, served by the plugin
    client.cookies.set("_token", token)  # as the UI's browser sends it
    assert "lakehouse data docs" in client.get("/lakehouse-data-docs/").text
    script = re.search(r'src="([^"]+)"', page.text).group(1)
    served = client.get(script)
    assert served.status_code == 200 and b"jQuery" in served.content[:2000], script
    for path in ("%2e%2e/%2e%2e/etc/passwd", "%2E%2E%2Fsecret/index.html", "/etc/passwd", "linked.html",
                 "linked_dir/index.html", "linked_dir/", "_offline_assets/jquery-3.7.1/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                 "_offline_assets/nope-1.0/x.js", "validations/%2e%2e/%2e%2e/secret/index.html"):
        refused = client.get(f"/lakehouse-data-docs/{path}")
        assert refused.status_code == 404 and "outside the docs folder" not in refused.text, (path, refused.text)

    # A validation page links back to the Airflow task that made it (read from its stored result), others don't.
    stored = settings.layout.gx_project / "gx" / "validations" / "s" / "r"
    stored.mkdir(parents=True)
    (docs / "validations" / "s" / "r").mkdir(parents=True)
    task = "/dags/data_quality/runs/manual__2026-11-25T10%3A00%3A00%2B00%3A00/tasks/validate_gold__x"
    for name, meta in (("linked", {"lakehouse_airflow_task": task}), ("plain", {}),
                       ("forged", {"lakehouse_airflow_task": "javascript:alert(1)"})):
        (stored / f"{name}.json").write_text(json.dumps({"meta": meta}))
        (docs / "validations" / "s" / "r" / f"{name}.html").write_text(f"<html><body class='x'>{name}</body></html>")
    linked = client.get("/lakehouse-data-docs/validations/s/r/linked.html").text
    assert '<body class=\'x\'><div class="lakehouse-airflow-link"' in linked and f'href="{task}"' in linked, linked
    assert "Airflow: data_quality · run manual__2026-11-25T10:00:00+00:00 · validate_gold__x" in linked
    for name in ("plain", "forged"):
        assert "lakehouse-airflow-link" not in client.get(f"/lakehouse-data-docs/validations/s/r/{name}.html").text

    health = settings.layout.health_report
    health.mkdir(parents=True)
    (health / "index.html").write_text('<html><img src="job.svg">pipeline health</html>')
    (health / "job.svg").write_text("<svg></svg>")
    assert client.get("/lakehouse-health/index.html", cookies={"_token": ""}).status_code in (401, 403)
    assert "pipeline health" in client.get("/lakehouse-health/index.html").text  # the cookie set above
    assert client.get("/lakehouse-health/job.svg").text == "<svg></svg>"
    assert client.get("/lakehouse-health/%2e%2e/data_docs/index.html").status_code == 404

    listed = subprocess.run([sys.executable, "-m", "airflow", "plugins", "--output", "json"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "lakehouse_data_docs" in listed.stdout


def test_the_documentation_is_served_behind_login_and_the_dags_link_into_it(airflow_db):
    """`make docs`' site under /lakehouse-docs/ (the plugin, as the API server mounts it), behind Airflow's login,
    nothing outside it; every DAG's doc and the approval text link to pages the site has."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    from include.airflow.docs import DOCS_SITE, DOCS_URL_PREFIX

    built = subprocess.run(["make", "-s", "-o", f"{sys.prefix}/.installed", "docs", f"VENV={sys.prefix}"], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr[-3000:]
    client = TestClient(create_app("core"))
    assert client.get(f"{DOCS_URL_PREFIX}/index.html").status_code == 401
    client.cookies.set("_token", get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin")))
    page = client.get(f"{DOCS_URL_PREFIX}/concepts/checkpoints.html")
    assert page.status_code == 200 and "Checkpoints" in page.text
    for outside in ("%2e%2e/README.md", "%2e%2e/%2e%2e/etc/passwd", "/etc/passwd"):
        assert client.get(f"{DOCS_URL_PREFIX}/{outside}").status_code == 404, outside

    linked = {}
    for dag in dagbag().dags.values():
        texts = [dag.doc_md or "", *(getattr(t, "body", "") or "" for t in dag.tasks)]
        linked[dag.dag_id] = [m for text in texts for m in re.findall(rf"\]\({DOCS_URL_PREFIX}/([^)#]+)", text)]
    assert all(linked.values()), linked  # every DAG links to its page
    approve = dagbag().dags["checkpoint_reset"].get_task("approve")  # the approval page's "what is this" link
    assert f"What is this? [Checkpoints and plans]({DOCS_URL_PREFIX}/concepts/checkpoints.html)" in approve.body
    for dag_id, pages in linked.items():
        for name in pages:
            assert (DOCS_SITE / name).is_file(), f"{dag_id} links to {name}, which the site does not have"
            assert client.get(f"{DOCS_URL_PREFIX}/{name}").status_code == 200


@pytest.mark.s3
def test_data_docs_plugin_serves_the_report_from_an_s3_root_behind_login(s3_settings, airflow_db, monkeypatch):
    """The same plugin on a lakehouse on S3: the report and the health report read from the bucket, per request,
    behind the login; traversal refused."""
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    monkeypatch.setenv("LAKEHOUSE_ROOT", str(s3_settings.root))
    monkeypatch.setenv("LAKEHOUSE_LOCAL_DIR", str(s3_settings.local))
    docs, health = s3_settings.layout.data_docs, s3_settings.layout.health_report
    (docs / "index.html").write_text("<html>lakehouse data docs on s3</html>")
    (docs / "validations" / "s" / "r" / "page.html").write_text("<html><body>a validation</body></html>")
    (health / "index.html").write_text("<html>pipeline health on s3</html>")
    (health / "job.svg").write_text("<svg></svg>")
    client = TestClient(create_app("core"))
    assert client.get("/lakehouse-data-docs/index.html").status_code == 401
    client.cookies.set("_token", get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin")))
    assert "lakehouse data docs on s3" in client.get("/lakehouse-data-docs/").text
    assert "a validation" in client.get("/lakehouse-data-docs/validations/s/r/page.html").text
    assert "pipeline health on s3" in client.get("/lakehouse-health/index.html").text
    svg = client.get("/lakehouse-health/job.svg")
    assert svg.text == "<svg></svg>" and svg.headers["content-type"].startswith("image/svg+xml")
    for path in ("%2e%2e/health/index.html", "/etc/passwd", "nope.html"):
        assert client.get(f"/lakehouse-data-docs/{path}").status_code == 404, path
