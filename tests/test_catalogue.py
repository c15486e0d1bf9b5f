"""The catalogue of our plugins (the core distribution's extras) against what the installed in-tree plugins
register: an error about a name that is not installed must send the user to the distribution that has it."""

from __future__ import annotations

from rlloom.plugins.registry import Registry, catalogue, provider_of, unknown_name_message


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
    assert message.endswith("It is provided by the package rlloom-sglang: pip install rlloom-sglang")
    assert "It is provided" not in unknown_name_message("rollout", "nothing_like_it", ["hf"])
