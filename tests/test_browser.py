"""The Airflow UI in a real browser (Debian's headless Chromium, driven by selenium through chromedriver), on a
real API server: log in, the DAG list, the trigger form of `lakehouse_backfill`, a quality task's report link
and the Data Docs index. The browser resolves no host but the server's, so the report must render offline.

Screenshots go to LAKEHOUSE_SCREENSHOTS (default `.cache/screenshots/` in the repo), one PNG per step:
01_login, 02_dag_list, 04_trigger_form (the jobs multi-select opened), 05_log (a quality task's log: the
report's URL, a link to a new tab), 05_task (its extra link),
06_report (the validation result it opens), 07_index (every gold table's runs with their status), 08_approval
(a checkpoint full refresh waiting for a person: the plan, Reject proposed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest

from include.airflow.environment import airflow_command, airflow_environment
from include.quality.gx_context import workspace
from include.quality.suites import quality_tables
from tests.support.airflow_dags import dagbag, run_through_the_executor
from tests.support.helpers import REPO, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCREENSHOTS = Path(os.environ.get("LAKEHOUSE_SCREENSHOTS") or REPO / ".cache" / "screenshots")
PASSWORD = "lakehouse-browser-test"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def api_server(settings, lakehouse_root, airflow_db, tmp_path, monkeypatch):
    """`airflow api-server` on a free port, with the DAGs serialized and a known admin password. It also serves
    the Execution API to the tasks this test process runs through an executor (`dag.test(use_executor=True)`,
    which writes the task logs the UI shows): one JWT secret for both."""
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}))
    port = free_port()
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", os.urandom(16).hex())
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", f"http://127.0.0.1:{port}/execution/")
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", f"http://127.0.0.1:{port}")
    env = {**airflow_environment(settings), "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords)}
    assert env["AIRFLOW__TRIGGERER__BLOCKED_MAIN_THREAD_WARNING_THRESHOLD"] == "5"  # `make airflow` stays readable
    assert os.environ["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"] == "30"  # the tasks' patience with a busy server
    reserialized = subprocess.run(airflow_command() + ["dags", "reserialize"], env=env, capture_output=True,
                                  text=True, timeout=300)
    assert reserialized.returncode == 0, reserialized.stderr[-2000:]
    log = (tmp_path / "api-server.log").open("w")
    server = subprocess.Popen(airflow_command() + ["api-server", "--port", str(port), "--host", "127.0.0.1"],
                              env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return server.poll() is not None  # stop waiting: the assertion below reports it

    wait_for(healthy, timeout=180, what="the Airflow API server to answer")
    assert server.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
    yield base
    os.killpg(server.pid, 15)
    server.wait(timeout=60)
    log.close()


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed (make test installs them where it can)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={Path(os.environ.get('TMPDIR', '/tmp')) / f'chromium-{os.getpid()}'}",
                 # no host but the test server resolves: the report must not need the internet
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def shot(driver, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def visible_text(driver) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return driver.find_element("tag name", "body").text
    except (NoSuchElementException, StaleElementReferenceException):  # the page is being replaced (a redirect)
        return ""


def cookie(driver, name: str) -> dict | None:
    """The browser's cookie `name`, or None (also while the page navigates: the login redirects)."""
    from selenium.common.exceptions import WebDriverException

    try:
        return driver.get_cookie(name)
    except WebDriverException as exc:  # "aborted by navigation: Inspected target navigated or closed"
        if "navigat" not in str(exc):
            raise
        return None


def validation_runs(driver) -> list[tuple[str, str]]:
    """Every row of the Data Docs' validation table as (text, status icon), paging as a person would (the
    table shows 10 rows a page, "Showing 1 to 10 of 12 rows"). A page's rows are read at once: it redraws."""
    read_page = (
        "const shown = el => el.offsetParent !== null;"
        "const info = [...document.querySelectorAll('.pagination-info')].find(shown);"
        "return [info ? info.innerText : '', [...document.querySelectorAll('table tbody tr')].filter(shown)"
        ".map(r => [r.innerText, (r.querySelector('td i, td svg, td img') || {outerHTML: ''}).outerHTML])]")
    # a page number's link, not "next": clicking it again is harmless when the first click landed late
    go_to_page = (
        "const links = [...document.querySelectorAll('.pagination a.page-link')].filter(a => a.offsetParent !== null);"
        "const link = links.find(a => a.innerText.trim() === arguments[0]); if (link) { link.click(); } return !!link")
    runs: list[tuple[str, str]] = []
    for page_number in range(2, 22):
        info, page = driver.execute_script(read_page)
        runs += [tuple(row) for row in page]
        shown = re.search(r"to (\d+) of (\d+)", info)
        if not shown or int(shown[1]) >= int(shown[2]):
            return runs

        def moved(shown=info, target=str(page_number)) -> bool:
            if driver.execute_script(read_page)[0] != shown:
                return True
            assert driver.execute_script(go_to_page, target), f"no link to page {target} under {shown!r}"
            return False

        wait_for(moved, timeout=30, interval=2, what=f"the page after {info!r}")
    raise AssertionError(f"more than 20 pages of validation runs: {runs[:5]}")


def wait_text(driver, text: str, timeout: float = 60, name: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in visible_text(driver):
            return
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not shown{f' ({shot(driver, name)})' if name else ''}:\n"
                         f"{visible_text(driver)[:2000]}")


def click(driver, xpath: str, timeout: float = 30) -> None:
    """Click the element at `xpath`, again if the page re-rendered it meanwhile (the UI refreshes its data)."""
    from selenium.common.exceptions import (
        ElementClickInterceptedException,
        NoSuchElementException,
        StaleElementReferenceException,
    )

    deadline = time.monotonic() + timeout
    while True:
        try:
            driver.find_element("xpath", xpath).click()
            return
        except (NoSuchElementException, StaleElementReferenceException, ElementClickInterceptedException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_person_logs_in_triggers_and_reads_the_report(demo, settings, registry, fresh_assets, api_server, tmp_path,
                                                         request, monkeypatch):
    """A task of the data_quality DAG on demand, run as the scheduler's executor runs it, links its table's result
    (checked without a browser too); the demo's quality run (the whole DAG's through Airflow: tests/test_demo.py)
    reported every other table; then a person reads them in the UI."""
    from airflow.utils.state import DagRunState

    from tests.support.airflow_dags import report_link

    assert demo.result.returncode == 0, demo.result.stderr[-3000:]
    monkeypatch.setenv("LAKEHOUSE_REGISTRY", str(demo.settings.registry_path))  # the DAGs' tasks: the demo's registry
    # a copy of the session's demo lakehouse (every gold table has rows), with its quality reports
    shutil.rmtree(settings.root, ignore_errors=True)
    shutil.copytree(demo.settings.root, settings.root, ignore=lambda d, names: [
        n for n in names if Path(d) == demo.settings.root and n == "_ops"])
    specs = quality_tables(registry)  # gold tables (row and table suites) and bronze's rescued fields (rows only)
    task, table = "validate_gold__user_activity_5m", "gold/user_activity_5m"
    store = workspace(settings)[0] / "gx" / "validations"  # <suite>/<run name>/<run time>/<batch>.json
    reported = Counter(p.relative_to(store).parts[0] for p in store.glob("*/*/*/*.json"))
    suites = {f"{t.replace('/', '__')}__{scope}": t for t, spec in specs.items() for scope in {c.scope for c in spec.checks}}
    assert set(reported) == set(suites), reported  # each table's suites, as the demo's quality run reported them
    run = run_through_the_executor("data_quality", server_log=tmp_path / "api-server.log",
                                   task_ids=[task])  # with the logs the UI shows
    assert run.state == DagRunState.SUCCESS
    single = report_link("data_quality", run.run_id, task)
    assert single.startswith("/lakehouse-data-docs/validations/gold__user_activity_5m"), single
    assert (settings.layout.data_docs / single.removeprefix("/lakehouse-data-docs/")).is_file()
    driver, base = request.getfixturevalue("browser"), api_server  # skipped here where no browser can be installed
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)  # the folder shows this run only

    driver.get(f"{base}/")  # the login form
    wait_text(driver, "Sign", name="01_login")
    driver.find_element("name", "username").send_keys("admin")
    driver.find_element("name", "password").send_keys(PASSWORD)
    shot(driver, "01_login")
    driver.find_element("css selector", "button[type=submit]").click()
    wait_for(lambda: cookie(driver, "_token"), timeout=60, what="the login to set Airflow's token cookie")

    driver.get(f"{base}/dags")
    wait_text(driver, "lakehouse_backfill", name="02_dag_list")
    for dag_id in ("lakehouse_live", "data_quality", "checkpoint_reset", "lakehouse_maintenance"):
        assert dag_id in visible_text(driver)
    shot(driver, "02_dag_list")

    driver.get(f"{base}/dags/lakehouse_backfill/details")
    wait_text(driver, "Catch every streaming job up", name="03_details")  # the DAG's one-line description
    shot(driver, "03_details")
    driver.get(f"{base}/dags/lakehouse_backfill")
    wait_text(driver, "Trigger", name="03_dag")
    click(driver, "//button[normalize-space()='Trigger']")
    wait_text(driver, "jobs", name="04_trigger_form")
    field = driver.find_element("id", "element_jobs")
    field.click()
    wait_text(driver, "gold_user_activity_5m", name="04_trigger_form")  # the registry's jobs, listed
    shown = visible_text(driver)
    assert all(job in shown for job in registry.order), shown[:2000]
    assert "leave empty to run all of them" in shown
    shot(driver, "04_trigger_form")

    task_page = f"{base}/dags/data_quality/runs/{quote(run.run_id, safe='')}/tasks/{task}"
    driver.get(task_page)  # a task opens on its log, which ends with the report's URL: a link to a new tab
    report_link = "//a[contains(@href, '/lakehouse-data-docs/') and starts-with(normalize-space(), 'http')]"
    wait_for(lambda: driver.find_elements("xpath", report_link), timeout=60, what="the log's report link")
    assert "the link opens a new tab" in visible_text(driver)
    shot(driver, "05_log")
    home = driver.current_window_handle
    click(driver, report_link)
    wait_for(lambda: len(driver.window_handles) == 2, timeout=30, what="the report to open in a new tab")
    driver.switch_to.window(next(w for w in driver.window_handles if w != home))
    assert "/lakehouse-data-docs/" in driver.current_url, driver.current_url
    wait_text(driver, "Succeeded", name="06_report")
    driver.close()
    driver.switch_to.window(home)

    driver.get(f"{task_page}/details")  # its "Data quality report" link, where Airflow lists extra links
    wait_text(driver, "Data quality report", name="05_task")
    shot(driver, "05_task")
    click(driver, "//a[normalize-space()='Data quality report']")  # Airflow 3.3 opens a same-origin link here
    wait_for(lambda: "lakehouse-data-docs" in driver.current_url, timeout=30, what="the report to open")
    wait_text(driver, "Succeeded", name="06_report")  # the table's validation result, filled
    page = visible_text(driver)
    assert "gold__user_activity_5m__rows" in page and "no_future_windows" in page, page[:2000]
    assert "Data asset: gold/user_activity_5m" in page and "window_start after now (s)" in page, page[:2000]
    assert "_seconds_in_future" not in page and "Data asset: None" not in page
    back = driver.find_element("css selector", ".lakehouse-airflow-link a")  # the way back to the task's run
    assert back.get_attribute("href").startswith(f"{base}/dags/data_quality/runs/") and back.get_attribute(
        "href").endswith(f"/tasks/{task}"), back.get_attribute("href")
    shot(driver, "06_report")

    driver.get(f"{base}/lakehouse-data-docs/index.html")
    wait_text(driver, "gold__user_activity_5m__rows", name="07_index")  # bootstrap-table rendered the runs
    shot(driver, "07_index")
    # everything the page loaded came from the Airflow server, and every image arrived (GE's logo included)
    loaded = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(url.startswith(base) for url in loaded), [u for u in loaded if not u.startswith(base)]
    broken = driver.execute_script("return [...document.images].filter(i => !i.naturalWidth).map(i => i.src)")
    assert not broken, broken
    runs = validation_runs(driver)
    for suite, name in suites.items():  # every suite's validation results: the demo's, and the task's
        expected = reported[suite] + (name == table)
        assert sum(suite in r for r, _ in runs) == expected, (suite, expected, runs)
    assert len(runs) == reported.total() + sum(name == table for name in suites.values()), runs
    assert all(status for _, status in runs), runs  # each run's outcome, drawn

    approval_of_a_full_refresh(driver, base, settings)
    sys.stdout.write(f"screenshots: {SCREENSHOTS}\n")


def pending_approval(dag_id: str) -> str | None:
    """The run whose approval waits for a person (Browse -> Required Actions), if any."""
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(TaskInstance.run_id).join(HITLDetail, HITLDetail.ti_id == TaskInstance.id).where(
            TaskInstance.dag_id == dag_id, HITLDetail.responded_at.is_(None),
            TaskInstance.state == TaskInstanceState.AWAITING_INPUT))


def approval_of_a_full_refresh(driver, base: str, settings) -> None:
    """A real full refresh of gold_user_activity_5m asks a person: the approval page shows the plan (what is
    emptied, the rows and version now, how to undo it) with Reject proposed and drawn apart from Approve; the
    person rejects it and nothing changes. dag.test() runs the DAG here; the person acts from a thread."""
    import threading

    from airflow.utils.state import DagRunState

    from include.records import checkpoint_audit
    from include.storage import delta as delta_store

    gold = settings.layout.table("gold/user_activity_5m")
    rows, version = delta_store.count_rows(gold), delta_store.latest_version(gold)
    seen: dict = {}

    def person() -> None:
        try:
            run_id = wait_for(lambda: pending_approval("checkpoint_reset"), timeout=180, what="the approval")
            driver.get(f"{base}/dags/checkpoint_reset/runs/{run_id}/tasks/approve/required_actions")
            wait_text(driver, "rows at Delta version", name="08_approval")
            seen["page"] = visible_text(driver)
            seen["buttons"] = driver.execute_script(
                "return Object.fromEntries([...document.querySelectorAll('button')]"
                ".filter(b => ['Approve', 'Reject'].includes(b.innerText.trim()))"
                ".map(b => [b.innerText.trim(), [getComputedStyle(b).backgroundColor, getComputedStyle(b).color]]))")
            shot(driver, "08_approval")
            click(driver, "//button[normalize-space()='Reject']")
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread below
            seen["error"] = exc

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    run = dagbag().dags["checkpoint_reset"].test(
        run_conf={"jobs": ["gold_user_activity_5m"], "mode": "full-refresh", "dry_run": False})
    thread.join(timeout=60)
    if "error" in seen:
        raise seen["error"]
    page = seen["page"]
    for text in ("destroys state", "Will: move", f"Table gold/user_activity_5m: {rows:,} rows at Delta version "
                 f"{version}", "Downstream jobs: none", "Undo: RESTORE TABLE"):
        assert text in page, (text, page[:3000])
    assert seen["buttons"]["Approve"] != seen["buttons"]["Reject"], seen["buttons"]  # Reject drawn apart
    assert run.state == DagRunState.SUCCESS
    assert [(r["outcome"], r["detail"]) for r in checkpoint_audit.outcomes(settings)
            if r["actor"] == f"dag:checkpoint_reset/{run.run_id}"] == [("not applied", "rejected by a person")]
    assert (delta_store.count_rows(gold), delta_store.latest_version(gold)) == (rows, version)
