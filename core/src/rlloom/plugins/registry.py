"""One plugin manager for the process: loads the entry points of group ``rlloom`` (the core's own
built-ins as entry point ``core``), each on its own, and records what each registered or why it failed.
``RLLOOM_PLUGINS`` (comma-separated entry-point names) restricts which load; ``core`` always loads."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy

from rlloom.plugins import hookspecs
from rlloom.suggest import did_you_mean

KINDS: dict[str, str] = {spec.rlloom_kind: name for name, spec in vars(hookspecs).items()
                         if hasattr(spec, "rlloom_kind")}
"""Kind of component -> the hook that registers it (read from :func:`rlloom.plugins.hookspecs.provides`)."""
GROUPS = {kind for kind, hook in KINDS.items() if getattr(hookspecs, hook).rlloom_group}
"""The kinds whose names are options of the config group of the same name (``rollout=hf``)."""


def extras(distribution: str) -> dict[str, list[str]]:
    """Each extra of the installed ``distribution`` -> the requirements it adds, as its metadata writes them
    without the marker (``{"wandb": ["wandb>=0.17"]}``); ``{}`` when it is not installed."""
    try:
        requirements = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    marker = re.compile(r"\s*;\s*extra\s*==\s*[\"']([^\"']+)[\"']\s*$")
    found: dict[str, list[str]] = {}
    for requirement in requirements:
        match = marker.search(requirement)
        if match:
            found.setdefault(match.group(1), []).append(requirement[:match.start()].strip())
    return found


@functools.cache
def catalogue() -> dict[str, str]:
    """``<kind>-<name>`` (normalised as pip normalises extras) -> the distribution of ours that provides
    it: the core distribution's extras, each one distribution (``pip install 'rlloom[rollout-vllm]'`` installs
    rlloom-vllm)."""
    return {extra: requirement for extra, (requirement,) in extras("rlloom").items()}


def install_command(package: str) -> str:
    """How to install our distribution ``package``. They are not on PyPI yet: when this rlloom runs from a
    checkout that holds the package's folder, ``pip install -e <folder>``; else ``pip install <package>``."""
    checkout = Path(__file__).resolve().parents[4]  # <checkout>/core/src/rlloom/plugins/registry.py
    for project in sorted(checkout.glob("*/*/pyproject.toml")):
        if re.search(rf'^name = "{re.escape(package)}"$', project.read_text(encoding="utf-8"), re.M):
            return f"pip install -e {project.parent}"
    return f"pip install {package}"


def provider_of(kind: str, name: str) -> str | None:
    """The distribution that provides ``name`` of ``kind`` (:func:`catalogue`), or None."""
    return catalogue().get(re.sub(r"[-_.]+", "-", f"{kind}-{name}").lower())


class UnknownPluginError(LookupError):
    """A name was asked for that no installed plugin registered."""


@dataclass(frozen=True)
class Component:
    """One registered name: its kind, how to build it, and who provided it. ``target``: the factory as
    registered, a callable or ``"module:attribute"`` naming one (imported when :attr:`factory` is read)."""

    kind: str
    name: str
    target: Callable[..., Any] | str
    config: Any
    distribution: str
    version: str

    @functools.cached_property
    def factory(self) -> Callable[..., Any]:
        """The factory, importing ``target``'s module when it is a ``"module:attribute"`` string."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attribute = self.target.partition(":")
        if not module or not attribute:
            raise ValueError(f"{self.kind} {self.name!r} of {self.distribution}: factory {self.target!r} must be "
                             "a callable or 'module:attribute'")
        return getattr(importlib.import_module(module), attribute)


@dataclass
class PluginStatus:
    """How loading one entry point went."""

    entry_point: str
    distribution: str
    version: str
    status: str  # "loaded" or "failed"
    error: str = ""
    traceback: str = ""
    components: list[Component] = field(default_factory=list)


@dataclass(frozen=True)
class ConfigOption:
    group: str
    name: str
    node: Any
    distribution: str


@dataclass(frozen=True)
class Preset:
    name: str
    overrides: tuple[str, ...]
    description: str
    distribution: str


class Registry:
    """Everything the installed plugins registered, by kind and name."""

    def __init__(self, entry_points: list[importlib.metadata.EntryPoint] | None = None) -> None:
        self.manager = pluggy.PluginManager("rlloom")
        self.manager.add_hookspecs(hookspecs)
        self.components: dict[str, dict[str, Component]] = {kind: {} for kind in KINDS}
        self.configs: list[ConfigOption] = []
        self.presets: dict[str, Preset] = {}
        self.statuses: list[PluginStatus] = []
        # (kind, name) -> the plugin that registered it; kinds here also cover config groups and presets.
        self._providers: dict[tuple[str, str], PluginStatus] = {}
        # (kind, name) registered by more than one plugin -> those plugins; none of them provides it.
        self.conflicts: dict[tuple[str, str], list[PluginStatus]] = {}
        for entry_point in _selected_entry_points() if entry_points is None else entry_points:
            self._load(entry_point)

    # ------------------------------------------------------------------------------ loading
    def _load(self, entry_point: importlib.metadata.EntryPoint) -> None:
        dist = entry_point.dist
        status = PluginStatus(entry_point.name, dist.name if dist else "?", dist.version if dist else "?", "loaded")
        self.statuses.append(status)
        module = None
        try:
            module = entry_point.load()
            self.manager.register(module, name=f"{status.distribution}:{entry_point.name}")
            self.manager.check_pending()  # a misspelt hook name would otherwise register nothing, silently
            self.register_plugin(module, status)
        except Exception as error:  # noqa: BLE001 - isolate every plugin failure
            status.status = "failed"
            status.error = f"{type(error).__name__}: {error}"
            status.traceback = traceback.format_exc()
            if module is not None and self.manager.is_registered(module):
                self.manager.unregister(module)

    def register_plugin(self, plugin: Any, status: PluginStatus) -> None:
        """Call ``plugin``'s hook implementations, attributing what they register to ``status``. If a
        hook raises, nothing of the plugin is kept and the error propagates; a name registered twice
        is kept by neither (:meth:`_claim`)."""
        staged_components: list[Component] = []
        staged_configs: list[ConfigOption] = []
        staged_presets: list[Preset] = []
        for kind, hook_name in KINDS.items():
            def register(name: str, factory: Callable[..., Any] | str, config: Any = None, *, _kind=kind) -> None:
                staged_components.append(Component(_kind, name, factory, config, status.distribution, status.version))
            self._call(plugin, hook_name, register)

        def register_config(group: str, name: str, node: Any) -> None:
            staged_configs.append(ConfigOption(group, name, node, status.distribution))

        def register_preset(name: str, overrides: list[str], description: str = "") -> None:
            staged_presets.append(Preset(name, tuple(overrides), description, status.distribution))

        self._call(plugin, "register_configs", register_config)
        self._call(plugin, "register_presets", register_preset)
        for component in staged_components:
            if self._claim((component.kind, component.name), status):
                self.components[component.kind][component.name] = component
                status.components.append(component)
        for option in staged_configs:
            if self._claim((f"config group {option.group}", option.name), status):
                self.configs.append(option)
        for preset in staged_presets:
            if self._claim(("preset", preset.name), status):
                self.presets[preset.name] = preset

    def _claim(self, key: tuple[str, str], status: PluginStatus) -> bool:
        """Record ``status``'s plugin as the provider of ``key`` (``(kind, name)``); False when the name
        is taken: a second registration (by any plugin, the same one too) withdraws the first and puts
        the name in :attr:`conflicts`, so which code runs never depends on the order plugins load in."""
        if key in self.conflicts:
            self.conflicts[key].append(status)
            return False
        owner = self._providers.pop(key, None)
        if owner is None:
            self._providers[key] = status
            return True
        self.conflicts[key] = [owner, status]
        self._withdraw(key, owner)
        return False

    def _withdraw(self, key: tuple[str, str], owner: PluginStatus) -> None:
        """Remove what ``owner`` registered under ``key`` (a component, a config option or a preset)."""
        kind, name = key
        if kind in self.components:
            self.components[kind].pop(name, None)
            owner.components[:] = [c for c in owner.components if (c.kind, c.name) != key]
        elif kind == "preset":
            self.presets.pop(name, None)
        else:
            self.configs[:] = [o for o in self.configs if (f"config group {o.group}", o.name) != key]

    def _call(self, plugin: Any, hook_name: str, register: Callable[..., Any]) -> None:
        for impl in getattr(self.manager.hook, hook_name).get_hookimpls():
            if impl.plugin is plugin:
                impl.function(register)

    # ------------------------------------------------------------------------------ lookup
    def choices(self, kind: str) -> list[str]:
        return sorted(self.components[kind])

    def get(self, kind: str, name: str) -> Component:
        """The component ``name`` of ``kind``, or an :class:`UnknownPluginError` saying what to do."""
        if kind not in KINDS:
            raise UnknownPluginError(f"unknown plugin kind {kind!r}; kinds are {sorted(KINDS)}")
        try:
            return self.components[kind][name]
        except KeyError:
            raise UnknownPluginError(self.missing_message(kind, name)) from None

    def build(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.get(kind, name).factory(*args, **kwargs)

    def failed(self) -> list[PluginStatus]:
        return [status for status in self.statuses if status.status == "failed"]

    def missing_message(self, kind: str, name: str, installed: list[str] | None = None) -> str:
        """Why ``name`` of ``kind`` (a registry kind or ``"preset"``) cannot be used, in one paragraph:
        two plugins register it, or :func:`unknown_name_message` (``installed``: the valid choices, by
        default the registered names) with the installed plugins that failed to load (one of them may be
        the provider)."""
        if (kind, name) in self.conflicts:
            providers = " and ".join(_provider(status) for status in self.conflicts[(kind, name)])
            return (f"{_label(kind, name)}: {kind} {name!r} is registered by more than one installed plugin: "
                    f"{providers}. Neither is used, so that which code runs never depends on the order plugins load "
                    "in; uninstall the one you do not want (pip uninstall <distribution>).")
        package = provider_of(kind, name)
        failed = self.failed()
        provider = next((status for status in failed if status.distribution == package), None)
        if kind == "preset":
            presets = sorted(self.presets)
            message = (f"preset={name}: no such preset. Installed presets: {', '.join(presets) or 'none'}."
                       + did_you_mean(name, presets))
        else:
            installed = self.choices(kind) if installed is None else installed
            message = unknown_name_message(kind, name, installed, hint=provider is None)
        if provider is not None:
            return message + f" It is provided by {package}, which is installed but failed to load: {provider.error}"
        if failed:
            message += " Installed plugins that failed to load (one may provide it): " + "; ".join(
                f"{_provider(status)}: {status.error}" for status in failed) + "."
        return message

    def load_warnings(self) -> list[str]:
        """One line per installed plugin that failed to load and per name refused because several
        plugins register it (``rlloom train`` prints them; ``rlloom plugins`` shows the details)."""
        lines = [f"plugin {_provider(status)} failed to load and provides nothing: {status.error}"
                 for status in self.failed()]
        lines += [f"{kind} {name!r} is registered by {' and '.join(_provider(s) for s in providers)}: neither is used"
                  for (kind, name), providers in self.conflicts.items()]
        return lines


def _provider(status: PluginStatus) -> str:
    return f"{status.distribution} (entry point {status.entry_point!r})"


def _label(kind: str, name: str) -> str:
    return f"{kind}={name}" if kind in GROUPS else f"{kind} {name!r}"


def unknown_name_message(kind: str, name: str, installed: list[str], hint: bool = True) -> str:
    """One paragraph: what was asked, what is installed, and (with ``hint``) which package provides the name."""
    message = (f"{_label(kind, name)}: no installed plugin provides {kind} {name!r}. Installed choices: "
               f"{', '.join(installed) or 'none'}." + did_you_mean(name, installed))
    package = provider_of(kind, name) if hint else None
    if package:
        message += f" It is provided by the package {package}: {install_command(package)}"
    return message


def _selected_entry_points() -> list[importlib.metadata.EntryPoint]:
    found = list(importlib.metadata.entry_points(group="rlloom"))
    # One entry per (distribution, name): editable installs can be seen twice on sys.path.
    unique = {(ep.dist.name if ep.dist else "", ep.name): ep for ep in found}
    entry_points = sorted(unique.values(), key=lambda ep: (ep.name != "core", ep.name))
    allowed = os.environ.get("RLLOOM_PLUGINS")
    if allowed is not None:
        names = {name.strip() for name in allowed.split(",") if name.strip()} | {"core"}
        entry_points = [ep for ep in entry_points if ep.name in names]
    return entry_points


_REGISTRY: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry()
    return _REGISTRY
