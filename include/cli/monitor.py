"""`lakehouse monitor`: Prometheus and Alertmanager watching the lakehouse (include/monitor)."""

from __future__ import annotations

import argparse
import sys

from include.cli.command import command, print_status
from include.cli.server_commands import server_subcommands
from include.monitor import stack
from include.monitor.configs import MonitorError
from include.settings import Settings


def _monitor_arguments(monitor: argparse.ArgumentParser) -> None:
    server_subcommands(monitor, "monitor",
                       up="write Prometheus' and Alertmanager's files and the alert rules from the registry, check "
                          "them (promtool, amtool), start the metrics endpoint, Alertmanager and Prometheus in the "
                          "background (what answers already reloads them), wait until each answers",
                       down="stop what `monitor up` started; the samples and silences stay",
                       status="each part, its address and whether it answers",
                       more={"serve": "`up`, then stay in the foreground until stopped (SIGTERM, Ctrl-C) or a part "
                                      "dies, then `down` (a container's command)"})


@command("monitor", "Prometheus and Alertmanager on the lakehouse's metrics, with alert rules generated from the "
                    "registry and alerts recorded in ops.alerts", _monitor_arguments, needs_root=False, reports=True)
def monitor(settings: Settings, args: argparse.Namespace) -> int:
    try:
        if args.monitor_command == "up":
            sys.stdout.write("\n".join(stack.up(settings)) + "\n")
        elif args.monitor_command == "down":
            sys.stdout.write("\n".join(stack.down(settings)) + "\n")
        elif args.monitor_command == "serve":
            why = stack.serve(settings)
            sys.stderr.write(f"lakehouse monitor serve: ended: {why}\n")
            return 0 if why == stack.STOPPED else 1
        else:
            info = stack.status(settings)
            return print_status(info, args.json, stack.render(info))
    except MonitorError as exc:
        sys.stderr.write(f"lakehouse monitor {args.monitor_command}: {exc}\n")
        return 1
    return 0
