"""`lakehouse monitor`: the alert rules generated from the registry, checked and unit-tested by Prometheus' own
`promtool`; alerts raised by a real Prometheus, delivered by a real Alertmanager to the product's webhook and
recorded in `ops.alerts`, firing and resolved. (A live driver killed and started again: tests/test_supervision.py.)"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from dataclasses import replace

import pytest
import yaml
from deltalake import write_deltalake

from include.daemons import free_port_block
from include.monitor import configs, rules, stack, webhook
from include.ops import health_report
from include.quality import run_quality
from include.registry import build_registry
from include.storage import delta as delta_store
from tests.support.helpers import LAKEHOUSE, REPO, run_cli, wait_for
from tests.support.monitor import monitoring, prometheus, recorded_alerts, statuses, value
from tests.support.quality_data import GOLD, JOB, make_tables

CONTRACTS = {"LakehouseJobDown", "LakehouseTableStale", "LakehouseQualityFailing"}


def _rule_test(rules_file, interval: int) -> dict:
    """promtool's unit test of six generated rules (shipped registry, 15-s samples): gold_user_activity_5m down from
    45 s; gold/user_activity_5m last committed at time 0; a blocking check failing from 105 s; bronze_clickstream
    quarantining 10 % of its rows (its bound 5 %), bronze_logins 1 %; bronze_payments' Kafka lag growing;
    gold_user_running_totals' state past its 5,000,000 rows from 2 min."""
    notes = {(a["alert"], a["labels"].get("table") or a["labels"]["job"]): a["annotations"]
             for g in yaml.safe_load(rules_file.read_text())["groups"] for a in g["rules"] if "job" in a["labels"]}

    def fires(alert: str, at: str, subject: str, severity: str = "warning", **labels: str) -> dict:
        expected = {"severity": severity, "job": subject, **labels}
        return {"eval_time": at, "alertname": alert,
                "exp_alerts": [{"exp_labels": expected, "exp_annotations": notes[(alert, labels.get("table",
                                                                                                 subject))]}]}

    def quiet(alert: str, at: str) -> dict:
        return {"eval_time": at, "alertname": alert, "exp_alerts": []}

    threshold = 1200 + 60  # the suite's freshness goal and the gold job's 1-minute trigger
    series = {
        f'lakehouse_job_up{{job="{JOB}"}}': "1x3 0x200",
        f'lakehouse_table_last_commit_timestamp_seconds{{table="{GOLD}"}}': "0x200",
        f'lakehouse_quality_failing_checks{{table="{GOLD}",severity="blocking"}}': "0x7 1x200",
        f'lakehouse_quality_failing_checks{{table="{GOLD}",severity="warning"}}': "3x200",
        'lakehouse_job_input_rows_total{job="bronze_clickstream"}': "0+25x200",
        'lakehouse_job_quarantined_rows_total{job="bronze_clickstream"}': "0+2.5x200",
        'lakehouse_job_input_rows_total{job="bronze_logins"}': "0+100x200",
        'lakehouse_job_quarantined_rows_total{job="bronze_logins"}': "0+1x200",
        'lakehouse_kafka_lag_messages{job="bronze_payments",topic="payments",partition="0"}': "0+10x200",
        'lakehouse_kafka_lag_messages{job="bronze_payments",topic="payments",partition="1"}': "5x200",
        'lakehouse_job_state_rows{job="gold_user_running_totals"}': "4000000x7 6000000x200",
    }
    return {"rule_files": [str(rules_file)], "evaluation_interval": f"{interval}s", "tests": [{
        "interval": f"{interval}s",
        "input_series": [{"series": name, "values": values} for name, values in series.items()],
        "alert_rule_test": [
            # down from 45 s; its `for` is the job's 30-s restart backoff: pending at 1 min, firing at 1 min 30 s
            quiet("LakehouseJobDown", "1m"),
            fires("LakehouseJobDown", "90s", JOB, "critical", lakehouse_group="clickstream_gold"),
            quiet("LakehouseQualityFailing", "90s"),
            fires("LakehouseQualityFailing", "2m", JOB, "critical", table=GOLD),
            quiet("LakehouseTableStale", f"{threshold}s"),
            fires("LakehouseTableStale", f"{threshold + interval}s", JOB, table=GOLD),
            fires("LakehouseQuarantineHigh", "16m", "bronze_clickstream"),  # and not bronze_logins
            quiet("LakehouseKafkaLagGrowing", "4m"),  # growing from 15 s, for 5 min (half its 10-min window)
            fires("LakehouseKafkaLagGrowing", "6m", "bronze_payments"),
            quiet("LakehouseStateRowsHigh", "2m"),
            fires("LakehouseStateRowsHigh", "3m", "gold_user_running_totals"),
        ],
    }]}


def test_the_rules_generated_from_the_registry_pass_promtool_and_fire_as_its_unit_test_says(settings, registry,
                                                                                           tmp_path):
    """Every file `monitor up` writes passes `promtool check` / `amtool check-config` (configs.write runs them);
    every live job and every live table with a freshness check has its rule, each with its severity, labels and a
    runbook naming a `lakehouse` command; Prometheus' rule engine (`promtool test rules`) fires six of them when
    their series say so, and not before."""
    files = configs.write(settings, registry)
    generated = [r for g in yaml.safe_load(files.rules.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in generated}
    assert CONTRACTS <= names and names == {a.name for a in rules.ALERTS}
    live = [j for j in registry.order if registry.jobs[j].live]
    down = {r["labels"]["job"] for r in generated if r["alert"] == "LakehouseJobDown"}
    assert live and down == set(live)
    stale = {r["labels"]["table"] for r in generated if r["alert"] == "LakehouseTableStale"}
    assert GOLD in stale and "bronze/clickstream" not in stale  # bronze's suite has no freshness check
    for rule in generated:
        assert rule["labels"]["severity"] in ("critical", "warning") and "`lakehouse " in rule["annotations"]["runbook"]
        assert "{" not in rule["annotations"]["runbook"]  # filled per job or table
    unit = tmp_path / "rules_test.yml"
    unit.write_text(yaml.safe_dump(_rule_test(files.rules, settings.monitor_interval_seconds)))
    done = subprocess.run(["promtool", "test", "rules", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr

    broken = tmp_path / "alertmanager.yml"
    broken.write_text("route: {receiver: nobody}\n")  # a team's file naming a receiver it does not define
    with pytest.raises(configs.MonitorError, match="amtool check-config"):
        configs.write(replace(settings, alertmanager_config=broken), registry)


def test_a_notification_is_recorded_once_per_alert_and_status_and_a_bad_one_is_refused(settings):
    firing = {"fingerprint": "f1", "startsAt": "2026-12-07T10:00:00.123456789Z", "endsAt": "0001-01-01T00:00:00Z",
              "status": "firing", "labels": {"alertname": "LakehouseTableStale", "table": GOLD, "job": JOB,
                                             "severity": "warning"},
              "annotations": {"summary": f"{GOLD} is stale", "runbook": "`lakehouse health`"}}
    assert webhook.record(settings, {"alerts": [firing]}) == 1
    assert webhook.record(settings, {"alerts": [firing]}) == 0  # sent again (repeat_interval): nothing new
    resolved = {**firing, "status": "resolved", "endsAt": "2026-12-07T10:05:00Z"}
    assert webhook.record(settings, {"alerts": [resolved, firing]}) == 1
    rows = recorded_alerts(settings)
    assert [(r["status"], r["table_name"], r["job"], r["severity"]) for r in rows] == [
        ("firing", GOLD, JOB, "warning"), ("resolved", GOLD, JOB, "warning")]
    assert rows[0]["raised_at"].isoformat() == "2026-12-07T10:00:00.123456+00:00"
    assert rows[1]["raised_at"].isoformat() == "2026-12-07T10:05:00+00:00"
    assert rows[0]["reason"] == f"LakehouseTableStale firing: {GOLD} is stale. Runbook: `lakehouse health`"
    for bad, said in (([],"a list of `alerts`"), ({"alerts": [{"status": "firing"}]}, "without a readable 'labels'"),
                      ({"alerts": [{**firing, "status": "gone"}]}, "neither firing nor resolved")):
        with pytest.raises(webhook.BadNotification, match=said):
            webhook.record(settings, bad)
    assert len(recorded_alerts(settings)) == 2


def _gold_alone_live(raw: dict, path) -> object:
    """The registry with gold_user_activity_5m the only live job: a 1-s trigger, a 1-s backoff (the job-down alert's
    `for`: 2 intervals), a 14-s freshness goal (a commit keeps the table fresh 15 s, longer than the evaluation and
    Alertmanager's group interval that send its resolution)."""
    for job_id, job in raw["jobs"].items():
        job["live"] = job_id == JOB
    raw["jobs"][JOB]["triggers"] = {"live": "processing-time=1 second"}
    raw["jobs"][JOB]["supervision"] = {"backoff_seconds": 1}
    # a goal the synthetic windows (10 minutes behind silver) miss: a warning here, so that only the duplicate below
    # fails the suite
    raw["jobs"][JOB]["quality"] = {"freshness_lag": "14 seconds", "severity": {"freshness": "warning"}}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return build_registry(raw, path)


@pytest.mark.timeout(300)
def test_stale_and_failing_tables_page_through_prometheus_and_alertmanager_and_resolve(settings, raw, tmp_path,
                                                                                        lakehouse_env):
    """A gold table past its freshness goal, then a duplicate row its validation finds: each alert fires in Prometheus,
    reaches the product's webhook through Alertmanager (`ops.alerts`), and resolves when a commit and a clean
    validation come. Prometheus' targets are up and its samples equal the table's Delta log."""
    path = tmp_path / "jobs.yaml"
    registry = _gold_alone_live(raw, path)
    settings = replace(settings, registry_path=path)
    make_tables(settings, registry)
    assert run_quality(settings, registry, [GOLD]).blocking_failures == []
    with monitoring(settings) as watched:
        env = {**lakehouse_env, "LAKEHOUSE_REGISTRY": str(path),
               "LAKEHOUSE_PROMETHEUS_PORT": str(watched.prometheus_port),
               "LAKEHOUSE_ALERTMANAGER_PORT": str(watched.alertmanager_port),
               "LAKEHOUSE_METRICS_PORT": str(watched.metrics_port)}
        shown = run_cli(["monitor", "status", "--json"], env, timeout=60)
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["up"] and status["prometheus_url"].endswith(str(watched.prometheus_port))
        assert {"alertmanager_url", "metrics_url"} <= set(status)
        # no live driver runs: the endpoint is the one target, up from its first scrape
        wait_for(lambda: [t["health"] for t in prometheus(watched, "/api/v1/targets")["activeTargets"]] == ["up"], 30,
                 lambda: f"the endpoint up in Prometheus' targets: {prometheus(watched, '/api/v1/targets')}")

        # the gold job is not running and its table had no commit since it was made, 14 s + 1 s ago at least
        wait_for(lambda: statuses(watched, "LakehouseTableStale", table_name=GOLD) == ["firing"], 60,
                 lambda: f"the stale alert in ops.alerts: {recorded_alerts(watched)}")
        wait_for(lambda: statuses(watched, "LakehouseJobDown", job=JOB) == ["firing"], 60, "the job-down alert")
        table = settings.layout.table(GOLD)
        version = delta_store.latest_version(table)
        wait_for(lambda: list(value(watched, f'lakehouse_table_version{{table="{GOLD}"}}').values()) == [version], 30,
                 "Prometheus' sample of the table's version")

        # a duplicate row, committed: the table is fresh again, and its validation fails
        clean = delta_store.read_table(table, version=version)
        write_deltalake(str(table), clean.slice(0, 1), mode="append")
        report = run_quality(settings, registry, [GOLD])
        assert "unique_windows" in {r.expectation for r in report.blocking_failures}, report.render()
        wait_for(lambda: statuses(watched, "LakehouseQualityFailing", table_name=GOLD) == ["firing"], 60,
                 lambda: f"the quality alert in ops.alerts: {recorded_alerts(watched)}")
        wait_for(lambda: statuses(watched, "LakehouseTableStale", table_name=GOLD)[:2] == ["firing", "resolved"],
                 60, "the stale alert resolved by the commit")

        # the duplicate removed and the table validated again whole: resolved
        write_deltalake(str(table), clean, mode="overwrite")
        assert run_quality(settings, registry, [GOLD], full=True).blocking_failures == []
        wait_for(lambda: statuses(watched, "LakehouseQualityFailing", table_name=GOLD) == ["firing", "resolved"],
                 60, "the quality alert resolved")
    assert not stack.status(watched)["up"]
    page = health_report.build(watched, registry).read_text()  # the pipeline-health report shows them too
    assert f"LakehouseQualityFailing resolved: {GOLD}" in page and "firing, not resolved since: " in page
    assert f"LakehouseQualityFailing ({GOLD})" not in page.split("firing, not resolved since: ")[1].split("</p>")[0]


def test_serve_runs_until_terminated_and_a_taken_port_is_named_with_its_setting(settings, lakehouse_env):
    """`monitor serve` (the compose service's command) starts the parts, stays, and stops them on SIGTERM (exit 0);
    `monitor up` with Prometheus' port taken says so in one line naming LAKEHOUSE_PROMETHEUS_PORT (exit 1)."""
    port = free_port_block([0, 1, 2])
    env = {**lakehouse_env, "LAKEHOUSE_METRICS_PORT": str(port), "LAKEHOUSE_PROMETHEUS_PORT": str(port + 1),
           "LAKEHOUSE_ALERTMANAGER_PORT": str(port + 2)}
    own = replace(settings, metrics_port=port, prometheus_port=port + 1, alertmanager_port=port + 2)
    serving = subprocess.Popen(LAKEHOUSE + ["monitor", "serve"], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: stack.status(own)["up"], 60, "the parts `monitor serve` starts")
        serving.send_signal(signal.SIGTERM)
        assert serving.wait(timeout=60) == 0
    finally:
        if serving.poll() is None:
            serving.kill()
    assert "ended: stopped by a signal" in serving.stderr.read()
    assert not any(part["answers"] or part["pid"] for part in stack.status(own)["parts"].values())

    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # Prometheus' connections may linger (TIME_WAIT)
        holder.bind(("127.0.0.1", port + 1))
        holder.listen()
        taken = run_cli(["monitor", "up"], env, timeout=120)
    try:
        assert taken.returncode == 1
        assert taken.stderr.strip().splitlines()[-1] == (
            f"lakehouse monitor up: port {port + 1} on 127.0.0.1 is taken by another program (prometheus's): free it, "
            "or set LAKEHOUSE_PROMETHEUS_PORT"), taken.stderr
    finally:
        run_cli(["monitor", "down"], env, timeout=120)
