"""What one validation of a registry document shares: its problems and what is known so far.

Every parser takes the :class:`LoadContext`, records problems into it (all are reported at once) and
reads the document-wide facts from it: the defaults, the landing and Kafka sources, which job writes each
table, and the schema and event time of each table already validated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from include.registry.durations import parse_duration
from include.registry.specs import SourceSpec
from include.registry.vocabulary import is_positive_int

T = TypeVar("T")


@dataclass
class LoadContext:
    problems: list[str] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, SourceSpec] = field(default_factory=dict)  # the `sources:` section: landing and Kafka inputs
    writers: dict[str, str] = field(default_factory=dict)  # table -> its (first) writer
    writer_sinks: dict[str, dict] = field(default_factory=dict)  # sink table -> its writer's raw sink
    table_schemas: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> schema (validated writers)
    event_times: dict[str, str] = field(default_factory=dict)  # table -> the event-time column it carries on
    table_renames: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> {new name: former name}

    def problem(self, where: str, text: str) -> None:
        """Record `where: text` (`where` names the job or source, and the field)."""
        self.problems.append(f"{where}: {text}")

    def unknown_fields(self, where: str, raw: dict, known: Iterable[str], hint: str = "") -> None:
        """Record the keys of `raw` outside `known`, if any."""
        unknown = set(raw) - set(known)
        if unknown:
            self.problem(where, f"unknown fields {sorted(unknown)}" + (f" {hint}" if hint else ""))

    def optional(self, where: str, raw: dict, key: str, parse: Callable[[Any], T]) -> T | None:
        """`raw[key]` parsed; None when absent, or invalid (the problem is recorded, naming `where`.`key`)."""
        if raw.get(key) is None:
            return None
        try:
            return parse(raw[key])
        except ValueError as exc:
            self.problem(f"{where}.{key}", str(exc))
            return None

    def flag(self, where: str, value: Any, default: bool) -> bool:
        """`value` when a boolean, else `default` (the problem recorded)."""
        if not isinstance(value, bool):
            self.problem(where, f"must be true or false, got {value!r}")
            return default
        return value

    def positive_int(self, where: str, value: Any) -> int | None:
        """`value` when a positive integer, else None (the problem recorded)."""
        if not is_positive_int(value):
            self.problem(where, f"must be a positive integer, got {value!r}")
            return None
        return value

    def positive_duration(self, where: str, value: Any) -> int | None:
        """The seconds of a positive duration, else None (the problem recorded)."""
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.problem(where, str(exc))
            return None
        if seconds <= 0:
            self.problem(where, f"must be positive, got {value!r}")
            return None
        return seconds
