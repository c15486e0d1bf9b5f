"""``rlloom plugins [NAME] [--json] [--reference]``: what is installed, and what one option takes.

Without arguments a table of every registered component (name, kind, what it is in one line, distribution,
version, status), one row per entry point that failed to load and one per provider of a name several plugins register (none of
them is used), then the presets; ``--json`` the same rows as JSON. ``NAME``: every component of that name,
with its description and config keys (:func:`rlloom_trainer.config_reference.option_text`); ``--reference``:
the whole config reference as Markdown (``docs/config-reference.md``).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable

from rlloom.config import ConfigError
from rlloom.plugins.registry import KINDS, Component, PluginStatus, get_registry
from rlloom.suggest import did_you_mean


DESCRIPTION_CHARS = 80


def description(component: Component) -> str:
    """What ``component`` is, in one line: the first clause of its config's docstring summary, else of its
    factory's when that is imported already (a ``"module:attribute"`` factory is not imported for this; "" then),
    without Sphinx roles, parentheses or the ``kind=name:`` it may start with, cut to :data:`DESCRIPTION_CHARS`."""
    import inspect

    from rlloom_trainer.config_reference import summary

    if component.config is not None:
        text = summary(component.config)
    elif not isinstance(component.target, str):
        text = " ".join((inspect.getdoc(component.target) or "").split("\n\n")[0].split())
    else:
        return ""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda ref: ref.group(1).rsplit(".", 1)[-1], text).replace("``", "")
    text = re.sub(r" \([^()]*\)", "", text.removeprefix(f"{component.kind}={component.name}: "))
    text = re.split(r"\. |: ", text)[0].rstrip(".:").removesuffix(" plus")
    return text if len(text) <= DESCRIPTION_CHARS else text[:DESCRIPTION_CHARS - 1].rstrip() + "…"


def plugin_rows() -> list[dict[str, str]]:
    """The rows of the table (see the module doc)."""
    registry = get_registry()

    def row(name: str, kind: str, plugin: PluginStatus, state: str, what: str = "") -> dict[str, str]:
        return {"name": name, "kind": kind, "what": what, "distribution": plugin.distribution,
                "version": plugin.version, "status": state}

    rows = [row(name, kind, status, f"not used: {len(providers)} plugins register it")
            for (kind, name), providers in registry.conflicts.items() for status in providers]
    for status in registry.statuses:
        if status.status == "failed":
            rows.append(row(status.entry_point, "?", status, f"failed: {status.error}"))
        rows += [row(component.name, component.kind, status, "loaded", description(component))
                 for component in status.components]
    return rows


def print_table(rows: list[dict[str, str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "kind", "what", "distribution", "version", "status", title="rlloom plugins")
    for row in sorted(rows, key=lambda r: (list(KINDS).index(r["kind"]) if r["kind"] in KINDS else -1, r["name"])):
        table.add_row(row["name"], row["kind"], row["what"], row["distribution"], row["version"], row["status"])
    Console(width=200).print(table)
    presets = get_registry().presets
    if presets:
        print("presets: " + ", ".join(f"{p.name} ({p.description})" for p in presets.values()))


def cmd_plugins(args: argparse.Namespace) -> int:
    from rlloom_trainer.config_reference import option_text, reference_markdown

    if args.reference:
        print(reference_markdown(get_registry()), end="")
    elif args.name:
        text = option_text(get_registry(), args.name)
        if text is None:
            names = sorted({name for components in get_registry().components.values() for name in components})
            raise ConfigError(f"no installed plugin registers anything called {args.name!r}; the names are: "
                              f"{', '.join(names)}." + did_you_mean(args.name, names))
        print(text)
    elif args.json:
        print(json.dumps(plugin_rows(), indent=1))
    else:
        print_table(plugin_rows())
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """list installed plugins, or one option's description and config keys

    Adds ``rlloom plugins``' arguments to ``parser``; returns :func:`cmd_plugins`."""
    parser.description = __doc__.split("\n\n")[1].replace("\n", " ")
    parser.add_argument("name", nargs="?", metavar="NAME", help="an option or component (python, hf, grpo, ...)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--reference", action="store_true", help="every config key, as Markdown")
    return cmd_plugins
