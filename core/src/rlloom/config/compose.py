"""Compose and validate a run config from command-line overrides, before anything heavy starts: expand
``preset=<name>``, check every group choice against the installed plugins, compose with Hydra from the
registered schemas, build each section's dataclass (running its own checks), check what spans sections.
Every user error is a :class:`ConfigError`, one paragraph naming the key and what is allowed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hydra import compose, initialize
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from rlloom.choices import DeviceError
from rlloom.config.roles import check_role_groups, role_groups, run_role_names
from rlloom.config.run_name import name_run
from rlloom.config.schema import DEFAULT_CHOICES, NO_ROLE, NoRoleConfig, RunConfig, SamplingConfig, run_schema
from rlloom.errors import ConfigError
from rlloom.plugins.registry import GROUPS, Registry, get_registry
from rlloom.protocols import ChecksInstalled, ChecksOtherSections, ChecksRoles, PlansOptimizerSteps
from rlloom.suggest import did_you_mean

Options = dict[str, dict[str, Any]]
"""Config group -> {option name -> its schema}."""


@dataclass
class ResolvedConfig:
    """A validated run config: ``cfg``, the composed config (read-only; what the run saves); ``choices``,
    group → option name; ``sections``, group → the option's dataclass instance (what factories receive)."""

    cfg: DictConfig
    choices: dict[str, str]
    sections: dict[str, Any]

    def to_yaml(self) -> str:
        return OmegaConf.to_yaml(self.cfg)


def declared_role_groups(registry: Registry) -> dict[str, list[str]]:
    """The config groups of the reward roles the installed algorithms declare -> those algorithms."""
    algorithms = {name: component.config for name, component in registry.components["algorithm"].items()}
    taken = set(GROUPS) | {option.group for option in registry.configs}
    return role_groups(algorithms, taken | {field.name for field in dataclasses.fields(RunConfig)})


def group_options(registry: Registry, roles: dict[str, list[str]]) -> Options:
    """Every config group the installed plugins provide, with the groups of the declared reward
    ``roles`` (:func:`declared_role_groups`), whose options are ``none`` and every reward function."""
    options: Options = {group: {} for group in DEFAULT_CHOICES}
    for group in GROUPS:
        for name, component in registry.components[group].items():
            options.setdefault(group, {})[name] = component.config
    for option in registry.configs:
        options.setdefault(option.group, {})[option.name] = option.node
    for group in roles:
        options[group] = {NO_ROLE: NoRoleConfig, **options["reward"]}
    return options


def run_sections(registry: Registry) -> list[str]:
    """The top-level sections of a run's config: the core's and one per declared reward role."""
    schema = run_schema(declared_role_groups(registry))
    return [field.name for field in dataclasses.fields(schema) if field.name != "defaults"]


def expand_presets(overrides: list[str], registry: Registry) -> list[str]:
    """Replace ``preset=<name>`` by the preset's overrides, placed before the user's own; of a key set
    twice only the later setting is kept, so the user's overrides always beat a preset's."""
    from_presets: list[str] = []
    own: list[str] = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if key == "preset" and sep:
            preset = registry.presets.get(value)
            if preset is None:
                raise ConfigError(registry.missing_message("preset", value))
            from_presets.extend(preset.overrides)
        else:
            own.append(override)
    expanded = from_presets + own
    parsed = _parse(expanded)
    last_index = {item.key_or_group: i for i, item in enumerate(parsed)}
    return [override for i, (override, item) in enumerate(zip(expanded, parsed)) if last_index[item.key_or_group] == i]


def _schema(group: str, options: Options, choices: dict[str, str]) -> Any:
    return SamplingConfig if group == "sampling" else options.get(group, {}).get(choices.get(group, ""))


def _fits(override: str, options: Options, choices: dict[str, str]) -> bool:
    """Whether a preset's ``group.key=value`` names a key of the option chosen for ``group`` (a preset's
    ``algorithm.n`` is skipped under ``algorithm=sft``, which has none; the user's own are never skipped)."""
    group, _, key = override.partition("=")[0].lstrip("+~").partition(".")
    schema = _schema(group, options, choices)
    if not key or "." in key or not dataclasses.is_dataclass(schema):
        return True
    return key in {field.name for field in dataclasses.fields(schema)}


def _parse(overrides: list[str]) -> list[Any]:
    """The parsed overrides; a ConfigError names the first that is not key=value or group=option."""
    parsed = []
    for text in overrides:
        try:
            parsed += OverridesParser.create().parse_overrides([text])
        except HydraException as error:
            raise ConfigError(f"could not parse the override {text!r}: {str(error).strip().splitlines()[0]}") from None
        if not parsed[-1].key_or_group:
            raise ConfigError(f"the override {text!r} names no key: write key=value or group=option (algorithm=grpo)")
    return parsed


def _no_such_option(group: str, value: str, options: Options, registry: Registry) -> str:
    installed = sorted(options.get(group, {}))
    if group in GROUPS:
        return registry.missing_message(group, value, installed)
    return f"{group}={value}: no such option. Valid options: {', '.join(installed)}." + did_you_mean(value, installed)


def check_group_choices(overrides: list[str], options: Options, registry: Registry) -> None:
    """Every ``group=option`` override must name an installed option; sections cannot be removed."""
    for item in _parse(overrides):
        group = item.key_or_group
        if item.is_delete() and "." not in group:
            raise ConfigError(f"~{group}: the section {group} cannot be removed; select another option instead.")
        if group in options and not item.is_delete():
            value = item.value()
            if not isinstance(value, str) or value not in options[group]:
                raise ConfigError(_no_such_option(group, str(value), options, registry))


def _store(options: Options, run_config: type) -> None:
    store = ConfigStore.instance()
    store.store(name="rlloom_run", node=run_config)
    for group, names in options.items():
        for name, node in names.items():
            store.store(group=group, name=name, node=node if node is not None else {})


def _no_such_key(full_key: str, schema: Any, choices: dict[str, str], run_config: type) -> str:
    """``<key>: no such key``, naming the valid keys of its section (of a top-level key: the sections)."""
    group, typed = full_key.split(".")[0], full_key.split(".")[-1]
    key = full_key.split(".")[1] if "." in full_key else ""
    types = {f.name: str(f.type) for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else {}
    if types.get(key, "").startswith(("dict[", "Dict[", "typing.Dict[")):  # as written, unresolved
        return f"{full_key}: {group}.{key} is a mapping; a key it does not hold yet takes a '+': +{full_key}=<value>"
    if dataclasses.is_dataclass(schema):
        valid = [f.name for f in dataclasses.fields(schema)]
        where = f"{group}={choices[group]}" if group in choices else group
        return (f"{full_key}: no such key in {where}. Valid keys of {group}: {', '.join(valid)}."
                + did_you_mean(typed, valid))
    valid = [f.name for f in dataclasses.fields(run_config) if f.name != "defaults"]
    return f"{full_key}: no such key. Top-level sections are: {', '.join(valid)}." + did_you_mean(typed, valid)


def _explain(error: OmegaConfBaseException, options: Options, choices: dict[str, str], run_config: type) -> str:
    full_key = getattr(error, "full_key", None) or ""
    schema = _schema(full_key.split(".")[0], options, choices)
    if isinstance(error, ConfigKeyError) or "not in" in str(error):
        return _no_such_key(full_key, schema, choices, run_config)
    if isinstance(error, ValidationError):
        expected = ""
        if dataclasses.is_dataclass(schema):
            field = {f.name: f for f in dataclasses.fields(schema)}.get(full_key.split(".")[-1])
            if field is not None:
                expected = f" (expected {getattr(field.type, '__name__', field.type)})"
        return f"{full_key}: invalid value{expected}: {str(error).splitlines()[0]}"
    return f"{full_key or 'config'}: {str(error).splitlines()[0]}"


def _compose(overrides: list[str], options: Options, choices: dict[str, str], run_config: type) -> DictConfig:
    """Hydra's composition of ``overrides`` over the stored schemas, its errors explained."""
    _store(options, run_config)
    GlobalHydra.instance().clear()
    try:
        with initialize(version_base=None, config_path=None):
            cfg = compose(config_name="rlloom_run", overrides=overrides)
    except OmegaConfBaseException as error:
        raise ConfigError(_explain(error, options, choices, run_config)) from None
    except HydraException as error:
        cause = error.__cause__ or error.__context__
        if isinstance(cause, OmegaConfBaseException):
            raise ConfigError(_explain(cause, options, choices, run_config)) from None
        raise ConfigError(str(error).strip().replace("\n", " ")) from None
    finally:
        GlobalHydra.instance().clear()
    if "defaults" in cfg:
        with open_dict(cfg):
            del cfg["defaults"]
    return cfg


def compose_config(overrides: list[str], registry: Registry | None = None) -> ResolvedConfig:
    """Compose and validate the run config for ``overrides``; raise :class:`ConfigError` on user errors."""
    registry = registry or get_registry()
    roles = declared_role_groups(registry)
    options = group_options(registry, roles)
    run_config = run_schema(roles)
    own = list(overrides)
    overrides = expand_presets(own, registry)
    check_group_choices(overrides, options, registry)
    choices = {**DEFAULT_CHOICES, **{group: NO_ROLE for group in roles}}
    for item in _parse(overrides):
        if item.key_or_group in options and isinstance(item.value(), str):
            choices[item.key_or_group] = item.value()
    overrides = [override for override in overrides if override in own or _fits(override, options, choices)]
    for group, choice in choices.items():
        if choice not in options.get(group, {}):
            raise ConfigError(f"the default {_no_such_option(group, choice, options, registry)}")
    cfg = _compose(overrides, options, choices, run_config)
    _reject_added_keys(cfg, options, choices, run_config)
    sections = {group: _section(cfg, group, choice) if choice else None for group, choice in choices.items()}
    sections["sampling"] = _section(cfg, "sampling", None)
    name_run(cfg, sections, choices)
    resolved = ResolvedConfig(cfg=cfg, choices=choices, sections=sections)
    check_consistency(resolved, registry, roles)
    OmegaConf.set_readonly(cfg, True)
    return resolved


def _section(cfg: DictConfig, group: str, choice: str | None) -> Any:
    """The section ``group`` as its dataclass; its own checks failing is a ConfigError, prefixed with
    ``group=choice`` unless it names its key."""
    try:
        return OmegaConf.to_object(cfg[group])
    except (ValueError, TypeError, OmegaConfBaseException) as error:
        message = str(error)
        if choice and not message.startswith(group):
            message = f"{group}={choice}: {message}"
        raise ConfigError(message) from None


def _reject_added_keys(cfg: DictConfig, options: Options, choices: dict[str, str], run_config: type) -> None:
    """``+key=value`` must not smuggle a key that no schema declares."""
    extra = sorted(set(cfg.keys()) - {f.name for f in dataclasses.fields(run_config)})
    if extra:
        raise ConfigError(_no_such_key(extra[0], None, choices, run_config))
    for group in [*choices, "sampling"]:
        schema = _schema(group, options, choices)
        if dataclasses.is_dataclass(schema):
            extra = sorted(set(cfg[group].keys()) - {f.name for f in dataclasses.fields(schema)})
            if extra:
                raise ConfigError(_no_such_key(f"{group}.{extra[0]}", schema, choices, run_config))


def check_consistency(resolved: ResolvedConfig, registry: Registry, roles: dict[str, list[str]]) -> None:
    """Checks that span sections or need the registry: tracker names, the algorithm's cut of
    ``trainer.train_batch_size`` into optimizer steps, names of registered functions, sections
    that check themselves against the installed plugins, the declared ``roles``' groups, the roles sections
    name, and the device on this machine."""
    trainer = resolved.sections["trainer"]
    algorithm = resolved.sections["algorithm"]
    for name in trainer.trackers:
        if name not in registry.components["tracker"]:
            raise ConfigError(registry.missing_message("tracker", name))
    if isinstance(algorithm, PlansOptimizerSteps):
        try:
            algorithm.optimizer_steps_per_step(trainer.train_batch_size)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    check_registered_names(resolved.sections, registry)
    check_role_groups(resolved.choices, roles, registry.choices("reward"))
    check_sections(resolved, registry)
    if resolved.choices.get("launcher") == "local":  # other launchers resolve it on their workers
        check_device_here(trainer.device)


def check_device_here(name: str) -> None:
    """ConfigError unless ``trainer.device`` can be used here; the last check, the one that imports torch, for a
    CUDA device only (``auto`` and ``cpu`` can always be used, and the run's own checks come before torch loads)."""
    if name in ("auto", "cpu"):
        return
    from rlloom.choices import resolve_device

    try:
        resolve_device(name)
    except DeviceError as error:
        raise ConfigError(str(error)) from None


REGISTERED_NAME_KEYS = {"adv_estimator": "advantage_estimator", "policy_loss": "policy_loss"}
"""Config keys (of any section) whose value names a function a plugin registered -> its registry kind."""


def check_registered_names(sections: dict[str, Any], registry: Registry) -> None:
    """ConfigError unless each key of :data:`REGISTERED_NAME_KEYS` that a section's config declares
    names an installed function; the message lists those."""
    for group, section in sections.items():
        if not dataclasses.is_dataclass(section):
            continue
        declared = {field.name for field in dataclasses.fields(section)}
        for key, kind in REGISTERED_NAME_KEYS.items():
            name = getattr(section, key, None)
            if key in declared and name not in registry.components[kind]:
                _, _, reason = registry.missing_message(kind, str(name)).partition(": ")
                raise ConfigError(f"{group}.{key}={name}: {reason}")


def check_sections(resolved: ResolvedConfig, registry: Registry) -> None:
    """The checks sections make with more than themselves: against the installed plugins
    (:class:`~rlloom.protocols.ChecksInstalled`: an agent config's tools), the roles a run of the chosen
    algorithm may have (:class:`~rlloom.protocols.ChecksRoles`) and the other sections
    (:class:`~rlloom.protocols.ChecksOtherSections`); their ValueError is a ConfigError."""
    roles = run_role_names(resolved.sections["algorithm"])
    for section in resolved.sections.values():
        try:
            if isinstance(section, ChecksInstalled):
                section.check_installed(registry)
            if isinstance(section, ChecksRoles):
                section.check_roles(roles)
            if isinstance(section, ChecksOtherSections):
                section.check_other_sections(resolved.sections)
        except ValueError as error:
            raise ConfigError(str(error)) from None
