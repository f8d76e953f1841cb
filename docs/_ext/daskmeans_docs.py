"""Sphinx extension: numbers in the documentation read from the code, not typed.

- ``{config}`NAME``` (role): the value of ``daskmeans.config.NAME``, linked to its entry in the settings reference.
- ``{default}`Class.parameter``` (role): the default of an estimator's parameter, from its signature.
- ``parameters`` (directive): a table of an estimator's parameters: the defaults from its signature, the text
  from the directive's body (``name: what it does`` per line; indented lines continue).
- ``config-reference`` (directive): every setting of ``daskmeans/config.py`` with its value and the ``#:`` comment
  above it, grouped by the file's ``# -- section --`` headings.

A name that does not exist is an error, so a build with ``-W`` fails when the code and the pages drift apart.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

#: The settings reference: the document that holds the ``config-NAME`` targets.
CONFIG_DOC_LABEL = "config-{name}"
_SECTION = re.compile(r"^# -- (?P<title>[^-].*?) -+\s*$")
_BINARY_UNITS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


# -- values as they read in prose --------------------------------------------------------------------------------


def format_bytes(value: int) -> str:
    """``8388608`` -> ``"8 MiB"``: a byte count in the largest binary unit that divides it evenly."""
    for unit, name in _BINARY_UNITS:
        if value >= unit and value % unit == 0:
            return f"{value // unit:,} {name}"
    return f"{value:,} bytes"


def format_value(name: str, value) -> str:
    """A setting's or default's value as the pages write it."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return format_bytes(value) if name.endswith("_BYTES") else f"{value:,}"
    if isinstance(value, float) and name.endswith("_FRACTION"):
        return f"{100 * value:g}%"
    if isinstance(value, float):
        return f"{value:g}" if value != 0 else "0"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def config_value(name: str):
    """``daskmeans.config.NAME``; KeyError when there is no such setting."""
    config = importlib.import_module("daskmeans.config")
    if not name.isupper() or not hasattr(config, name):
        raise KeyError(name)
    return getattr(config, name)


def estimator_defaults(class_name: str) -> dict:
    """``{parameter: default}`` of ``daskmeans.<class_name>`` (a class or a function of the public API)."""
    daskmeans = importlib.import_module("daskmeans")
    if class_name not in daskmeans.__all__:
        raise KeyError(class_name)
    target = getattr(daskmeans, class_name)
    signature = inspect.signature(target.__init__ if inspect.isclass(target) else target)
    return {p.name: p.default for p in signature.parameters.values() if p.name != "self"}


# -- roles ---------------------------------------------------------------------------------------------------


def config_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{config}`NAME```: the setting's value, linked to the settings reference."""
    try:
        value = config_value(text.strip())
    except KeyError:
        message = inliner.reporter.error(f"daskmeans.config has no setting {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    reference = addnodes.pending_xref(
        "",
        refdomain="std",
        reftype="ref",
        reftarget=CONFIG_DOC_LABEL.format(name=text.strip().lower()),
        refexplicit=True,
        refwarn=True,
    )
    reference += nodes.Text(format_value(text.strip(), value))
    return [reference], []


def default_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{default}`Class.parameter```: that parameter's default, from the signature."""
    class_name, _, parameter = text.strip().partition(".")
    try:
        value = estimator_defaults(class_name)[parameter]
    except KeyError:
        message = inliner.reporter.error(
            f"daskmeans has no {text!r} (public class or function, and parameter)", line=lineno
        )
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    if value is inspect.Parameter.empty:
        message = inliner.reporter.error(f"{text!r} has no default", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.literal(rawtext, format_value(parameter, value))], []


# -- tables ----------------------------------------------------------------------------------------------------


def _table(header, rows, widths):
    """A docutils table: ``rows`` of cells, each a list of nodes."""
    table = nodes.table(classes=["daskmeans-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    head += _row([[nodes.paragraph(text=text)] for text in header])
    body = nodes.tbody()
    group += body
    for cells in rows:
        body += _row(cells)
    return table


def _row(cells):
    row = nodes.row()
    for content in cells:
        entry = nodes.entry()
        entry.extend(content)
        row += entry
    return row


def _parse_items(lines):
    """``name: text`` items; a line that starts with a space continues the item above."""
    items = []
    for line in lines:
        if not line.strip():
            continue
        if line[:1].isspace() and items:
            items[-1][1].append(line.strip())
            continue
        name, separator, text = line.partition(":")
        if not separator:
            raise ValueError(f"expected 'name: text', got {line!r}")
        items.append((name.strip(), [text.strip()]))
    return [(name, " ".join(text)) for name, text in items]


class ParametersDirective(SphinxDirective):
    """A table of an estimator's parameters: default (from its signature) and what it does (the body)."""

    required_arguments = 1
    has_content = True

    def run(self):
        class_name = self.arguments[0]
        try:
            defaults = estimator_defaults(class_name)
            items = _parse_items(self.content)
        except (KeyError, ValueError) as error:
            raise self.error(f"parameters {class_name}: {error}") from None
        rows = []
        for name, text in items:
            if name not in defaults:
                raise self.error(f"daskmeans.{class_name} has no parameter {name!r}")
            default = defaults[name]
            shown = "required" if default is inspect.Parameter.empty else format_value(name, default)
            description = nodes.container()
            self.state.nested_parse(
                StringList([text], source=self.get_source_info()[0]), self.content_offset, description
            )
            rows.append(
                [
                    [nodes.paragraph("", "", nodes.literal(text=name))],
                    [nodes.paragraph("", "", nodes.literal(text=shown))],
                    description.children,
                ]
            )
        return [_table(("parameter", "default", "what it does"), rows, (18, 14, 68))]


# -- the settings reference ---------------------------------------------------------------------------------------


@dataclass
class Setting:
    """One upper-case assignment of ``config.py``: its names, source expression and the comment above it."""

    names: list[str]
    sources: list[str]
    comment: list[str] = field(default_factory=list)


@dataclass
class Section:
    title: str
    settings: list[Setting] = field(default_factory=list)


def read_config(path: Path) -> list[Section]:
    """The sections of ``config.py`` with their settings, in file order.

    A setting's comment is the run of ``#:`` lines right above it; settings that follow one another without a
    comment of their own share the comment of the first (they are documented together).
    """
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assignments = {}
    for statement in ast.parse(text).body:
        if isinstance(statement, ast.Assign) and all(isinstance(t, ast.Name) for t in statement.targets):
            names = [t.id for t in statement.targets if t.id.isupper()]
            if names:
                assignments[statement.lineno] = (
                    names,
                    ast.get_source_segment(text, statement.value),
                    statement.end_lineno,
                )
    sections = [Section("General")]
    comment, previous_end = [], None
    for number, line in enumerate(lines, start=1):
        heading = _SECTION.match(line)
        if heading:
            sections.append(Section(heading.group("title").strip()))
            comment, previous_end = [], None
        elif line.startswith("#:"):
            comment.append(line[2:].strip())
        elif number in assignments:
            names, source, end = assignments[number]
            if not comment and previous_end == number - 1 and sections[-1].settings:
                shared = sections[-1].settings[-1]
                shared.names.extend(names)
                shared.sources.extend([source] * len(names))
            else:
                sections[-1].settings.append(Setting(list(names), [source] * len(names), comment))
            comment, previous_end = [], end
        elif not line.strip() or line.startswith("#"):
            comment = [] if not line.strip() else comment
    return [section for section in sections if section.settings]


class ConfigReferenceDirective(SphinxDirective):
    """Every setting of ``daskmeans/config.py``: name, value, and the comment above it (read at build time)."""

    has_content = False

    def run(self):
        config = importlib.import_module("daskmeans.config")
        path = Path(config.__file__)
        self.env.note_dependency(str(path))
        output = []
        for section in read_config(path):
            container = nodes.section(ids=[nodes.make_id(f"config-section-{section.title}")])
            container += nodes.title(text=section.title[:1].upper() + section.title[1:])
            entries = nodes.definition_list()
            for setting in section.settings:
                entries += self._entry(setting, config)
            container += entries
            output.append(container)
        return output

    def _entry(self, setting, config):
        item = nodes.definition_list_item()
        term = nodes.term()
        for index, name in enumerate(setting.names):
            label = CONFIG_DOC_LABEL.format(name=name.lower())
            target = nodes.target("", "", ids=[label])
            self.env.get_domain("std").note_hyperlink_target(label, self.env.docname, label, name)
            term += target
            if index:
                term += nodes.Text(", ")
            term += nodes.literal(text=name)
            term += nodes.Text(f" = {format_value(name, getattr(config, name))}")
        item += term
        definition = nodes.definition()
        if setting.comment:
            self.state.nested_parse(StringList(setting.comment, source="daskmeans/config.py"), 0, definition)
        expressions = [
            (name, source)
            for name, source in zip(setting.names, setting.sources)
            if source not in (repr(getattr(config, name)), str(getattr(config, name)))
        ]
        if expressions:
            written = "; ".join(f"{name} = {source}" for name, source in expressions)
            definition += nodes.paragraph("", "", nodes.Text("In the source: "), nodes.literal(text=written))
        item += definition
        return item


def setup(app):
    app.add_role("config", config_role)
    app.add_role("default", default_role)
    app.add_directive("parameters", ParametersDirective)
    app.add_directive("config-reference", ConfigReferenceDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
