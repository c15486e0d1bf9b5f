"""``rlloom plan``: choose where the roles run (:mod:`rlloom_trainer.planning`).

``rlloom plan --profile [--out FILE] OVERRIDES``: a few steps of the config at two batch sizes (under
``launcher=ray`` also on its pools doubled); writes the measured
:class:`~rlloom_trainer.planning.profile.Profile` (JSON). ``rlloom plan cluster=8xH100
[--from FILE] [--shape NAME] OVERRIDES``: ranks the placements that fit the cluster by predicted step
time, explains the fastest few, and prints the winner as the overrides ``rlloom train`` takes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from rlloom.errors import ConfigError


def split_cluster(arguments: list[str]) -> tuple[str | None, list[str]]:
    """(the value of a ``cluster=…`` argument, the other arguments: the config's overrides)."""
    cluster = [item.split("=", 1)[1] for item in arguments if item.startswith("cluster=")]
    if len(cluster) > 1:
        raise ConfigError("rlloom plan: give cluster= once")
    return (cluster[0] if cluster else None), [item for item in arguments if not item.startswith("cluster=")]


def config_keys(resolved) -> set[str]:
    """Every ``section.key`` of a composed config (the keys its chosen plugins have)."""
    import dataclasses

    return {f"{name}.{key.name}" for name, section in resolved.sections.items() if dataclasses.is_dataclass(section)
            for key in dataclasses.fields(section)}


def kept_overrides(overrides: list[str], plan: list[str], launcher: str) -> list[str]:
    """The user's overrides without those the ``plan`` sets (its keys; the pools and the mapping, which it
    lays out), and without the user's other ``launcher.*`` keys when the config's ``launcher`` is not the
    plan's (they are another launcher's)."""
    def key(item: str) -> str:
        return item.split("=", 1)[0].lstrip("+~")

    planned = {key(item) for item in plan}
    same_launcher = f"launcher={launcher}" in plan
    laid_out = ("launcher.resource_pools", "launcher.mapping")
    return [item for item in overrides if key(item) not in planned and not key(item).startswith(laid_out)
            and (same_launcher or key(item).split(".")[0] != "launcher")]


def cmd_profile(args: argparse.Namespace, overrides: list[str]) -> int:
    from rlloom_trainer.planning.profile import run_profile

    profile = run_profile(overrides, args.steps)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(profile.to_json(), handle, indent=1)
    data = profile.to_json()
    print(json.dumps({key: data[key] for key in ("step_s", "doubled_step_s", "threads", "rates")}, indent=1))
    print(f"rlloom: wrote {args.out}", file=sys.stderr)
    return 0


def plan_shape(name: str | None, profile, resolved):
    """The model's shape: ``--shape``, else the profile's, else the ``config.json`` of ``model.path``."""
    from rlloom_trainer.planning.memory import ModelShape

    if name:
        return ModelShape.named(name)
    if profile is not None:
        return profile.shape
    path = getattr(resolved.sections["model"], "path", None)
    if not path:
        raise ValueError("rlloom plan: give the model's shape: --shape qwen2.5-0.5b|qwen2.5-7b|<config.json>, or "
                         "--from a profile")
    return ModelShape.named(path)


def cmd_plan(args: argparse.Namespace) -> int:
    """``--profile``, or rank the placements of the config on ``cluster=`` and print the winner."""
    from rlloom.config import compose_config

    from rlloom_trainer.planning.explain import plan_report
    from rlloom_trainer.planning.hardware import parse_cluster
    from rlloom_trainer.planning.profile import read_profile

    cluster_text, overrides = split_cluster(args.arguments)
    resolved = compose_config(overrides)
    if args.profile:
        return cmd_profile(args, overrides)
    if cluster_text is None:
        raise ConfigError("rlloom plan: name the target cluster: cluster=8xH100, cluster=2x8xH100 or "
                          "cluster=<file>.yaml (docs/placement.md)")
    try:
        cluster = parse_cluster(cluster_text)
        profile = read_profile(args.from_profile) if args.from_profile else None
        shape = plan_shape(args.shape, profile, resolved)
    except (ValueError, OSError) as error:
        raise ConfigError(str(error)) from None
    text, winner = plan_report(resolved, config_keys(resolved), cluster, shape, profile, args.prompt_tokens,
                               args.top)
    print(text)
    print("rlloom train " + " ".join(kept_overrides(overrides, winner, resolved.choices["launcher"]) + winner))
    return 0


def command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """choose a placement of the roles on a cluster (or --profile the config)

    Adds ``rlloom plan``'s arguments to ``parser``; returns :func:`cmd_plan`."""
    parser.description = (
        "Rank placements of a config's roles on a cluster (colocated or split pools, pool sizes, TP/DP/SP, "
        "offload, micro-batch) by predicted step time within each device's memory; print the fastest few and the "
        "winner's overrides for rlloom train. With --profile, measure the config's stage costs instead.")
    parser.add_argument("arguments", nargs="*", help="cluster=8xH100|2x8xH100|FILE.yaml and the config's overrides")
    parser.add_argument("--profile", action="store_true",
                        help="run a few steps at two batch sizes (and on the pools doubled), write --out")
    parser.add_argument("--out", default="profile.json", help="where --profile writes (default profile.json)")
    parser.add_argument("--steps", type=int, default=5, help="steps per --profile run (the first is not timed)")
    parser.add_argument("--from", dest="from_profile", metavar="FILE", help="a profile's rates (its device's kind)")
    parser.add_argument("--shape", help="the model: qwen2.5-0.5b, qwen2.5-7b, a config.json or a model folder")
    parser.add_argument("--prompt-tokens", type=int, default=256, help="mean prompt length without a profile")
    parser.add_argument("--top", type=int, default=3, help="placements explained")
    return cmd_plan
