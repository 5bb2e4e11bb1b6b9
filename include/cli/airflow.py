"""`lakehouse airflow-setup`, `airflow` and `airflow-history`: Airflow with this project's DAGs and connections."""

from __future__ import annotations

import argparse
import os
import sys

from include import arguments
from include.airflow.environment import airflow_command, airflow_environment, run_airflow, setup_steps
from include.airflow.history import clean_history, keep_cleaning
from include.cli.command import command
from include.settings import Settings


@command("airflow-setup", "prepare Airflow's metadata DB: schema, and the lakehouse_spark pool")
def airflow_setup(settings: Settings, args: argparse.Namespace) -> int:
    """`airflow db migrate` and the `lakehouse_spark` pool (what `make airflow` and `lakehouse demo` run first)."""
    for step in setup_steps(settings):
        code = run_airflow(settings, step)
        if code != 0:
            sys.stderr.write(f"lakehouse airflow-setup: `airflow {' '.join(step)}` failed (exit {code})\n")
            return code
    return 0


def _airflow_arguments(airflow: argparse.ArgumentParser) -> None:
    airflow.add_argument("airflow_args", nargs=argparse.REMAINDER)


@command("airflow", "run an airflow command with this project's DAGs and connections", _airflow_arguments)
def airflow(settings: Settings, args: argparse.Namespace) -> int:
    line = airflow_command() + list(args.airflow_args)
    env = airflow_environment(settings)
    if args.airflow_args[:1] == ["standalone"]:  # say where the UI and its login are, whichever route started it
        home = env.get("AIRFLOW_HOME", "airflow_home")
        url = env.get("AIRFLOW__API__BASE_URL", "http://localhost:8080")
        sys.stderr.write(f"Airflow UI: {url}  (user: admin; the password is printed by 'standalone' below and kept "
                         f"in {home}/simple_auth_manager_passwords.json.generated)\n")
    os.execvpe(line[0], line, env)
    return 1  # not reached


def _history_arguments(history: argparse.ArgumentParser) -> None:
    history.add_argument("--every", type=arguments.positive_int, metavar="MINUTES",
                         help="clean again every MINUTES, for ever (the cluster's `airflow-history` part: 60)")


@command("airflow-history", "delete Airflow's runs, task instances and log files older than "
                            "LAKEHOUSE_AIRFLOW_HISTORY_DAYS (airflow db clean)", _history_arguments, needs_root=False)
def airflow_history(settings: Settings, args: argparse.Namespace) -> int:
    if args.every:
        keep_cleaning(settings, args.every)
    sys.stdout.write(clean_history(settings).render() + "\n")
    return 0
