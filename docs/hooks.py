"""MkDocs hooks: the reference pages are filled from the code at build time, so that they cannot drift from it.

A page asks for a generated part with a marker line, `<!-- generated: NAME -->`, replaced by:

- `cli`: every `lakehouse` command and subcommand, from the CLI's own argparse parser (`include.cli.build_parser`);
- `configuration`: every environment variable, from `include.settings_reference.configuration_reference()`;
- `jobs-yaml`: every key of `jobs.yaml`, read from the registry's parsers (the keys each one accepts, as the code
  lists them), with what it means where the code says it (the spec dataclasses' field comments), its default and
  the values it takes (`include/registry/vocabulary.py` and the catalogues);
- `processors`, `quality-checks`, `column-types`: the registry's catalogues;
- `metrics`: every metric family of `lakehouse metrics`, from `include.ops.metrics.METRICS`;
- `alerts`: every alert `lakehouse monitor` generates rules for, from `include.monitor.rules.ALERTS`.
- `storage-layout`: the map of `include/storage/layout.py`'s docstring; `packages`: each package's docstring.

What the code does not say about a key is said once, in the registry (`include/registry/reference.py`: its
sections, `KEY_TEXT`, `VALUES`); a key the code has and neither says anything about, or a text for a key the code no longer has, is a warning, which fails the strict build (`make docs`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import io
import logging
import re
import sys
import textwrap
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from include.registry.reference import KEY_TEXT, SECTIONS, VALUES, Section  # noqa: E402 - after the path above

log = logging.getLogger("mkdocs.hooks.lakehouse")  # under "mkdocs": a warning fails `mkdocs build --strict`

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            log.warning("%s: unknown generated part %r (known: %s)", page.file.src_uri, name, ", ".join(GENERATORS))
            return ""
        return GENERATORS[name]()

    markdown = MARKER.sub(fill, markdown)
    return without_settings_rows(markdown)


def cell(text: object) -> str:
    """Text for a Markdown table cell: on one line, `|` escaped, and outside code spans `<` not read as HTML."""
    return prose(" ".join(str(text).split())).replace("|", "\\|")


def prose(text: str) -> str:
    """`text` with its `<` outside code spans written as `&lt;` (argparse's `landing/<source>/` is no HTML tag)."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def code(text: object) -> str:
    """Inline code, whatever backticks the text holds."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------------------------------------------------- the CLI


def cli_reference() -> str:
    from include.cli import build_parser

    parser = build_parser()
    parts = [f"```text\n{usage(parser)}```\n", prose(parser.description or "")]
    for _name, help_text, sub in subcommands(parser):
        parts.append(command_section(sub, help_text, level=2))
        for _sub_name, sub_help, subsub in subcommands(sub):
            parts.append(command_section(subsub, sub_help, level=3))
    return "\n\n".join(p.strip() for p in parts if p.strip()) + "\n"


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the parser's order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(prog=parser.prog, width=110)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help()


def anchor(prog: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", prog.lower()).strip("-")


def command_section(parser: argparse.ArgumentParser, help_text: str, level: int) -> str:
    lines = [f"{'#' * level} `{parser.prog}` {{#{anchor(parser.prog)}}}", "", prose(help_text[:1].upper() + help_text[1:])]
    if parser.description and parser.description != help_text:
        lines += ["", prose(parser.description)]
    lines += ["", "```text", usage(parser).rstrip(), "```"]
    rows = [argument_row(parser, a) for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]
    if rows:
        lines += ["", "| argument | meaning |", "|---|---|", *rows]
    commands = subcommands(parser)
    if commands:
        lines += ["", "Subcommands: " + ", ".join(f"[`{name}`](#{anchor(sub.prog)})" for name, _, sub in commands)
                  + "."]
    return "\n".join(lines)


def argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = argparse.HelpFormatter(prog=parser.prog)
    if action.option_strings:
        takes_value = action.nargs != 0
        metavar = formatter._metavar_formatter(action, action.dest.upper())(1)[0] if takes_value else ""
        name = ", ".join(f"{o} {metavar}".strip() for o in action.option_strings)
    else:
        name = action.metavar or action.dest
        if action.nargs in ("*", "?"):
            name += " (optional)"
        elif action.nargs == "+":
            name += " (one or more)"
        elif action.nargs == argparse.REMAINDER:
            name += " (the rest of the line)"
    meaning = formatter._expand_help(action) if action.help else ""
    notes = []
    if action.choices is not None:
        notes.append("one of " + ", ".join(code(c) for c in action.choices))
    if action.required and action.option_strings:
        notes.append("required")
    if isinstance(action, argparse._AppendAction):
        notes.append("repeatable")
    if (action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS)
            and "default" not in meaning):
        notes.append(f"default {code(action.default)}")
    for group in parser._mutually_exclusive_groups:
        if action in group._group_actions:
            others = [o.option_strings[0] for o in group._group_actions if o is not action and o.option_strings]
            notes.append(("exactly one of this and " if group.required else "not with ") + ", ".join(map(code, others)))
    text = "; ".join(x for x in (meaning, *notes) if x)
    return f"| {code(name)} | {cell(text)} |"


# ------------------------------------------------------------------------------------------------- the settings


def configuration_reference() -> str:
    reference = importlib.import_module("include.settings_reference")
    build = getattr(reference, "configuration_reference", None)
    if build is None:
        log.warning("include.settings_reference has no configuration_reference(): no configuration page")
        return "*The configuration table is generated from `include.settings_reference.configuration_reference()`.*\n"
    return build().strip() + "\n"


VARIABLE_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]*)` \|.*$\n?", re.MULTILINE)
READ_ELSEWHERE = "<!-- read elsewhere -->"


def without_settings_rows(markdown: str) -> str:
    """The configuration page's table of variables read elsewhere (Airflow's, the tests', the Makefile's), without
    the rows of variables the settings' table (above it) now has: one row per variable, the settings' own."""
    head, marker, tail = markdown.partition(READ_ELSEWHERE)
    if not marker:
        return markdown
    settings = set(VARIABLE_ROW.findall(head))

    def keep(match: re.Match) -> str:
        if match.group(1) in settings:
            log.info("configuration: %s is in the settings' table now; its row below is left out", match.group(1))
            return ""
        return match.group(0)

    return head + VARIABLE_ROW.sub(keep, tail)


# --------------------------------------------------------------------------------------------------- jobs.yaml
#
# Each section of jobs.yaml is read by one or more functions of include/registry/; the keys a section takes are those
# its functions list: the known fields they pass to `ctx.unknown_fields(...)` (what the registry refuses otherwise),
# the set a mapping is checked against (`set(raw) - {...}`), and, for sections that are not checked so, the fields
# they read (`raw.get("name")`, `raw["name"]`, `for name in ("a", "b"): raw.get(name)`), following the helpers they
# hand `raw` to.


def jobs_yaml_reference() -> str:
    readers = registry_readers()
    used: set[str] = set()
    parts = []
    for section in SECTIONS:
        keys: dict[str, Any] = {}  # key -> its default (None: none found)
        for reader in section.readers:
            if reader not in readers:
                log.warning("jobs.yaml reference: include/registry has no reader %s (section %s)", reader, section.path)
                continue
            used.add(reader)
            for key, default in readers[reader].items():
                keys.setdefault(key, default)
        parts.append(section_table(section, keys))
    for function in sorted(CHECKING - {r.split("@")[0] for r in used}):
        log.warning("jobs.yaml reference: %s checks a mapping of jobs.yaml and no section of docs/hooks.py names it",
                    function)
    for path, texts in KEY_TEXT.items():
        section = next((s for s in SECTIONS if s.path == path), None)
        known = set().union(*(readers.get(r, {}) for r in section.readers)) if section else set()
        for key in sorted(set(texts) - known):
            log.warning("jobs.yaml reference: KEY_TEXT names %s.%s, which the registry does not read", path, key)
    return "\n\n".join(parts) + "\n"


def section_table(section: Section, keys: dict[str, Any]) -> str:
    spec = getattr(importlib.import_module("include.registry.specs"), section.spec) if section.spec else None
    comments = field_comments(spec) if spec else {}
    lines = [f"### `{section.path}` {{#{anchor(section.path)}}}", ""]
    about = section.about or (first_sentence(spec.__doc__) if spec is not None and spec.__doc__ else "")
    if about:
        lines += [about, ""]
    if not keys:
        lines.append("No keys besides `kind`.")
        return "\n".join(lines)
    lines += ["| key | meaning | default | values |", "|---|---|---|---|"]
    for key in sorted(keys, key=lambda k: k != "kind"):
        field = matching_field(spec, key) if spec else None
        said = (comments.get(field.name) or dataclass_doc(field)) if field is not None else ""
        meaning = "; ".join(x for x in (KEY_TEXT.get(section.path, {}).get(key), said) if x)
        if not meaning:
            log.warning("jobs.yaml reference: %s.%s: neither the code nor KEY_TEXT says what it means", section.path,
                        key)
            meaning = ""
        default = keys[key] if keys[key] not in (None, "") else field_default(field)
        values = key_values(section.path, key)
        lines.append(f"| `{key}` | {cell(meaning)} | {code(yaml_text(default, key)) if default is not None else ''} | "
                     f"{cell(values)} |")
    return "\n".join(lines)


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) < 200 else text.split(". ")[0].rstrip(".") + "."


def matching_field(spec: type, key: str) -> dataclasses.Field | None:
    """The spec field that holds `key` (`window` -> `window_seconds`, `topic` -> `topics`, ...)."""
    fields = {f.name: f for f in dataclasses.fields(spec)}
    for name in (key, f"{key}_seconds", f"{key}_hours", f"{key}_table", f"{key}s",
                 key.removesuffix("_per_trigger")):
        if name in fields:
            return fields[name]
    return None


def field_comments(spec: type) -> dict[str, str]:
    """The trailing comment of each field line of a dataclass (`name: type = default  # comment`)."""
    source = inspect.getsource(spec)
    comments: dict[str, str] = {}
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            line = lines[token.start[0] - 1]
            match = re.match(r"\s+([a-z_]+)\s*:", line)
            if match and token.start[1] > match.end():
                comments[match.group(1)] = token.string.lstrip("#").strip()
    return comments


def dataclass_doc(field: dataclasses.Field) -> str:
    """The docstring of the dataclass a field holds (a section of its own: `maintenance`, `health`, ...)."""
    specs = importlib.import_module("include.registry.specs")
    held = getattr(specs, str(field.type).split(" ")[0], None)
    doc = held.__doc__ if isinstance(held, type) and dataclasses.is_dataclass(held) else None
    if doc and not doc.startswith(f"{held.__name__}("):  # not the signature dataclasses write when there is none
        return first_sentence(doc)
    return ""


def field_default(field: dataclasses.Field | None) -> Any:
    """The spec field's default as jobs.yaml writes it (a field in seconds or hours as a duration)."""
    if field is None or field.default is dataclasses.MISSING or dataclasses.is_dataclass(field.default):
        return None
    value = field.default
    if value in (None, (), "") and not isinstance(value, bool):
        return None
    for suffix, seconds in (("_seconds", 1), ("_hours", 3600)):
        if field.name.endswith(suffix) and isinstance(value, int) and not isinstance(value, bool):
            return duration(value * seconds)
    return value


def duration(seconds: int) -> str:
    """Seconds as a registry duration, in the largest unit that divides them (`7 days`, `30 seconds`)."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def yaml_text(value: Any, key: str = "") -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if key.endswith("_bytes") and isinstance(value, int) and value % 1024**2 == 0:
        return f"{value // 1024**2} MB"
    return str(value)


def key_values(path: str, key: str) -> str:
    where = VALUES.get((path, key))
    if where is None:
        return ""
    module, expression = where.split(":", 1)
    values = eval(expression, vars(importlib.import_module(f"include.registry.{module}")))  # noqa: S307
    return ", ".join(code(yaml_text(v)) for v in values)


def registry_readers() -> dict[str, dict[str, Any]]:
    """The keys each function of include/registry takes: "module:function" -> {key: default or None}, and for each
    mapping it checks, "module:function@where" (the check's first argument, as written) -> its keys."""
    found: dict[str, dict[str, Any]] = {}
    CHECKING.clear()
    for path in sorted((REPO / "include" / "registry").glob("*.py")):
        module = importlib.import_module(f"include.registry.{path.stem}")
        tree = ast.parse(path.read_text())
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for name, function in functions.items():
            reader = FunctionReader(module, function, functions)
            if reader.checked:
                CHECKING.add(f"{path.stem}:{name}")
            keys: dict[str, Any] = {}
            for where, (variable, checked) in reader.checked.items():
                defaults = reader.reads.get(variable, {})
                found[f"{path.stem}:{name}@{where}"] = {k: defaults.get(k) for k in checked}
                keys.update(found[f"{path.stem}:{name}@{where}"])
            read = reader.reads.get("raw", {})
            lines = reader.lines.get("raw", {})
            found[f"{path.stem}:{name}"] = keys if reader.checked else {k: read[k] for k in sorted(read, key=lines.get)}
    return found


CHECKING: set[str] = set()  # the functions that check a mapping's keys: each must belong to a section


class FunctionReader:
    """What one registry function takes from the mappings it handles: `checked`, the keys of each mapping it checks
    (`ctx.unknown_fields(where, mapping, known)`, `set(mapping) - {...}`), by the check's `where`; `reads`, the keys it
    reads of each variable (`mapping.get("key", default)`, `mapping["key"]`, also through a loop over literal names),
    with what the helpers it hands a mapping to read of it."""

    def __init__(self, module: Any, function: ast.FunctionDef, functions: dict[str, ast.FunctionDef],
                 depth: int = 1):
        self.module, self.function = module, function
        self.checked: dict[str, tuple[str | None, list[str]]] = {}
        self.reads: dict[str, dict[str, Any]] = {}
        self.lines: dict[str, dict[str, int]] = {}  # where each key is first read: the order the keys are listed in
        loops, loop_defaults = self.loop_names()
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "unknown_fields" and len(node.args) >= 3:
                self.checked[ast.unparse(node.args[0])] = (getattr(node.args[1], "id", None),
                                                           self.evaluate(node.args[2]))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Set) \
                    and isinstance(node.left, ast.Call) and getattr(node.left.func, "id", None) == "set":
                variable = getattr(node.left.args[0], "id", None)
                self.checked[str(variable)] = (variable, [ast.literal_eval(e) for e in node.right.elts])
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and isinstance(node.func.value, ast.Name) and node.args:
                default = self.value(node.args[1]) if len(node.args) > 1 else None
                for key in self.keys_of(node.args[0], loops):
                    self.note(node.func.value.id, key, loop_defaults.get(key) if default is None else default, node)
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                for key in self.keys_of(node.slice, loops):
                    self.note(node.value.id, key, loop_defaults.get(key), node)
            elif depth and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in functions and node.func.id != function.name:
                helper_function = functions[node.func.id]
                helper = FunctionReader(module, helper_function, functions, depth - 1)
                params = [a.arg for a in helper_function.args.args]
                for position, argument in enumerate(node.args[:len(params)]):
                    if isinstance(argument, ast.Name):
                        for key, default in helper.reads.get(params[position], {}).items():
                            self.note(argument.id, key, default, node)

    def note(self, variable: str, key: str, default: Any, node: ast.AST) -> None:
        read = self.reads.setdefault(variable, {})
        if read.get(key) is None:
            read[key] = default
        lines = self.lines.setdefault(variable, {})
        lines[key] = min(lines.get(key, node.lineno), node.lineno)

    def loop_names(self) -> tuple[dict[str, list[str]], dict[str, Any]]:
        """`for name in ("a", "b")` and `for name, default in (("a", 1), ...)`: {variable: keys}, {key: default}."""
        loops: dict[str, list[str]] = {}
        defaults: dict[str, Any] = {}
        for node in ast.walk(self.function):
            if not isinstance(node, ast.For) or not isinstance(node.iter, ast.Tuple):
                continue
            try:
                items = ast.literal_eval(node.iter)
            except ValueError:
                continue
            if isinstance(node.target, ast.Name) and all(isinstance(i, str) for i in items):
                loops[node.target.id] = list(items)
            elif isinstance(node.target, ast.Tuple) and isinstance(node.target.elts[0], ast.Name) and \
                    all(isinstance(i, tuple) and i and isinstance(i[0], str) for i in items):
                loops[node.target.elts[0].id] = [i[0] for i in items]
                defaults.update({i[0]: i[1] for i in items if len(i) == 2 and i[1] is not None})
        return loops, defaults

    @staticmethod
    def keys_of(node: ast.AST, loops: dict[str, list[str]]) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name) and node.id in loops:
            return loops[node.id]
        return []

    def value(self, node: ast.AST) -> Any:
        """A default as written: a literal, or a constant of the module (`DEFAULT_MAX_LINE_BYTES`)."""
        try:
            return ast.literal_eval(node)
        except ValueError:
            pass
        if isinstance(node, ast.Name | ast.Attribute):
            try:
                value = eval(ast.unparse(node), vars(self.module))  # noqa: S307
            except Exception:
                return None
            return value if isinstance(value, str | int | float | bool) else None
        return None

    def evaluate(self, node: ast.AST) -> list[str]:
        """The known fields of an `unknown_fields` call: an expression over the module's names, or a local variable
        of the function assigned from one."""
        namespace = dict(vars(self.module))
        for statement in ast.walk(self.function):
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                    isinstance(statement.targets[0], ast.Name):
                try:
                    namespace[statement.targets[0].id] = eval(ast.unparse(statement.value), namespace)  # noqa: S307
                except Exception:  # a local computed at run time: not a list of fields
                    continue
        return [str(k) for k in eval(ast.unparse(node), namespace)]  # noqa: S307


# ----------------------------------------------------------------------------------------------- the catalogues


def processors_reference() -> str:
    from include.registry.processors import PROCESSORS

    parts = []
    for info in PROCESSORS.values():
        reads = ", ".join(f"`{c}` ({t})" for c, t in info.input_columns.items()) or "none besides the keys"
        writes = (("the job's keys, then " if info.keys_in_output else "")
                  + ", ".join(f"`{c}` ({t})" for c, t in info.output_schema.items()))
        lines = [f"### `{info.name}` {{#processor-{anchor(info.name)}}}", "", prose(info.description[:1].upper()
                                                                                   + info.description[1:]) + ".", "",
                 f"- time: {info.time_mode} timers", f"- reads: {reads}", f"- writes: {writes}"]
        lines += [f"- param `{n}` ({'a duration' if q.kind == 'duration' else 'a positive integer'}, default "
                  f"`{q.default}`): {prose(q.meaning)}" for n, q in info.params.items()]
        if info.alert_types:
            lines.append("- alert types: " + ", ".join(f"`{t}`" for t in info.alert_types))
        if info.initial_state_schema:
            lines.append("- `initial_state`: a table of the job's keys and "
                         + ", ".join(f"`{c}` ({t})" for c, t in info.initial_state_schema.items()))
        lines.append(f"- state version: {info.state_version}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def quality_checks_reference() -> str:
    from include.registry.checks import CHECKS

    lines = ["| check | default severity | scope | meaning |", "|---|---|---|---|"]
    lines += [f"| `{name}` | {c.severity} | {c.scope} | {cell(c.meaning)} |" for name, c in CHECKS.items()]
    return "\n".join(lines) + "\n"


def column_types_reference() -> str:
    from include.registry.columns import COLUMN_TYPES, MAX_DECIMAL_PRECISION

    lines = ["| type | Spark | Arrow |", "|---|---|---|"]
    lines += [f"| `{t.name}` | `{t.spark}` | `{t.arrow}`{' (UTC)' if t.utc else ''} |" for t in COLUMN_TYPES.values()]
    lines.append(f"| `decimal(p,s)` (precision 1 to {MAX_DECIMAL_PRECISION}, scale 0 to p) | `DecimalType(p, s)` | "
                 "`decimal128(p, s)` |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------- the packages


def storage_layout() -> str:
    """The map in `include/storage/layout.py`'s docstring, its indented blocks as text blocks."""
    from include.storage import layout

    body = inspect.cleandoc(layout.__doc__ or "").split("\n\n", 1)[-1]
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            out.extend(["", "```text", *textwrap.dedent("\n".join(block)).splitlines(), "```", ""])
            block.clear()

    for line in body.splitlines():
        if line.startswith("    "):
            block.append(line)
        else:
            flush()
            out.append(line)
    flush()
    return "\n".join(out).strip() + "\n"


def packages() -> str:
    """Each package of include/ and spark_jobs/, with the first paragraph of its docstring."""
    rows = ["| package | what it says it owns |", "|---|---|"]
    for init in sorted([*REPO.glob("include/__init__.py"), *REPO.glob("include/*/__init__.py"),
                        *REPO.glob("spark_jobs/__init__.py"), *REPO.glob("spark_jobs/*/__init__.py")]):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        first = re.sub(r":(?:mod|class|func|data):`~?([^`]+)`", r"`\1`", doc.split("\n\n")[0]).strip()
        first = first[:-1] + "." if first.endswith(":") else first
        rows.append(f"| `{init.parent.relative_to(REPO).as_posix()}/` | {cell(first)} |")
    return "\n".join(rows) + "\n"


def metrics_reference() -> str:
    from include.ops.metrics import METRICS

    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    rows += [f"| `{m.name}` | {m.kind} | {', '.join(f'`{label}`' for label in m.labels)} | {cell(m.meaning)} |"
             for m in METRICS]
    return "\n".join(rows) + "\n"


def alerts_reference() -> str:
    from include.monitor.rules import reference_rows

    rows = ["| alert | about | severity | fires when | for | runbook |", "|---|---|---|---|---|---|"]
    rows += ["| " + " | ".join(row) + " |" for row in reference_rows(cell)]
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "storage-layout": storage_layout,
    "packages": packages,
    "cli": cli_reference,
    "configuration": configuration_reference,
    "jobs-yaml": jobs_yaml_reference,
    "processors": processors_reference,
    "quality-checks": quality_checks_reference,
    "column-types": column_types_reference,
    "metrics": metrics_reference,
    "alerts": alerts_reference,
}
