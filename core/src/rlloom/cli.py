"""``rlloom`` command line: ``train`` a run from Hydra overrides, list ``plugins``.

User errors (bad config, missing plugin) print one paragraph and exit with status 2, no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from rlloom.config import ConfigError, compose_config
from rlloom.plugins.registry import KINDS, UnknownPluginError, get_registry

USAGE_ERROR = 2


def plugin_rows() -> list[dict[str, str]]:
    """One row per registered component, plus one per entry point that failed to load."""
    rows = []
    for status in get_registry().statuses:
        if status.status == "failed":
            rows.append({"name": status.entry_point, "kind": "?", "distribution": status.distribution,
                         "version": status.version, "status": f"failed: {status.error}"})
        for component in status.components:
            rows.append({"name": component.name, "kind": component.kind, "distribution": component.distribution,
                         "version": component.version, "status": "loaded"})
    return rows


def cmd_plugins(args: argparse.Namespace) -> int:
    rows = plugin_rows()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "kind", "distribution", "version", "status", title="rlloom plugins")
    for row in sorted(rows, key=lambda r: (list(KINDS).index(r["kind"]) if r["kind"] in KINDS else -1, r["name"])):
        table.add_row(row["name"], row["kind"], row["distribution"], row["version"], row["status"])
    Console(width=160).print(table)
    presets = get_registry().presets
    if presets:
        print("presets: " + ", ".join(f"{p.name} ({p.description})" for p in presets.values()))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    if args.print_config:
        print(compose_config(args.overrides).to_yaml())
        return 0
    from rlloom.trainer import run_training

    metrics = run_training(args.overrides)
    summary = {k: v for k, v in metrics.items() if k.startswith("val-") or k == "critic/score/mean"}
    print(json.dumps(summary, indent=1, sort_keys=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlloom", description="RL post-training for language models.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="run training",
        description="Run training. Overrides are Hydra syntax: group=option (algorithm=grpo, rollout=hf, "
        "train_engine=fsdp, reward=..., data=..., model=..., launcher=local, preset=tiny) and key=value "
        "(trainer.total_steps=20, algorithm.n=8, sampling.max_new_tokens=16).",
    )
    train.add_argument("overrides", nargs="*", help="Hydra overrides")
    train.add_argument("--print-config", action="store_true", help="print the composed config and exit")
    train.set_defaults(func=cmd_train)
    plugins = sub.add_parser("plugins", help="list installed plugins")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(func=cmd_plugins)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, UnknownPluginError) as error:
        print(f"rlloom: error: {error}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
