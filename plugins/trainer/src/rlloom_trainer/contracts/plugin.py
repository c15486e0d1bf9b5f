"""What every plugin owes rlloom, whatever it provides: :class:`PluginContract`."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, ClassVar

import pytest
from rlloom.plugins.registry import Registry

from rlloom_trainer.testing import entry_point_registry

LOADS_ALONE = """
import sys
from rlloom_trainer.testing import entry_point_registry
entry_point_registry(sys.argv[1])
print(sorted(name for name in sys.modules if name == "torch" or name.startswith("torch.")))
"""


class PluginContract:
    """The entry point ``entry_point`` (group ``rlloom``) loads on its own, registers ``name`` of ``kind``,
    and imports no torch while it does. A contract of a kind sets ``kind``; a plugin's test class sets
    ``entry_point`` and ``name``, and ``config`` (settings of the component's config dataclass) where the
    defaults do not build it."""

    entry_point: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    config: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def registry(cls) -> Registry:
        """The plugin's entry point loaded alone (the test fails with the plugin's traceback if it fails)."""
        assert cls.entry_point and cls.kind and cls.name, (
            f"{cls.__name__}: set entry_point and name (and kind, for a contract of your own)")
        return entry_point_registry(cls.entry_point)

    @classmethod
    def component_config(cls, registry: Registry) -> Any:
        """The component's config dataclass with ``config`` applied, or None when it registered none."""
        schema = registry.get(cls.kind, cls.name).config
        return None if schema is None else schema(**cls.config)

    def test_registers_its_name(self, registry):
        assert self.name in registry.components.get(self.kind, {}), (
            f"entry point {self.entry_point!r} registers no {self.kind} {self.name!r}; it registers "
            f"{ {kind: sorted(names) for kind, names in registry.components.items() if names} }")

    def test_loading_it_imports_no_torch(self):
        env = {key: value for key, value in os.environ.items() if key != "RLLOOM_PLUGINS"}
        done = subprocess.run([sys.executable, "-c", LOADS_ALONE, self.entry_point], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "[]", (
            f"loading entry point {self.entry_point!r} imported {done.stdout.strip()}: register heavy factories as "
            "'module:attribute' strings and keep config dataclasses in a module without torch")


class EngineContract(PluginContract):
    """A contract of an engine kind: the engine under test is built once per test class on the tiny model, on the
    CPU, as the role ``engine_role`` (``EngineSpec``), and closed after the class's tests."""

    engine_role: ClassVar[str] = ""

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls, registry, rlloom_tiny_model):
        engine = cls.build(registry, rlloom_tiny_model)
        yield engine
        engine.close()

    @classmethod
    def build(cls, registry, model_path: str):
        """The engine under test: the component's factory with ``config`` (override to wrap or configure it)."""
        from rlloom import EngineSpec

        spec = EngineSpec(model_path, cls.engine_role, seed=0, total_train_steps=10, device="cpu")
        return registry.get(cls.kind, cls.name).factory(cls.component_config(registry), spec)
