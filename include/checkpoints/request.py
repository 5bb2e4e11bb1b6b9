"""A checkpoint action request: one grammar for `lakehouse checkpoint <mode>`, the spark-submit entry point and
the `checkpoint_reset` DAG's form.

:data:`MODES` is the table of modes: each one's help, whether it destroys state, and its options. From it come
the argparse arguments (:func:`add_arguments`), the DAG's params (:func:`param_specs`), a typed
:class:`CheckpointRequest` from parsed arguments (:func:`from_args`) or from the form (:func:`from_params`), and
argv back again (:meth:`CheckpointRequest.to_argv`). The rules of a request's shape are checked once, in
:meth:`CheckpointRequest.__post_init__`, whatever the entrance; rules that need the registry, the checkpoint or
the tables belong to each mode's action (spark_jobs.checkpoint_actions).

Nothing here imports more than the standard library and the registry: the DAG file builds its form from it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from include import arguments


class RequestInvalid(ValueError):
    """The request is malformed (unknown mode, missing or contradictory options); one line says what."""


def _iso_timestamp(text: str) -> str:
    return arguments.timestamp(text).astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Option:
    """One option of a mode: `name` is the request field and the DAG param, `--name-with-dashes` the flag."""

    name: str
    help: str
    parse: Callable[[str], Any] | None = None  # None: a flag (true when given)
    required: bool = False
    group: str = ""  # the options of a group are mutually exclusive, and one of them is required
    param_type: str = ""  # JSON Schema type of the DAG param ("integer", "string"; a flag is "boolean")
    minimum: int | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def is_flag(self) -> bool:
        return self.parse is None


@dataclass(frozen=True)
class Mode:
    name: str
    help: str
    destructive: bool = False  # discards state or rows: refused under reset_allowed: false; the DAG asks a person
    changes: bool = True  # false: it only checks (no --dry-run, no --keep)
    one_job: bool = False
    options: tuple[Option, ...] = ()
    refused_flags: tuple[tuple[str, str], ...] = ()  # (flag, why this mode does not take it)


KEEP = Option("keep", "old checkpoints kept aside (default 5)", arguments.positive_int)
POSITION = "position"  # reset-checkpoint's group: where the new checkpoint starts reading

MODES: dict[str, Mode] = {m.name: m for m in (
    Mode("full-refresh", "empty the sink tables (history kept), new checkpoint, reprocess all source data",
         destructive=True,
         options=(Option("cascade", "also rebuild every downstream job (required when there are any)"),)),
    Mode("reset-checkpoint", "keep the sink table, new checkpoint at a source position", destructive=True, options=(
        Option("from_version", "a version of the job's source table (a Delta source)", arguments.non_negative_int,
               group=POSITION, param_type="integer", minimum=0),
        Option("from_timestamp", "the first version committed (a Kafka source: in each partition, the first message "
                                 "produced) at or after this time (ISO-8601, e.g. 2026-11-23T10:00:00Z)",
               _iso_timestamp, group=POSITION, param_type="string"),
        Option("from_latest", "only what is committed (produced) from now on", group=POSITION),
        Option("from_earliest", "every message still on the topic (a Kafka source)", group=POSITION),
    )),
    Mode("repartition", "move the state to the registry's state_store.shuffle_partitions (nothing reprocessed)",
         refused_flags=(("--partitions", "repartition takes the count from the registry's "
                                         "state_store.shuffle_partitions, its only source: set it there, then run "
                                         "repartition"),)),
    Mode("rollback", "checkpoint and tables back to what batch B committed (_ops/batch_ledger); a re-run repeats it",
         destructive=True, one_job=True, options=(
             Option("to_batch", "the batch whose result to go back to", arguments.non_negative_int, required=True,
                    param_type="integer", minimum=0),)),
    Mode("resume-action", "finish the checkpoint action a crash or a failure left unfinished on the job (its "
                          "journal names the steps not done yet)", one_job=True),
    Mode("verify", "after an action: the plan is `resume` and an available-now run resumes from the checkpoint "
                   "and commits (--no-run: the plan and last batch only)", changes=False,
         options=(Option("no_run", "check the plan only; run nothing"),)),
)}
APPLIED_MODES = tuple(name for name, mode in MODES.items() if mode.changes)  # the modes that act on checkpoints


@dataclass(frozen=True)
class CheckpointRequest:
    """What to do to which jobs' checkpoints; a malformed request raises :class:`RequestInvalid`."""

    mode: str
    jobs: tuple[str, ...]
    dry_run: bool = False
    keep: int = 5
    actor: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # the mode's options that were given

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise RequestInvalid(f"unknown mode {self.mode!r} (known: {', '.join(MODES)})")
        mode = MODES[self.mode]
        object.__setattr__(self, "jobs", tuple(self.jobs))
        object.__setattr__(self, "options", {k: v for k, v in dict(self.options).items()
                                             if v is not None and v is not False})
        if not self.jobs or not all(isinstance(j, str) and j for j in self.jobs):
            raise RequestInvalid(f"{self.mode} needs at least one job")
        if len(set(self.jobs)) != len(self.jobs):
            raise RequestInvalid(f"{self.mode}: a job is named twice: {', '.join(self.jobs)}")
        if mode.one_job and len(self.jobs) != 1:
            raise RequestInvalid(f"{self.mode} takes one job (batch ids are per job), got {', '.join(self.jobs)}")
        if self.keep < 1:
            raise RequestInvalid(f"keep must be a positive integer, got {self.keep}")
        known = {o.name: o for o in mode.options}
        foreign = sorted(set(self.options) - set(known))
        if foreign:
            raise RequestInvalid(f"{self.mode} takes no {', '.join(_flag(n) for n in foreign)}"
                                 + (f" (its options: {', '.join(o.flag for o in mode.options)})" if mode.options
                                    else ""))
        for option in mode.options:
            if option.required and option.name not in self.options:
                raise RequestInvalid(f"{self.mode} needs {option.flag}")
        for group in dict.fromkeys(o.group for o in mode.options if o.group):
            members = [o for o in mode.options if o.group == group]
            if sum(o.name in self.options for o in members) != 1:
                raise RequestInvalid(f"{self.mode} needs exactly one of {', '.join(o.flag for o in members)}")

    def get(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    @property
    def destructive(self) -> bool:
        return MODES[self.mode].destructive

    @property
    def position(self) -> tuple[str, Any] | None:
        """reset-checkpoint's start: (`version` | `timestamp` | `latest` | `earliest`, its value or True)."""
        given = [(o.name.removeprefix("from_"), self.options[o.name]) for o in MODES[self.mode].options
                 if o.group == POSITION and o.name in self.options]
        return given[0] if given else None

    def to_argv(self) -> list[str]:
        """The request as arguments of `lakehouse checkpoint` / the spark-submit entry point (without --actor)."""
        argv = [self.mode, *self.jobs]
        if MODES[self.mode].changes:
            argv += ["--dry-run"] if self.dry_run else []
            argv += ["--keep", str(self.keep)] if self.keep != 5 else []
        for option in MODES[self.mode].options:
            if option.name in self.options:
                argv += [option.flag] if option.is_flag else [option.flag, str(self.options[option.name])]
        return argv

    def describe(self) -> str:
        """`full-refresh of a, b (cascade)` as a person reads it."""
        given = ", ".join(o.flag + ("" if o.is_flag else f" {self.options[o.name]}")
                          for o in MODES[self.mode].options if o.name in self.options)
        return (f"{self.mode} of {', '.join(self.jobs)}" + (f" ({given})" if given else "")
                + (" (dry run)" if self.dry_run else ""))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser, mode_name: str) -> argparse.ArgumentParser:
    """The arguments of `lakehouse checkpoint <mode>` (and of the spark-submit entry point), from :data:`MODES`."""
    mode = MODES[mode_name]
    parser.add_argument("jobs", nargs="+")
    parser.add_argument("--actor", default="", help="who asks (default: cli:<user>; the DAG: its run)")
    if mode.changes:
        parser.add_argument("--dry-run", action="store_true", help="say what would happen; change nothing")
        parser.add_argument(KEEP.flag, type=KEEP.parse, default=5, help=KEEP.help)
    groups: dict[str, Any] = {}
    for option in mode.options:
        target = parser
        if option.group:
            if option.group not in groups:
                groups[option.group] = parser.add_mutually_exclusive_group(required=True)
            target = groups[option.group]
        kwargs = {"action": "store_true"} if option.is_flag else {"type": option.parse, "required": option.required}
        target.add_argument(option.flag, help=option.help, **kwargs)
    for flag, why in mode.refused_flags:
        parser.add_argument(flag, nargs="?", help=argparse.SUPPRESS, action=_Refused, why=why)
    return parser


class _Refused(argparse.Action):
    """A flag the mode does not take: the parser's error says why (instead of 'unrecognized arguments')."""

    def __init__(self, *args: Any, why: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string}: {self.why}")


def from_args(mode_name: str, args: argparse.Namespace) -> CheckpointRequest:
    """The request that parsed `lakehouse checkpoint <mode> ...` arguments describe."""
    mode = MODES[mode_name]
    return CheckpointRequest(mode_name, tuple(args.jobs), dry_run=getattr(args, "dry_run", False),
                             keep=getattr(args, "keep", 5), actor=args.actor,
                             options={o.name: getattr(args, o.name) for o in mode.options})


def from_params(params: Mapping[str, Any]) -> CheckpointRequest:
    """The request of a `checkpoint_reset` run's form (`jobs`, `mode`, `dry_run` and the modes' options by name);
    an option of another mode that is set is refused, not ignored."""
    mode_name = params.get("mode")
    if mode_name not in APPLIED_MODES:
        raise RequestInvalid(f"choose a mode: one of {', '.join(APPLIED_MODES)}" if mode_name in (None, "") else
                             f"mode must be one of {', '.join(APPLIED_MODES)}, got {mode_name!r}")
    mode = MODES[mode_name]
    given: dict[str, Any] = {}
    for name, option in _all_options().items():
        value = params.get(name)
        if value is None or value is False or value == "":
            continue
        if option not in mode.options:
            raise RequestInvalid(f"{name} is not an option of {mode_name} (its options: "
                                 f"{', '.join(o.name for o in mode.options) or 'none'}); clear it")
        given[name] = True if option.is_flag else _parse_param(option, value)
    return CheckpointRequest(mode_name, tuple(params.get("jobs") or ()), dry_run=bool(params.get("dry_run", True)),
                             options=given)


def _parse_param(option: Option, value: Any) -> Any:
    try:
        return option.parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise RequestInvalid(f"{option.name}: {exc}") from None


def _all_options() -> dict[str, Option]:
    return {o.name: o for name in APPLIED_MODES for o in MODES[name].options}


def param_specs() -> dict[str, dict[str, Any]]:
    """The DAG form's fields of the applied modes' options: name -> {type, minimum, description, mode}."""
    specs = {}
    for name in APPLIED_MODES:
        for option in MODES[name].options:
            specs[option.name] = {"type": option.param_type or "boolean", "minimum": option.minimum,
                                  "description": f"{name}: {option.help}", "mode": name}
    return specs


def verify_request(targets: Sequence[str], run: bool, actor: str = "") -> CheckpointRequest:
    """The `verify` that follows an applied action."""
    return CheckpointRequest("verify", tuple(targets), actor=actor, options={"no_run": not run})
