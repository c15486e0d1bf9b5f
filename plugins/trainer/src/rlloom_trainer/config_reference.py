"""Every config key a run takes, read from the schemas themselves: the core's ``sampling`` and ``trainer``
sections and the config dataclass each plugin registered with a group's option (``rollout=hf``) or a tool.

A key's row holds its dotted name, its type as annotated, its default and the comment written after the field
in the source (``temperature: float = 1.0  # the comment``), which is where this project states a key's unit
(prompts or responses, per rank or global) and meaning. A field whose default is itself a dataclass is
flattened into dotted keys. :func:`reference_markdown` is ``docs/config-reference.md``
(``rlloom plugins --reference``); :func:`option_text` is ``rlloom plugins NAME``'s account of one option.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import re
import tokenize
from dataclasses import dataclass
from typing import Any

from rlloom.config.schema import SamplingConfig, TrainerConfig
from rlloom.plugins.registry import GROUPS, Component, Registry

CORE_SECTIONS = {"sampling": SamplingConfig, "trainer": TrainerConfig}
KEYED_KINDS = (*sorted(GROUPS), "tool")  # kinds whose registered configs are config sections
NO_DEFAULT = "required"


@dataclass(frozen=True)
class Key:
    """One config key: ``name`` dotted from its section, ``type`` as annotated, ``default`` as typed on the
    command line (``required`` when it has none), ``comment`` from the source."""

    name: str
    type: str
    default: str
    comment: str


@functools.cache
def field_comments(cls: type) -> dict[str, str]:
    """The trailing ``# comment`` of each field line in ``cls``'s own source (not its bases')."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments, line_field = {}, {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.start[0] not in line_field and token.start[1] == 4:
            line_field[token.start[0]] = token.string
        elif token.type == tokenize.COMMENT and token.start[0] in line_field:
            comments[line_field[token.start[0]]] = token.string.lstrip("#").strip()
    return comments


KEYS_COLON = re.compile(r"(?:^|(?<=; )|(?<=\. ))((?:``\w+``(?:, | / | and | or |/)?)+)(?: \([^)]*\))?: ")
"""Where a docstring bullet documents keys: ``- ``lr``, ``critic_lr``: ...; ``eps``: ...`` (a key list, colon)."""


@functools.cache
def docstring_keys(cls: type) -> dict[str, str]:
    """The first sentence documenting each key in ``cls``'s own docstring bullets (``- ``key``: text``, also
    ``; ``key``: text`` further in a bullet), by key (a list of keys documents each)."""
    described: dict[str, str] = {}
    for bullet in re.split(r"\n(?=- )", inspect.cleandoc(cls.__dict__.get("__doc__") or "")):
        text = " ".join(bullet.split("\n\n")[0].split())
        if not text.startswith("- "):
            continue
        found = list(KEYS_COLON.finditer(text[2:]))
        for match, following in zip(found, [*found[1:], None]):
            body = text[2:][match.end():following.start() if following else None].rstrip("; ")
            first_sentence = re.split(r"(?<=[^.]\.)(?<!e\.g\.)(?<!i\.e\.) (?=[A-Z`(])", body)[0]
            described.update(dict.fromkeys(re.findall(r"``(\w+)``", match.group(1)), first_sentence))
    return described


def _comment(cls: type, name: str) -> str:
    """The comment of field ``name`` from the class in ``cls``'s MRO that declares it, else the bullet of a
    docstring in the MRO that documents it (:func:`docstring_keys`)."""
    for owner in cls.__mro__:
        if name in getattr(owner, "__annotations__", {}):
            comment = field_comments(owner).get(name, "")
            if comment:
                return comment
            break
    return next((docstring_keys(owner)[name] for owner in cls.__mro__ if name in docstring_keys(owner)), "")


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _typed(value: Any) -> str:
    """``value`` as a user types it in an override."""
    if value is dataclasses.MISSING or value == "???":
        return NO_DEFAULT
    if value is None:
        return "null"
    if value == "":
        return '""'
    if isinstance(value, bool):
        return str(value).lower()
    if hasattr(value, "value") and type(value).__module__ != "builtins":  # an Enum
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_typed(item) for item in value) + "]"
    return str(value)


def keys(schema: type, prefix: str = "") -> list[Key]:
    """The keys of the dataclass ``schema`` in declaration order (see the module doc)."""
    rows = []
    for field in dataclasses.fields(schema):
        default = _default(field)
        if dataclasses.is_dataclass(default) and not isinstance(default, type):
            rows += keys(type(default), f"{prefix}{field.name}.")
            continue
        annotation = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
        rows.append(Key(prefix + field.name, annotation, _typed(default), _comment(schema, field.name)))
    return rows


def summary(schema: type) -> str:
    """The first paragraph of ``schema``'s own docstring, or of its module's when the class's points there (``see
    the module doc``), on one line ("" when there is none)."""
    doc = schema.__dict__.get("__doc__") or ""
    if doc.startswith(f"{schema.__name__}("):  # what @dataclass writes for a class without a docstring
        doc = ""
    if "module doc" in doc:
        doc = getattr(inspect.getmodule(schema), "__doc__", None) or doc
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "\\n")


def key_table(rows: list[Key], section: str) -> list[str]:
    lines = ["| key | type | default | what |", "|---|---|---|---|"]
    lines += [f"| `{section}.{key.name}` | `{_cell(key.type)}` | `{_cell(key.default)}` | {_cell(key.comment)} |"
              for key in rows]
    return lines


def _configured(registry: Registry, kind: str) -> list[Component]:
    return [component for _, component in sorted(registry.components[kind].items())
            if dataclasses.is_dataclass(component.config)]


def _section(component: Component) -> str:
    """Where ``component``'s keys live: its config's ``section`` when it names one, else its kind's group."""
    return getattr(component.config, "section", None) or (
        f"agent.tool_settings.{component.name}" if component.kind == "tool" else component.kind)


def reference_markdown(registry: Registry) -> str:
    """``docs/config-reference.md``: the core sections, then each group's options (see the module doc)."""
    lines = ["# Config reference", "",
             "Every key of every installed in-tree option, generated from the config schemas by "
             "`rlloom plugins --reference > docs/config-reference.md` (a test fails when this page is stale). "
             "`rlloom plugins NAME` prints one option's. Batch sizes count prompts unless a key says otherwise.", ""]
    for section, schema in CORE_SECTIONS.items():
        lines += [f"## {section}", "", summary(schema), "", *key_table(keys(schema), section), ""]
    for kind in KEYED_KINDS:
        components = _configured(registry, kind)
        if not components:
            continue
        lines += [f"## {kind}", ""]
        for component in components:
            title = f"{kind}={component.name}" if kind in GROUPS else f"tool {component.name}"
            rows = keys(component.config)
            lines += [f"### {title} ({component.distribution})", "", summary(component.config), ""]
            lines += [*key_table(rows, _section(component)), ""] if rows else ["No keys.", ""]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).rstrip() + "\n"


def option_text(registry: Registry, name: str) -> str | None:
    """``rlloom plugins NAME``: every registered component called ``name`` — kind, distribution, what it is and
    its keys; None when nothing is called so."""
    found = [component for kind in registry.components for component_name, component in
             registry.components[kind].items() if component_name == name]
    if not found:
        return None
    parts = []
    for component in found:
        title = f"{component.kind}={name}" if component.kind in GROUPS else f"{component.kind} {name}"
        what = summary(component.config) if dataclasses.is_dataclass(component.config) else ""
        what = what or (inspect.getdoc(component.factory) or "").split("\n\n")[0].replace("\n", " ")
        lines = [f"{title}  ({component.distribution} {component.version})", f"  {what}" if what else ""]
        if dataclasses.is_dataclass(component.config):
            for key in keys(component.config):
                comment = f"  # {key.comment}" if key.comment else ""
                lines.append(f"  {_section(component)}.{key.name}: {key.type} = {key.default}{comment}")
        parts.append("\n".join(line for line in lines if line))
    return "\n\n".join(parts)
