"""Endurance: the shipped registry's whole live set for hours, with data flowing, maintenance on its schedule and
faults injected; nothing lost, nothing duplicated, nothing growing that should not (issue 41).

    .venv/bin/python bench/soak.py [--hours 2] [--events-per-second 200] [--vacuum-retention-hours H]
                                   [--out bench/results/soak.json] [--plots DIR]
    make soak        # 2 hours, every sink's and `_ops` table's history kept 1 hour (levels off within the run)
    make soak-1h     # one hour (faults and maintenance on the same clock)

In a fresh lakehouse with a Kafka broker: the live units are supervised as `lakehouse_live` does (a round every
5 minutes: a `supervise` process per unit at once, each watching its jobs for LAKEHOUSE_LIVE_WATCH_SECONDS);
every 10 s each landing and Kafka source gets its share of `--events-per-second` from the generator (duplicates,
disorder within the watermarks and malformed lines; no late events and event-time rounds far apart, so that every
gold table has one right answer); `lakehouse maintain` every `--maintenance-minutes` (30). Faults: a group driver
SIGKILLed every `--kill-minutes` (20; a different group each time), the broker stopped for 2 minutes once (at 40 %),
a `repartition` of a live job after a registry change once (at 60 %, through the checkpoint_reset DAG's steps: stop,
`lakehouse checkpoint repartition`, start again), a supervise process SIGKILLed in its watch once (at 50 %).

Sampled every `--sample-seconds` (60): resident memory per process kind (and per driver JVM), files and bytes per
table, per checkpoint, under `_ops/` and `_reports/`, Delta log length and log-checkpoint age per table, state rows
and bytes per job, batches against their trigger, landing-to-silver and -to-gold latency, backlog (rows landed or
produced not yet in bronze). At the end (data stopped, every job caught up, every driver stopped): every gold table
the oracle can recompute (tests/support/oracle.py) compared row for row, and bronze + quarantine == lines +
messages. After each maintenance: no data file left that VACUUM had to delete (removed by a commit, or written and
never committed, longer than the table's retention before the maintenance began); the files under `_ops/` after
each maintenance past its history hours H within (1 + maintenance interval / H) x those after the first (a
maintenance's replaced files stay until one finds them older than H). Writes the samples and verdicts
as JSON (`--out`), an SVG per series (`--plots`), prints a `PASS: ...` / `FAIL: ...` line per goal and exits 1 when
one fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.live_fleet import proc_stat, processes_of  # noqa: E402
from include.entrypoints import lakehouse_command  # noqa: E402
from include.generator import DEFAULT_START, GeneratorConfig  # noqa: E402
from include.kafka import broker  # noqa: E402
from include.settings import load_settings  # noqa: E402

TICK_SECONDS = 10  # data lands this often
ROUND_HOURS = 2  # of event time per tick: rounds never share a window, a session or a join bound
SUPERVISE_EVERY_SECONDS = 300  # lakehouse_live's schedule
RECOVERY_SECONDS = 180  # a fault's goal: every job healthy again within this
REPARTITIONED = "gold_user_activity_5m"
PAIRED = ("clickstream", "payments")  # generated from one configuration per round


class Soak:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.duration = args.hours * 3600
        self.work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
        self.bootstrap = f"127.0.0.1:{broker.free_port_pair()}"
        raw = yaml.safe_load(load_settings().registry_path.read_text())
        if args.vacuum_retention_hours is not None:  # every sink's VACUUM retention, to see history level off
            for job in raw["jobs"].values():
                if "sink" in job:
                    job["sink"].setdefault("maintenance", {})["vacuum_retention"] = \
                        f"{args.vacuum_retention_hours} hours"
        # the operational tables' history too (LAKEHOUSE_OPS_HISTORY_HOURS), else the default day
        self.ops_history_hours = args.vacuum_retention_hours or 24
        os.environ["LAKEHOUSE_OPS_HISTORY_HOURS"] = str(self.ops_history_hours)
        self.registry_file = self.work / "jobs.yaml"
        self.registry_file.write_text(yaml.safe_dump(raw, sort_keys=False))
        os.environ.update({"LAKEHOUSE_ROOT": str(self.work / "lakehouse"), "LAKEHOUSE_REGISTRY": str(self.registry_file),
                           "LAKEHOUSE_KAFKA_BOOTSTRAP": self.bootstrap, "PYSPARK_PYTHON": sys.executable,
                           "LAKEHOUSE_LOG_LEVEL": "INFO"})
        self.settings = load_settings()
        from include.airflow.environment import airflow_environment
        from include.registry import load_registry

        os.environ.update(airflow_environment(self.settings))  # connection spark_default, as the DAG's tasks have it
        self.registry = load_registry(self.registry_file)
        self.units = self.registry.live_units()
        self.live = [j for members in self.units.values() for j in members]
        self.stop = threading.Event()
        self.started = 0.0
        self.samples: list[dict] = []
        self.health: list[tuple[float, dict]] = []  # (elapsed, the live jobs not running and healthy: their problems)
        self.faults: list[dict] = []
        self.maintenance: list[dict] = []
        self.rounds: list[dict] = []  # per tick: elapsed, max event time, files per landing source
        self.landed = {"files": {}, "lines": 0, "messages": 0}
        self.supervisors: dict[str, subprocess.Popen] = {}
        self.cpu = CpuMeter()

    # --- the clock ---------------------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def at(self, fraction: float) -> float:
        return self.duration * fraction

    # --- data --------------------------------------------------------------------------------------------------

    def feed(self) -> None:
        from include.cli import generate_into
        from include.generator import generated_sources

        sources = generated_sources(self.registry)
        per_source = max(1, self.args.events_per_second * TICK_SECONDS // len(sources))
        number = 0
        while not self.stop.is_set():
            start = DEFAULT_START + timedelta(hours=ROUND_HOURS * number)
            files = {}
            for index, source in enumerate(sources.values()):
                # the payments are those of the round's clickstream purchases (the generator derives them from the
                # clickstream of the same configuration): the join has pairs to make
                seed = 100_000 * number + (0 if source.name in PAIRED else index + 1)
                config = GeneratorConfig(events=per_source, seed=seed, files=1, start=start, users=50,
                                         late_fraction=0.0)
                try:
                    result = generate_into(self.settings, source, config)
                except Exception as exc:  # the broker stopped on purpose: these messages are sent next tick
                    print(f"feed: {source.name}: {exc}", file=sys.stderr)
                    continue
                if source.kind == "kafka":
                    self.landed["messages"] += result.lines
                else:
                    self.landed["lines"] += result.lines
                    files[source.name] = [str(p) for p in result.files]
                    self.landed["files"].setdefault(source.name, []).append([str(p) for p in result.files])
            self.rounds.append({"elapsed": self.elapsed(), "start": start.isoformat(), "files": files})
            number += 1
            self.stop.wait(TICK_SECONDS)

    # --- supervision and faults --------------------------------------------------------------------------------

    def supervise_round(self, run: int) -> None:
        for unit in self.units:
            previous = self.supervisors.get(unit)
            if previous is not None and previous.poll() is None:
                continue  # still watching (its watch ends before the next round, as the DAG's max_active_runs)
            self.supervisors[unit] = subprocess.Popen(
                [sys.executable, "-c", "import sys; from include.airflow import tasks; "
                 "tasks.supervise(sys.argv[1], {}, sys.argv[2])", unit, f"soak-{run}"],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=(self.work / f"supervise-{unit}.log").open("ab"))

    def kill_group_driver(self, number: int) -> None:
        from include.records import groups

        names = [u for u in self.units if len(self.units[u]) > 1] or list(self.units)
        group = names[number % len(names)]
        pid = groups.driver_pid(self.settings, group)
        if pid is None:
            self.fault("kill driver", f"group {group}: no driver running")
            return
        from include.ops.processes import signal_group

        signal_group(pid, signal.SIGKILL)
        self.fault("kill driver", f"group {group}: driver {pid} SIGKILLed")

    def stop_broker(self) -> None:
        broker.down(self.settings)
        stopped = self.elapsed()
        self.fault("broker stopped", "for 2 minutes", recovery=False)
        self.stop.wait(120)
        broker.up(self.settings, self.bootstrap)
        self.fault("broker back", "after 2 minutes down", since=stopped)  # recovery counts from here

    def repartition(self) -> None:
        from include.airflow import tasks

        raw = yaml.safe_load(self.registry_file.read_text())
        current = raw["jobs"][REPARTITIONED].get("state_store", {}).get("shuffle_partitions") or \
            raw["defaults"]["state_store"]["shuffle_partitions"]
        raw["jobs"][REPARTITIONED].setdefault("state_store", {})["shuffle_partitions"] = 2 if current != 2 else 3
        self.registry_file.write_text(yaml.safe_dump(raw, sort_keys=False))
        stopped = tasks.stop_live_jobs({"dry_run": False, "targets": [REPARTITIONED], "mode": "repartition",
                                        "actor": "soak"})
        done = subprocess.run([*lakehouse_command(), "checkpoint", "repartition", REPARTITIONED],
                              cwd=REPO, capture_output=True, text=True, timeout=900)
        tasks.restart_live_jobs(stopped)
        self.fault("repartition", f"{REPARTITIONED}: stopped {stopped}, exit {done.returncode}: "
                                  f"{(done.stdout or done.stderr).strip()[-300:]}")

    def kill_supervisor(self) -> None:
        for unit, process in self.supervisors.items():
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                self.fault("kill supervisor", f"supervise {unit} SIGKILLed in its watch")
                return
        self.fault("kill supervisor", "no supervise process was watching", recovery=False)

    def maintain(self) -> None:
        begun, begun_at = self.elapsed(), time.time()
        done = subprocess.run([*lakehouse_command(), "maintain"], cwd=REPO, capture_output=True,
                              text=True, timeout=1800)
        self.maintenance.append({"elapsed": begun, "seconds": round(self.elapsed() - begun, 1),
                                 "exit": done.returncode, "failed": [line for line in done.stdout.splitlines()
                                                                     if " failed " in line]})
        print(f"[{self.elapsed() / 60:6.1f} min] maintenance: {self.maintenance[-1]}", flush=True)
        sample = self.sample()
        for table, files in sample["tables"].items():  # what VACUUM should have deleted and did not
            retention = self.registry.writer_of(table).sink.maintenance.vacuum_retention_hours
            files["overdue_history"] = overdue_history(root_of(self.settings) / table, begun_at - retention * 3600)
        self.samples.append({**sample, "after_maintenance": True})

    def fault(self, kind: str, detail: str, recovery: bool = True, since: float | None = None) -> None:
        """A fault now (`since`: the moment it began, when that was earlier: the state to return to is that before)."""
        self.faults.append({"elapsed": self.elapsed(), "kind": kind, "detail": detail, "recovery": recovery,
                            "since": self.elapsed() if since is None else since})
        print(f"[{self.elapsed() / 60:6.1f} min] fault: {kind}: {detail}", flush=True)

    # --- sampling ----------------------------------------------------------------------------------------------

    def problems_now(self) -> dict[str, list[str]]:
        """The live jobs that are not running and healthy, with their problems (none: all well)."""
        from include.ops.health import check_job

        states = {j: check_job(self.settings, self.registry, j) for j in self.live}
        return {j: list(h.problems) or ["not running"] for j, h in states.items() if not (h.running and h.healthy)}


    def sample(self) -> dict:
        from include.storage import delta as delta_store

        root = root_of(self.settings)
        supervisors = {p.pid for p in self.supervisors.values()}
        every = processes_of(self.settings.root)
        processes = [(pid, "supervisor" if pid in supervisors else kind, resident)
                     for pid, kind, resident in every if kind != "broker_jvm"]
        by_kind: dict[str, int] = {}
        for _, kind, resident in processes:
            by_kind[kind] = by_kind.get(kind, 0) + resident
        tables = {}
        for table in self.registry.tables_written():
            path = root / table
            if (path / "_delta_log").is_dir():
                tables[table] = _table_files(path) | {"rows": delta_store.count_rows(self.settings.layout.table(table))}
        ops = {p.name: _table_files(p) for p in (root / "_ops").iterdir() if (p / "_delta_log").is_dir()} \
            if (root / "_ops").is_dir() else {}
        return {
            "elapsed": round(self.elapsed(), 1),
            "resident_mb_by_kind": {k: round(v / 2**20) for k, v in sorted(by_kind.items())},
            "driver_jvms_mb": sorted(round(r / 2**20) for _, k, r in processes if k == "driver_jvm"),
            "cpu_seconds_by_role": self.cpu.read(every),  # since the last sample (the broker's too)
            "load_average": os.getloadavg()[0],
            "tables": tables, "ops_tables": ops,
            "checkpoints": {p.name: _tree(p) for p in (root / "_checkpoints").iterdir() if p.is_dir()}
            if (root / "_checkpoints").is_dir() else {},
            "ops": _tree(root / "_ops"), "reports": _tree(root / "_reports"),
            "logs": _tree(self.settings.local / "_ops" / "logs"),
            "state": self.state_by_job(),
            "latency_seconds": self.latency(),
            "backlog_rows": self.landed["lines"] + self.landed["messages"] - self.bronze_rows(),
            "problems": (problems := self.problems_now()),
            "healthy": not problems,
        }

    def bronze_rows(self) -> int:
        from include.storage import delta as delta_store

        rows = 0
        for job in self.registry.jobs.values():
            if job.transform_kind == "parse_json":
                for table in job.tables_written():
                    rows += delta_store.count_rows(self.settings.layout.table(table))
        return rows

    def state_by_job(self) -> dict:
        rows = self.progress(since=self.elapsed() - 10 * self.args.sample_seconds)
        latest: dict[str, dict] = {}
        for r in rows:
            if r["job"] not in latest or r["batch_id"] >= latest[r["job"]]["batch_id"]:
                latest[r["job"]] = r
        return {j: {"state_rows": r["state_rows_total"], "state_mb": round((r["state_memory_used_bytes"] or 0) / 2**20, 1)}
                for j, r in latest.items() if r["state_rows_total"] is not None}

    def progress(self, since: float) -> list[dict]:
        from include.records.query_progress import PROGRESS_TABLE
        from include.storage import delta as delta_store

        path = self.settings.layout.ops_table(PROGRESS_TABLE)
        if not delta_store.table_exists(path):
            return []
        cutoff = datetime.now(UTC) - timedelta(seconds=self.elapsed() - since)
        return [r for r in delta_store.read_table(path).to_pylist() if r["progress_time"] and r["progress_time"] >= cutoff]

    def latency(self) -> dict:
        """Seconds from the landing of the newest round a table has whole (its latest event time) to now."""
        from include.storage import delta as delta_store

        found = {}
        for name, table, column in (("silver", "silver/clickstream", "event_time"),
                                    ("gold", "gold/user_activity_5m", "window_end")):
            path = self.settings.layout.table(table)
            if not delta_store.table_exists(path) or not self.rounds:
                continue
            values = delta_store.read_table(path, columns=[column])[column].to_pylist()
            newest = max((v for v in values if v is not None), default=None)
            if newest is None:
                continue
            done = [r for r in self.rounds if datetime.fromisoformat(r["start"]) <= newest]
            if done:
                following = self.rounds[len(done)] if len(done) < len(self.rounds) else None
                found[name] = round(self.elapsed() - following["elapsed"], 1) if following else 0.0
        return found

    # --- the run -----------------------------------------------------------------------------------------------

    def run(self) -> dict:
        broker.up(self.settings, self.bootstrap)
        self.started = time.monotonic()
        feeder = threading.Thread(target=self.feed, daemon=True)
        feeder.start()
        schedule = [(self.at(0.4), self.stop_broker), (self.at(0.5), self.kill_supervisor),
                    (self.at(0.6), self.repartition)]
        schedule += [(m * 60.0, (lambda n=n: self.kill_group_driver(n))) for n, m in
                     enumerate(range(self.args.kill_minutes, int(self.duration / 60), self.args.kill_minutes))]
        schedule += [(m * 60.0, self.maintain) for m in
                     range(self.args.maintenance_minutes, int(self.duration / 60), self.args.maintenance_minutes)]
        schedule.sort(key=lambda item: item[0])
        next_supervision = next_sample = 0.0
        run = 0
        try:
            while self.elapsed() < self.duration:
                now = self.elapsed()
                if now >= next_supervision:
                    self.supervise_round(run)
                    run += 1
                    next_supervision += SUPERVISE_EVERY_SECONDS
                while schedule and schedule[0][0] <= now:
                    _, action = schedule.pop(0)
                    threading.Thread(target=action, daemon=True).start()
                if now >= next_sample:
                    next_sample += self.args.sample_seconds
                    try:
                        self.samples.append(self.sample())
                    except Exception as exc:  # a sample lost to a race with the jobs must not end hours of run
                        print(f"[{now / 60:6.1f} min] sample failed: {exc!r}", flush=True)
                        continue
                    s = self.samples[-1]
                    print(f"[{now / 60:6.1f} min] problems={s['problems']} backlog={s['backlog_rows']} "
                          f"latency={s['latency_seconds']} resident={s['resident_mb_by_kind']}", flush=True)
                problems = self.problems_now()  # stamped when seen: a fault begun during the look is before it
                self.health.append((round(self.elapsed(), 1), problems))
                time.sleep(10)
            self.stop.set()
            feeder.join(timeout=120)
            caught_up = self.catch_up()
            self.samples.append(self.sample())
        finally:
            self.stop.set()
            for process in self.supervisors.values():
                if process.poll() is None:
                    process.kill()
            subprocess.run([*lakehouse_command(), "stop", "--all", "--wait", "300"], cwd=REPO,
                           capture_output=True, timeout=400)
            for pid, _, _ in processes_of(self.settings.root):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        checks = self.correctness() if caught_up else {"caught up": (False, "the jobs did not catch up in 10 minutes")}
        broker.down(self.settings)
        return self.verdicts(checks)

    def catch_up(self) -> bool:
        """After the data stopped: wait (supervising) until bronze has every line and message and nothing moves."""
        deadline = time.monotonic() + 600
        last = None
        rounds = 0
        while time.monotonic() < deadline:
            self.supervise_round(10_000 + rounds)
            rounds += 1
            state = (self.bronze_rows(), self.latency().get("gold"))
            if state[0] == self.landed["lines"] + self.landed["messages"] and state == last:
                return True
            last = state
            for _ in range(6):  # the health timeline goes on: a fault near the end has its recovery measured
                self.health.append((round(self.elapsed(), 1), self.problems_now()))
                time.sleep(10)
        return False

    # --- verdicts ----------------------------------------------------------------------------------------------

    def correctness(self) -> dict[str, tuple[bool, str]]:
        from tests.support.helpers import gold_rows, session_summary_rows
        from tests.support.oracle import expected_alerts, expected_gold, expected_session_summaries

        checks = {}
        landed = self.landed["lines"] + self.landed["messages"]
        bronze = self.bronze_rows()
        checks["bronze + quarantine == lines + messages"] = (bronze == landed, f"{bronze} rows for {landed}")
        drops = [[Path(f) for f in r["files"].get("clickstream", [])] for r in self.rounds]
        expected = expected_gold(self.registry, [d for d in drops if d])
        for table, rows in expected.items():
            actual = gold_rows(self.settings, table)
            missing, extra = len(set(rows) - set(actual)), len(set(actual) - set(rows))
            wrong = sum(1 for k in set(rows) & set(actual) if rows[k] != actual[k])
            checks[f"{table} == oracle"] = (rows == actual, f"{len(rows)} rows expected; missing {missing}, extra "
                                                            f"{extra}, different {wrong}")
        clicks = [d for d in drops if d]
        want, got = expected_session_summaries(self.registry, clicks), session_summary_rows(self.settings)
        checks["gold/user_session_summaries == oracle"] = (want == got, f"{len(want)} expected, {len(got)} written")
        checks["gold/order_payments == silver's pairs"] = self.join_check()
        logins = [[Path(f) for f in r["files"].get("logins", [])] for r in self.rounds]
        if "gold_fraud_alerts" in self.registry.jobs:
            from tests.support.helpers import fraud_alert_rows

            want, got = expected_alerts(self.registry, [d for d in logins if d]), fraud_alert_rows(self.settings, True)
            checks["gold/alerts (fraud) == oracle"] = (want == got, f"{len(want)} expected, {len(got)} written")
        return checks

    def join_check(self) -> tuple[bool, str]:
        """Every pair silver's purchases and payments make within the bound, once; unpaid rows only for purchases
        without one, and every purchase past the job's watermark decided (recomputed as tests/test_joins.py does)."""
        from include import checkpoints
        from include.storage import delta as delta_store
        from tests.test_joins import expected_join

        rows = delta_store.read_table(self.settings.layout.table("gold/order_payments")).to_pylist()
        pairs, unmatched, within = expected_join(self.settings, self.registry)
        paid = {(r["order_id"], r["payment_id"]): (r["order_time"], r["payment_time"], r["amount"])
                for r in rows if r["paid"]}
        unpaid = [r["order_id"] for r in rows if not r["paid"]]
        watermark_ms = checkpoints.committed_watermark_ms(self.settings.layout.checkpoint("gold_order_payments")) or 0
        decided = {o for o, t in unmatched.items() if (t + within).timestamp() * 1000 < watermark_ms}
        ok = (paid == pairs and len(paid) == sum(r["paid"] for r in rows) and len(set(unpaid)) == len(unpaid)
              and set(unpaid) <= set(unmatched) and decided <= set(unpaid))
        return ok, (f"{len(pairs)} pairs expected, {len(paid)} written ({len(set(paid) ^ set(pairs))} differ); "
                    f"{len(unpaid)} unpaid, {len(decided - set(unpaid))} decided purchases missing")

    def verdicts(self, checks: dict[str, tuple[bool, str]]) -> dict:
        goals: list[tuple[bool, str]] = []
        for name, (ok, detail) in checks.items():
            goals.append((ok, f"no row lost or duplicated: {name} ({detail})"))
        for fault in (f for f in self.faults if f["recovery"]):
            took, before = recovery(self.health, fault["elapsed"], fault["since"])
            state = "every job healthy" if not before else f"back to its state before the fault: {_pairs(before)}"
            goals.append((took is not None and took <= RECOVERY_SECONDS,
                          f"recovered by itself within {RECOVERY_SECONDS} s of {fault['kind']} at "
                          f"{fault['elapsed'] / 60:.1f} min: {'never' if took is None else f'{took} s'} ({state})"))
        between = [p for t, p in self.health if t > RECOVERY_SECONDS  # after the start, outside faults' recoveries
                   and not any(f["since"] <= t <= f["elapsed"] + RECOVERY_SECONDS for f in self.faults)]
        healthy = sum(1 for problems in between if not problems)
        goals.append((healthy == len(between), f"every live job healthy between faults: in {healthy} of "
                                                f"{len(between)} looks; problems seen: "
                                                f"{_pairs(set().union(*(_pair_set(p) for p in between)))}"))
        reference, last = self.windows()
        for kind in sorted({k for s in self.samples for k in s["resident_mb_by_kind"]}):
            early = _mean([s["resident_mb_by_kind"].get(kind, 0) for s in reference])
            late = _mean([s["resident_mb_by_kind"].get(kind, 0) for s in last])
            # `other`: a command's short-lived helpers (a shell, a chmod of Hadoop's) caught by a sample, no process
            # that lives; a mean of a few hundred KB (0 to 4 MB a sample) failed the fourth soak's verdict
            if early and not kind.startswith("other"):
                goals.append((late <= early * 1.1, f"resident memory flat: {kind} {early:.0f} MB at the reference, "
                                                   f"{late:.0f} MB in the last window"))
        after = [s for s in self.samples if s.get("after_maintenance")]
        for s in after:
            worst = max((t["snapshot_files"], name) for name, t in {**s["tables"], **s["ops_tables"]}.items())
            goals.append((worst[0] <= self.args.files_bound, f"files bounded after the maintenance at "
                                                              f"{s['elapsed'] / 60:.1f} min: at most "
                                                              f"{self.args.files_bound} per table, {worst[1]} has "
                                                              f"{worst[0]}"))
        # After a maintenance `_ops/` holds the commits of the last H hours and the files replaced in them; a
        # maintenance's replacements stay until the first one that finds them older than H: between H and H + one
        # maintenance interval of files, whatever the run's length
        settled = [s for s in after if s["elapsed"] >= self.ops_history_hours * 3600]  # its history kept whole
        factor = 1 + self.args.maintenance_minutes / (self.ops_history_hours * 60)
        for s in settled[1:]:
            bound = round(settled[0]["ops"]["files"] * factor)
            goals.append((s["ops"]["files"] <= bound, f"_ops/ bounded after the maintenance at {s['elapsed'] / 60:.1f} "
                                                      f"min: {s['ops']['files']} files (bound {bound}: {factor:.2f} x "
                                                      f"the {settled[0]['ops']['files']} after the first maintenance "
                                                      f"past its {self.ops_history_hours} h of history)"))
        for s in after:
            overdue = {name: t["overdue_history"] for name, t in s["tables"].items() if t.get("overdue_history")}
            history = sum(t["mb"] - (t.get("snapshot_mb") or 0) - (t.get("log_mb") or 0) for t in s["tables"].values())
            goals.append((not overdue, f"history bounded by VACUUM's retention after the maintenance at "
                                       f"{s['elapsed'] / 60:.1f} min: {history:.0f} MB of history, files past their "
                                       f"table's retention left: {overdue or 'none'}"))
        ends = [s for s in (reference[-1:] + last[-1:]) if s]
        ratio = [_bytes(s) / max(1, _rows(s)) for s in ends]
        if len(ratio) == 2:
            logs = round(sum(t.get("log_mb") or 0 for t in ends[1]["tables"].values()))
            history = round(sum(t["mb"] - (t.get("snapshot_mb") or 0) - (t.get("log_mb") or 0)
                                for t in ends[1]["tables"].values()))
            goals.append((ratio[1] <= ratio[0] * 1.2, f"the tables' data grows with the rows only: {ratio[0]:.0f} bytes "
                                                       f"per row at the reference, {ratio[1]:.0f} at the end (their "
                                                       f"latest versions; on disk besides: {history} MB of history "
                                                       f"kept for VACUUM's retention, {logs} MB of Delta logs)"))
        for series, pick in (("batch duration p95", self.batch_p95), ("latency p95", self.latency_p95)):
            first, final = pick(0, self.at(0.25)), pick(self.at(0.75), self.duration)
            if first and final:
                goals.append((final <= first * 1.2, f"{series} flat: {first:.1f} s in the first quarter, "
                                                    f"{final:.1f} s in the last"))
        for ok, line in goals:
            print(f"{'PASS' if ok else 'FAIL'}: {line}")
        return {"hours": self.args.hours, "events_per_second": self.args.events_per_second, "work": str(self.work),
                "live_jobs": len(self.live), "units": list(self.units), "faults": self.faults,
                "maintenance": self.maintenance, "samples": self.samples, "health": self.health,
                "landed": {"lines": self.landed["lines"], "messages": self.landed["messages"]},
                "goals": [{"pass": ok, "goal": line} for ok, line in goals], "passed": all(ok for ok, _ in goals)}

    def windows(self) -> tuple[list[dict], list[dict]]:
        """The reference samples (around minute 30, or a quarter of a shorter run) and the last window's."""
        mark = min(1800.0, self.at(0.25))
        reference = [s for s in self.samples if abs(s["elapsed"] - mark) <= max(300.0, self.args.sample_seconds)]
        last = [s for s in self.samples if s["elapsed"] >= self.duration - min(1800.0, self.at(0.25))]
        return reference, last

    def batch_p95(self, start: float, end: float) -> float | None:
        rows = [r["batch_duration_ms"] / 1000 for r in self.progress(since=start) if r["batch_duration_ms"]
                and r["num_input_rows"] and _elapsed_of(r, self) <= end]
        return _p95(rows)

    def latency_p95(self, start: float, end: float) -> float | None:
        return _p95([s["latency_seconds"]["gold"] for s in self.samples
                     if start <= s["elapsed"] <= end and "gold" in s["latency_seconds"]])


def _pair_set(problems: dict[str, list[str]]) -> set[tuple[str, str]]:
    return {(job, problem) for job, found in problems.items() for problem in found}


def _pairs(pairs: set[tuple[str, str]]) -> str:
    return ", ".join(f"{job} {problem}" for job, problem in sorted(pairs)) or "none"


def recovery(health: list[tuple[float, dict]], at: float, since: float) -> tuple[float | None, set[tuple[str, str]]]:
    """Seconds from a fault at `at` (begun at `since`) until every live job runs again with no problem it did not
    have just before the fault began (None: never), and those earlier problems (a job behind on its batches before a
    driver is killed is not made healthy by the restart; it must not be made worse)."""
    before = next((_pair_set(p) for t, p in reversed(health) if t <= since), set())
    before = {pair for pair in before if pair[1] not in ("not running", "stalled")}
    back = next((t for t, p in health if t > at and _pair_set(p) <= before), None)
    return (None if back is None else round(back - at)), before


def _elapsed_of(row: dict, soak: Soak) -> float:
    return soak.elapsed() - (datetime.now(UTC) - row["progress_time"]).total_seconds()


def _p95(values: list[float]) -> float | None:
    if len(values) < 5:
        return None
    return statistics.quantiles(values, n=20)[-1]


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds used: user + system) of a process; None once it is gone."""
    try:
        fields = proc_stat(pid)
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None


def role_of(pid: int, kind: str) -> str:
    """What a lakehouse process works for: the group or job its driver runs (found on it or an ancestor's command
    line), the maintenance, a checkpoint action, a supervise round; with its kind (driver_jvm, python_worker...)."""
    current = pid
    for _ in range(6):
        try:
            argv = [a.decode(errors="replace") for a in Path(f"/proc/{current}/cmdline").read_bytes().split(b"\0")]
        except OSError:
            break
        if "--group" in argv[:-1]:
            return f"group {argv[argv.index('--group') + 1]}/{kind}"
        for marker in ("maintain", "checkpoint", "supervise"):
            if any(marker in a for a in argv[1:4]):
                return f"{marker}/{kind}"
        if "--trigger" in argv and argv.index("--trigger") > 0:
            return f"job {argv[argv.index('--trigger') - 1]}/{kind}"
        parent = _stat(current)
        if parent is None or parent[0] <= 1:
            break
        current = parent[0]
    return f"other/{kind}"


class CpuMeter:
    """CPU seconds used per process role between two readings (what a process used before it ended since the
    last reading is not counted: at most one interval of a short-lived process)."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.own = sum(os.times()[:2])

    def read(self, processes: list[tuple[int, str, int]]) -> dict[str, float]:
        used: dict[str, float] = {}
        current: dict[int, float] = {}
        for pid, kind, _ in processes:
            stat = _stat(pid)
            if stat is None:
                continue
            current[pid] = stat[1]
            role = role_of(pid, kind)
            used[role] = used.get(role, 0.0) + stat[1] - self.seen.get(pid, 0.0)
        own = sum(os.times()[:2])
        used["soak (sampling, feeding)"] = own - self.own
        self.own, self.seen = own, current
        return {role: round(seconds, 1) for role, seconds in sorted(used.items())}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _sizes(path: Path, keep=lambda p: True) -> list[int]:
    """The sizes of the files under `path` (files that go while it is read, a checkpoint's temporaries, are left out)."""
    sizes = []
    for dirpath, _, names in os.walk(path):
        for name in names:
            file = Path(dirpath) / name
            if keep(file):
                try:
                    sizes.append(file.stat().st_size)
                except FileNotFoundError:
                    continue
    return sizes


def _tree(path: Path) -> dict:
    sizes = _sizes(path)
    return {"files": len(sizes), "mb": round(sum(sizes) / 2**20, 2)}


def _table_files(path: Path) -> dict:
    """Data files on disk, the snapshot's, bytes, commits in the log and the age of its newest log checkpoint."""
    from deltalake import DeltaTable

    log = path / "_delta_log"
    checkpoints = sorted(p.stat().st_mtime for p in log.glob("*.checkpoint*.parquet") if p.exists())
    try:
        import pyarrow as pa

        added = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
        snapshot, snapshot_mb = added.num_rows, round(sum(added["size_bytes"].to_pylist()) / 2**20, 2)
    except Exception:  # a table mid-commit or with a feature delta-rs does not read: counted as unknown
        snapshot, snapshot_mb = -1, None
    tree = _tree(path)
    return {"data_files": len(_sizes(path, lambda p: p.suffix == ".parquet" and "_delta_log" not in p.parts)),
            "snapshot_files": snapshot, "mb": tree["mb"],
            "snapshot_mb": snapshot_mb,  # the data files of the latest version (the rest: history and the log)
            "log_mb": _tree(log)["mb"], "log_commits": sum(1 for _ in log.glob("*.json")),
            "log_checkpoint_age_s": round(time.time() - checkpoints[-1]) if checkpoints else None}


def root_of(settings) -> Path:
    return Path(str(settings.root))


def overdue_history(path: Path, cutoff: float) -> int:
    """Data files on disk that the table's latest version does not reference and that VACUUM, run at `cutoff` +
    the retention, had to delete: removed by a commit before `cutoff`, or never committed and written before it."""
    from deltalake import DeltaTable

    log = path / "_delta_log"
    try:
        live = set(DeltaTable(str(path)).file_uris())
    except Exception:  # a table mid-commit: not judged in this sample
        return 0
    removed: dict[str, float] = {}
    for commit in log.glob("*.json"):
        for line in commit.read_text().splitlines():
            action = json.loads(line).get("remove")
            if action:
                removed[action["path"]] = action.get("deletionTimestamp", 0) / 1000
    overdue = 0
    for dirpath, _, names in os.walk(path):
        if "_delta_log" in Path(dirpath).parts:
            continue
        for name in names:
            file = Path(dirpath) / name
            if file.suffix != ".parquet" or str(file) in live or file.as_uri() in live:
                continue
            relative = urllib.parse.quote(str(file.relative_to(path)), safe="/=")
            try:
                gone_at = removed.get(relative, removed.get(str(file.relative_to(path)), file.stat().st_mtime))
            except FileNotFoundError:
                continue
            overdue += gone_at < cutoff
    return overdue


def _rows(sample: dict) -> int:
    return sum(t.get("rows", 0) for t in sample["tables"].values())


def _bytes(sample: dict) -> float:
    """The bytes of the tables' latest versions (all on disk in a sample taken before they were told apart)."""
    return sum(t["mb"] if t.get("snapshot_mb") is None else t["snapshot_mb"] for t in sample["tables"].values()) * 2**20


def plots(result: dict, folder: Path) -> list[Path]:
    """An SVG per series (minutes on the x axis), as the health report draws its charts."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    samples = result["samples"]
    minutes = [s["elapsed"] / 60 for s in samples]
    series = {
        "resident memory (MB) by process kind": {k: [s["resident_mb_by_kind"].get(k, 0) for s in samples]
                                                 for k in {k for s in samples for k in s["resident_mb_by_kind"]}},
        "data files per table": {t: [s["tables"].get(t, {}).get("data_files") for s in samples]
                                 for t in {t for s in samples for t in s["tables"]}},
        "operational tables: data files": {t: [s["ops_tables"].get(t, {}).get("data_files") for s in samples]
                                           for t in {t for s in samples for t in s["ops_tables"]}},
        "operational tables: log commits": {t: [s["ops_tables"].get(t, {}).get("log_commits") for s in samples]
                                            for t in {t for s in samples for t in s["ops_tables"]}},
        "MB on disk": {"tables": [sum(t["mb"] for t in s["tables"].values()) for s in samples],
                       "checkpoints": [sum(c["mb"] for c in s["checkpoints"].values()) for s in samples],
                       "_ops": [s["ops"]["mb"] for s in samples], "logs": [s["logs"]["mb"] for s in samples]},
        "state rows per job": {j: [s["state"].get(j, {}).get("state_rows") for s in samples]
                               for j in {j for s in samples for j in s["state"]}},
        "latency (s)": {k: [s["latency_seconds"].get(k) for s in samples] for k in ("silver", "gold")},
        "backlog (rows)": {"landed or produced, not in bronze": [s["backlog_rows"] for s in samples]},
    }
    written = []
    for title, lines in series.items():
        figure, axis = plt.subplots(figsize=(10, 3.2))
        for label, values in sorted(lines.items()):
            axis.plot(minutes, values, marker="o", markersize=3, label=label)
        for fault in result["faults"]:
            axis.axvline(fault["elapsed"] / 60, color="red", alpha=0.3, linestyle="--")
        axis.set_title(title)
        axis.set_xlabel("minutes (red: faults)")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize="small")
        path = folder / (title.split(" (")[0].replace(" ", "_").replace(":", "").replace("/", "_") + ".svg")
        figure.savefig(path, format="svg", bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--events-per-second", type=int, default=200, help="over all sources")
    parser.add_argument("--kill-minutes", type=int, default=20, help="a group driver SIGKILLed this often")
    parser.add_argument("--maintenance-minutes", type=int, default=30, help="`lakehouse maintain` this often")
    parser.add_argument("--sample-seconds", type=int, default=60)
    parser.add_argument("--files-bound", type=int, default=50,
                        help="the goal's bound: files in any table's snapshot right after a maintenance")
    parser.add_argument("--vacuum-retention-hours", type=int, default=None,
                        help="every sink's VACUUM retention (default: the registry's, 7 days) and the operational "
                             "tables' (LAKEHOUSE_OPS_HISTORY_HOURS, default 24): shorter than the run, the history on "
                             "disk levels off within it")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "soak.json")
    parser.add_argument("--plots", type=Path, default=None, help="a folder for the SVGs (default: next to --out)")
    args = parser.parse_args()
    result = Soak(args).run()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    drawn = plots(result, args.plots or args.out.with_suffix(""))
    print(f"results: {args.out}; plots: {drawn[0].parent if drawn else '-'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
