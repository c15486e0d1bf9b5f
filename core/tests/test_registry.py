"""The plugin registry: loading real entry points, isolating failures, lookups, selection, duplicates.

Plugins are small modules written to a temporary folder on ``sys.path``. Entry points are either
built by hand (``EntryPoint.dist`` is then ``None``) or come from a real ``.dist-info`` folder that
``importlib.metadata`` discovers, as it does for an installed package.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]  # our distributions install from its folders (not on PyPI yet)
from rlloom.plugins.registry import Registry, UnknownPluginError, _selected_entry_points

CORE = importlib.metadata.EntryPoint(name="core", value="rlloom.builtins", group="rlloom")

GOOD = """
from dataclasses import dataclass
from rlloom import hookimpl

@dataclass
class WidgetConfig:
    size: int = 3

def make_widget(cfg, *args):
    return ("widget", cfg.size, args)

@hookimpl
def register_algorithms(register):
    register("widget", make_widget, config=WidgetConfig)

@hookimpl
def register_reward_fns(register):
    register("widget_reward", make_widget, config=WidgetConfig)

@hookimpl
def register_presets(register):
    register("widgety", ["algorithm=widget"], "uses the widget")
"""

BROKEN_IMPORT = """
import rlloom_no_such_dependency_xyz
"""

RAISING_HOOK = """
from rlloom import hookimpl

@hookimpl
def register_algorithms(register):
    register("half_registered", dict)

@hookimpl
def register_reward_fns(register):
    raise RuntimeError("reward table is corrupt")
"""

TYPO_HOOK = """
from rlloom import hookimpl

@hookimpl
def register_algorithm(register):  # singular: not a hook rlloom defines
    register("typo", dict)
"""


@dataclass
class PluginDir:
    """A folder on ``sys.path`` to write plugin modules and ``.dist-info`` folders into."""

    path: Path
    modules: list[str]

    def module(self, name: str, source: str) -> importlib.metadata.EntryPoint:
        """Write module ``name``; return a hand-built entry point (no distribution) for it."""
        (self.path / f"{name}.py").write_text(textwrap.dedent(source))
        self.modules.append(name)
        return importlib.metadata.EntryPoint(name=name, value=name, group="rlloom")

    def distribution(self, dist: str, version: str, entry_points: dict[str, str], where: Path | None = None) -> None:
        """Write ``<dist>-<version>.dist-info`` declaring ``entry_points`` (name -> module) in group rlloom."""
        info = (where or self.path) / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "".join(f"{name} = {module}\n" for name, module in entry_points.items())
        (info / "entry_points.txt").write_text(f"[rlloom]\n{lines}")
        importlib.invalidate_caches()


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RLLOOM_PLUGINS", raising=False)
    folder = PluginDir(tmp_path, [])
    yield folder
    for name in folder.modules:
        sys.modules.pop(name, None)


def by_name(registry: Registry) -> dict[str, object]:
    return {status.entry_point: status for status in registry.statuses}


def test_good_plugin_registers_components_configs_and_presets(plugins):
    registry = Registry(entry_points=[CORE, plugins.module("reg_good", GOOD)])
    status = by_name(registry)["reg_good"]
    assert (status.status, status.error, status.distribution, status.version) == ("loaded", "", "?", "?")
    assert sorted((c.kind, c.name) for c in status.components) == [
        ("algorithm", "widget"), ("reward", "widget_reward")]
    component = registry.get("algorithm", "widget")
    assert component.config.__name__ == "WidgetConfig" and component.distribution == "?"
    assert registry.build("algorithm", "widget", component.config(size=5), "extra") == ("widget", 5, ("extra",))
    assert registry.choices("algorithm") == ["widget"]
    assert registry.presets["widgety"].overrides == ("algorithm=widget",)
    # the core's own built-ins come through the same path
    assert registry.choices("dispatch_mode") == ["one_to_all", "rank_zero"] and registry.choices("launcher") == []
    assert registry.failed() == []


def test_failing_plugins_are_isolated_and_reported(plugins):
    entry_points = [
        CORE,
        plugins.module("reg_broken_import", BROKEN_IMPORT),
        plugins.module("reg_raising_hook", RAISING_HOOK),
        plugins.module("reg_typo_hook", TYPO_HOOK),
        plugins.module("reg_good", GOOD),
    ]
    registry = Registry(entry_points=entry_points)
    statuses = by_name(registry)
    assert [s.entry_point for s in registry.failed()] == ["reg_broken_import", "reg_raising_hook", "reg_typo_hook"]
    assert statuses["reg_broken_import"].error == (
        "ModuleNotFoundError: No module named 'rlloom_no_such_dependency_xyz'")
    assert statuses["reg_raising_hook"].error == "RuntimeError: reward table is corrupt"
    assert statuses["reg_typo_hook"].error.startswith("PluginValidationError: unknown hook 'register_algorithm'")
    assert "reward table is corrupt" in statuses["reg_raising_hook"].traceback
    assert statuses["reg_good"].status == "loaded" and statuses["core"].status == "loaded"
    # all or nothing: what the raising plugin registered before it raised is not kept
    assert registry.choices("algorithm") == ["widget"]
    assert statuses["reg_raising_hook"].components == []
    # and failed plugins are not left registered with the plugin manager
    assert sorted(name for name, _ in registry.manager.list_name_plugin()) == ["?:core", "?:reg_good"]


def test_unknown_names_list_choices_and_known_packages(plugins):
    registry = Registry(entry_points=[CORE, plugins.module("reg_good", GOOD)])
    with pytest.raises(UnknownPluginError) as info:
        registry.get("algorithm", "nope")
    assert str(info.value) == (
        "algorithm=nope: no installed plugin provides algorithm 'nope'. Installed choices: widget.")
    with pytest.raises(UnknownPluginError) as info:
        registry.get("rollout", "vllm")
    assert "rollout=vllm" in str(info.value) and "Installed choices: none." in str(info.value)
    assert str(info.value).endswith(f"pip install -e {CHECKOUT}/backends/vllm")
    with pytest.raises(UnknownPluginError, match="tracker 'wandb'.*Installed choices: none."):
        registry.get("tracker", "wandb")
    with pytest.raises(UnknownPluginError, match="unknown plugin kind 'widgets'"):
        registry.build("widgets", "widget")


def test_a_name_two_distributions_register_is_used_by_neither_and_the_rest_loads(plugins):
    plugins.module("reg_alpha_plugin", GOOD)
    plugins.module("reg_beta_plugin", GOOD.replace("widget_reward", "beta_reward"))
    plugins.distribution("rlloom-reg-alpha", "1.0.0", {"reg_alpha": "reg_alpha_plugin"})
    plugins.distribution("rlloom-reg-beta", "2.0.0", {"reg_beta": "reg_beta_plugin"})
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group="rlloom")}
    for order in (["reg_alpha", "reg_beta"], ["reg_beta", "reg_alpha"]):  # the load order changes nothing
        registry = Registry(entry_points=[CORE, *(found[name] for name in order)])
        statuses = by_name(registry)
        assert statuses["reg_alpha"].status == statuses["reg_beta"].status == "loaded"
        assert registry.choices("algorithm") == []  # "widget": registered by both, used by neither
        assert registry.choices("reward") == ["beta_reward", "widget_reward"]  # each one's other names load
        assert "widgety" not in registry.presets
        with pytest.raises(UnknownPluginError) as info:
            registry.get("algorithm", "widget")
        providers = [f"rlloom-reg-{name} (entry point 'reg_{name}')" for name in
                     (["alpha", "beta"] if order[0] == "reg_alpha" else ["beta", "alpha"])]
        assert str(info.value) == (
            f"algorithm=widget: algorithm 'widget' is registered by more than one installed plugin: {providers[0]} "
            f"and {providers[1]}. Neither is used, so that which code runs never depends on the order plugins load "
            "in; uninstall the one you do not want (pip uninstall <distribution>).")
        assert registry.load_warnings() == [
            f"algorithm 'widget' is registered by {providers[0]} and {providers[1]}: neither is used",
            f"preset 'widgety' is registered by {providers[0]} and {providers[1]}: neither is used",
        ]


def test_duplicates_are_caught_for_hand_built_entry_points_too(plugins):
    first = plugins.module("reg_first", GOOD)
    preset_only = plugins.module("reg_preset_clash", """
        from rlloom import hookimpl

        @hookimpl
        def register_presets(register):
            register("widgety", ["algorithm=other"])
    """)
    registry = Registry(entry_points=[CORE, first, plugins.module("reg_second", GOOD), preset_only])
    assert [status.status for status in registry.statuses] == ["loaded"] * 4
    statuses = by_name(registry)
    assert registry.conflicts[("algorithm", "widget")] == [statuses["reg_first"], statuses["reg_second"]]
    assert len(registry.conflicts[("preset", "widgety")]) == 3  # a third provider joins the clash
    assert "widgety" not in registry.presets and registry.choices("algorithm") == []


def test_a_known_package_that_failed_to_load_is_named_with_its_error(plugins):
    broken = plugins.module("reg_tasks_broken", BROKEN_IMPORT)
    plugins.distribution("rlloom-tasks", "9.9.9", {"reg_tasks_broken": "reg_tasks_broken"})
    found = {ep.name: ep for ep in importlib.metadata.entry_points(group="rlloom")}
    registry = Registry(entry_points=[CORE, found["reg_tasks_broken"]])
    with pytest.raises(UnknownPluginError) as info:
        registry.get("reward", "arithmetic")
    assert str(info.value).endswith(
        "It is provided by rlloom-tasks, which is installed but failed to load: ModuleNotFoundError: No module "
        "named 'rlloom_no_such_dependency_xyz'")
    assert "pip install" not in str(info.value)
    other = Registry(entry_points=[CORE, broken])  # an unknown third party: its failure is listed
    with pytest.raises(UnknownPluginError, match="Installed plugins that failed to load \\(one may provide it\\): "
                                                 "\\? \\(entry point 'reg_tasks_broken'\\): ModuleNotFoundError"):
        other.get("algorithm", "widget")
    assert other.load_warnings() == [
        "plugin ? (entry point 'reg_tasks_broken') failed to load and provides nothing: ModuleNotFoundError: No "
        "module named 'rlloom_no_such_dependency_xyz'"]


def test_rlloom_plugins_env_restricts_loading_but_core_always_loads(plugins, monkeypatch):
    plugins.module("reg_alpha_plugin", GOOD)
    plugins.module("reg_beta_plugin", GOOD.replace("widget", "beta"))
    plugins.distribution("rlloom-reg-alpha", "1.0.0", {"reg_alpha": "reg_alpha_plugin"})
    plugins.distribution("rlloom-reg-beta", "2.0.0", {"reg_beta": "reg_beta_plugin"})

    everything = [ep.name for ep in _selected_entry_points()]
    assert everything[0] == "core" and {"reg_alpha", "reg_beta"} <= set(everything)

    monkeypatch.setenv("RLLOOM_PLUGINS", " reg_beta , ")
    assert [ep.name for ep in _selected_entry_points()] == ["core", "reg_beta"]
    registry = Registry()
    assert [(s.entry_point, s.distribution, s.status) for s in registry.statuses] == [
        ("core", "rlloom", "loaded"), ("reg_beta", "rlloom-reg-beta", "loaded")]
    assert registry.choices("algorithm") == ["beta"]

    monkeypatch.setenv("RLLOOM_PLUGINS", "")
    assert [ep.name for ep in _selected_entry_points()] == ["core"]

