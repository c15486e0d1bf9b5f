"""Entry point ``commands`` (group ``rlloom``): the commands ``rlloom eval``, ``generate``, ``chat``, ``export``
and ``plot``.

Each factory is named as ``"module:command"``: ``command(parser)`` adds the command's arguments and returns the
function that runs it (the ``register_commands`` hook's contract); its docstring's first line is the help line.
"""

from __future__ import annotations

from rlloom import hookimpl

COMMANDS = {
    "eval": "rlloom_commands.evaluate:command",
    "generate": "rlloom_commands.generate:command",
    "chat": "rlloom_commands.chat:command",
    "export": "rlloom_commands.export:command",
    "plot": "rlloom_commands.plot:command",
}


@hookimpl
def register_commands(register):
    for name, factory in COMMANDS.items():
        register(name, factory)
