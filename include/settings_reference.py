"""The configuration reference (the docs' Configuration page, rendered by docs/hooks.py): every row of
:data:`include.settings.SETTINGS` as a line of one Markdown table, so that the variables' defaults and their
documentation live in one place."""

from __future__ import annotations

from include import settings
from include.settings import PORT_RANGE, Kind, Setting


def configuration_reference() -> str:
    """The configuration reference as Markdown: a table of every variable of :data:`include.settings.SETTINGS`
    (variable, type, default, minimum or choices, meaning), in the table's order."""
    lines = ["| variable | type | default | minimum / choices | meaning |", "|---|---|---|---|---|"]
    for setting in settings.SETTINGS:  # read when called: a test may stand in a table of its own
        kind = f"{setting.kind} of {setting.unit}" if setting.unit else str(setting.kind)
        cells = (f"`{setting.name}`", kind, _shown_default(setting), _limits(setting), _markdown(setting.meaning))
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _shown_default(setting: Setting) -> str:
    if setting.shown_default:
        return _markdown(setting.shown_default)
    return f"`{setting.default_text()}`" if setting.default_text() else "unset"


def _limits(setting: Setting) -> str:
    """The reference's `minimum / choices` cell."""
    if setting.kind is Kind.WHOLE:
        return f"at least {setting.minimum or 0}"
    if setting.kind is Kind.PORT:
        return f"{PORT_RANGE[0]}-{PORT_RANGE[1]}"
    if setting.kind is Kind.CHOICE:
        return ", ".join(f"`{choice}`" for choice in setting.choices) + (" (any case)" if setting.upper else "")
    if setting.kind is Kind.FLAG:
        return "`1`: on, anything else: off"
    return ""


def _markdown(text: str) -> str:
    """`text` (Markdown) made safe in a table cell: outside its `code spans`, `|` escaped and `<` not read as HTML."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|").replace("<", "&lt;") for i, part in enumerate(parts))
