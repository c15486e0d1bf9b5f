"""``rlloom`` command line: ``--version`` and the commands plugins register (``train``, ``eval``, ``plugins``, …:
rlloom-trainer; ``serve``: rlloom-server); a known command whose distribution is not installed says what to
install (status 2). Errors print one paragraph, no traceback (``RLLOOM_DEBUG=1`` shows a role's): a user error
(bad config, missing plugin, changed resume config, a role that cannot start) exits with 2; a run that stops
itself or cannot checkpoint, 1; a role failing mid-run, 3; Ctrl-C, 130; SIGTERM during ``train``, 143
(:mod:`rlloom_trainer.interrupt`)."""

from __future__ import annotations

import argparse
import os
import sys

from rlloom.errors import ConfigError, RoleFailedError, RoleStartError, RunFailedError
from rlloom.plugins.registry import UnknownPluginError, get_registry, install_command, provider_of

USAGE_ERROR = 2
RUN_FAILED = 1
ROLE_FAILED = 3
INTERRUPTED = 130  # as a shell reports a process killed by SIGINT
MAIN_COMMAND = "train"  # listed first by ``rlloom --help`` when installed (it comes with rlloom-trainer)


class PrintVersion(argparse.Action):
    """``--version``: print :func:`rlloom.provenance.version_text` and exit."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the versions of rlloom and its installed plugins")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from rlloom.provenance import version_text

        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlloom", description="RL post-training for language models.")
    parser.add_argument("--version", action=PrintVersion)
    sub = parser.add_subparsers(dest="command", required=True)
    # The main job first, then the plugins' other commands by name.
    for name, component in sorted(get_registry().components["command"].items(),
                                  key=lambda item: (item[0] != MAIN_COMMAND, item[0])):
        doc = (component.factory.__doc__ or "").strip().splitlines()
        command = sub.add_parser(name, help=doc[0] if doc else None)
        command.set_defaults(func=component.factory(command))
    return parser


def missing_command(argv: list[str]) -> str | None:
    """The error for ``rlloom <name>`` when ``name`` is a command of one of our plugins that is not
    installed, else None."""
    name = next((arg for arg in argv if not arg.startswith("-")), None)
    package = provider_of("command", name) if name else None
    if package is None or name in get_registry().components["command"]:
        return None
    return f"rlloom {name} comes with the {package} distribution, which is not installed: {install_command(package)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    missing = missing_command(argv)
    if missing:
        print(f"rlloom: error: {missing}", file=sys.stderr)
        return USAGE_ERROR
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (RoleStartError, ConfigError, UnknownPluginError) as error:
        if isinstance(error, RoleStartError) and os.environ.get("RLLOOM_DEBUG"):
            raise
        print(f"rlloom: error: {error}", file=sys.stderr)
        return USAGE_ERROR
    except RoleFailedError as error:
        if os.environ.get("RLLOOM_DEBUG"):
            raise
        print(f"rlloom: error: {error.summary()} (set RLLOOM_DEBUG=1 for the worker's traceback)", file=sys.stderr)
        return ROLE_FAILED
    except (RunFailedError, FileNotFoundError) as error:
        print(f"rlloom: error: {error}", file=sys.stderr)
        return RUN_FAILED
    except BrokenPipeError:  # the reader stopped early (rlloom plugins --json | head): nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush must not fail again
        return 0
    except KeyboardInterrupt:  # rlloom train says more (rlloom_trainer.interrupt)
        print("rlloom: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
