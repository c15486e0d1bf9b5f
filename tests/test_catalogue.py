"""The catalogue of our plugins (the core distribution's extras) against what the installed in-tree plugins
register: an error about a name that is not installed must send the user to the distribution that has it."""

from __future__ import annotations

import tomllib
from pathlib import Path

from rlloom.plugins.registry import Registry, catalogue, install_command, provider_of, unknown_name_message

CHECKOUT = Path(__file__).resolve().parents[1]


def test_every_name_an_in_tree_plugin_registers_has_its_distribution_in_the_catalogue():
    registry = Registry()
    assert registry.failed() == []
    registered = [(kind, name, component.distribution) for kind, components in registry.components.items()
                  for name, component in components.items() if component.distribution != "rlloom"]
    assert len(registered) > 50
    wrong = sorted(f"{kind} {name}: {distribution}, catalogue says {provider_of(kind, name)}"
                   for kind, name, distribution in registered if provider_of(kind, name) != distribution)
    assert wrong == []
    assert set(catalogue().values()) == {distribution for _, _, distribution in registered}


def test_a_name_that_is_not_installed_names_its_package():
    message = unknown_name_message("rollout", "sglang", ["hf"])
    assert message.endswith(f"It is provided by the package rlloom-sglang: pip install -e {CHECKOUT}/backends/sglang")
    assert "It is provided" not in unknown_name_message("rollout", "nothing_like_it", ["hf"])


def test_every_install_hint_names_a_folder_of_this_checkout_holding_that_package():
    """The distributions are not on PyPI: the hint an error gives must install the package when followed."""
    for package in sorted(set(catalogue().values())):
        command = install_command(package)
        assert command.startswith(f"pip install -e {CHECKOUT}/"), command
        project = tomllib.loads((Path(command.removeprefix("pip install -e ")) / "pyproject.toml").read_text())
        assert project["project"]["name"] == package
    assert install_command("rlloom-not-in-this-checkout") == "pip install rlloom-not-in-this-checkout"
