"""A `lakehouse` command declared once: its name, help, arguments, handler, and what `main` must know of it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from include.settings import Settings

Handler = Callable[["Settings", argparse.Namespace], int]
Arguments = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Command:
    """One subcommand of `lakehouse`.

    `needs_root`: `main` checks that the lakehouse root is writable before the handler runs (commands that start or
    stop servers, or touch only Airflow, run whatever the state of an S3 root). `reports`: the output is a report on
    stdout, so INFO lines are silenced unless LAKEHOUSE_LOG_LEVEL asks for them; True for every run, or the names
    of the subcommands (`args.<name>_command`) that print one."""

    name: str
    help: str
    handler: Handler
    arguments: Arguments | None = None
    needs_root: bool = True
    reports: bool | tuple[str, ...] = False

    def add_to(self, subparsers: argparse._SubParsersAction) -> None:
        """Add this command's parser to `lakehouse`'s subcommands."""
        parser = subparsers.add_parser(self.name, help=self.help)
        if self.arguments is not None:
            self.arguments(parser)

    def prints_a_report(self, args: argparse.Namespace) -> bool:
        if isinstance(self.reports, bool):
            return self.reports
        return getattr(args, f"{self.name.replace('-', '_')}_command") in self.reports


def command(name: str, help: str, arguments: Arguments | None = None, *, needs_root: bool = True,
            reports: bool | tuple[str, ...] = False) -> Callable[[Handler], Command]:
    """Declare the decorated handler as the command `name` (see `Command`)."""

    def declare(handler: Handler) -> Command:
        return Command(name, help, handler, arguments, needs_root, reports)

    return declare


def print_status(info: dict, as_json: bool, text: str) -> int:
    """A server's status: `info` as JSON, or `text`; exit code 0 when it answers (`info["up"]`), else 1."""
    sys.stdout.write((json.dumps(info, indent=2) if as_json else text.rstrip("\n")) + "\n")
    return 0 if info["up"] else 1
