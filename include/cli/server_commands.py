"""What the commands of the servers `lakehouse` starts in the background share (`kafka`, `storage`, `catalog`,
`sql`): their `up`, `down` and `status` subcommands, and how `up` and `down` report."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def server_subcommands(parser: argparse.ArgumentParser, name: str, up: str, down: str, status: str, *,
                       more: dict[str, str] | None = None, status_json: bool = True
                       ) -> dict[str, argparse.ArgumentParser]:
    """`lakehouse <name> up | down | <more> | status` (the action in `args.<name>_command`), each with its help;
    `status --json` unless `status_json` is False. The subcommands' parsers, by action (for arguments of their own)."""
    actions = parser.add_subparsers(dest=f"{name}_command", required=True)
    parsers = {action: actions.add_parser(action, help=text)
               for action, text in {"up": up, "down": down, **(more or {}), "status": status}.items()}
    if status_json:
        parsers["status"].add_argument("--json", action="store_true", help="as JSON")
    return parsers


def run_server_command(name: str, action: str, error: type[Exception], *, up: Callable[[], tuple[bool, str]],
                       printed: Callable[[], str], down: Callable[[], str], status: Callable[[], int]) -> int:
    """`lakehouse <name> <action>`: `up` starts the server (its message on stderr, then `printed()` on stdout),
    `down` stops it (its line on stdout), `status` is `status()`'s exit code; the `error` one raises is said in one
    line on stderr (exit code 1)."""
    try:
        if action == "up":
            _, message = up()
            sys.stderr.write(message + "\n")
            sys.stdout.write(printed().rstrip("\n") + "\n")
            return 0
        if action == "down":
            sys.stdout.write(down() + "\n")
            return 0
        return status()
    except error as exc:
        sys.stderr.write(f"lakehouse {name} {action}: {exc}\n")
        return 1
