"""The ``rlloom`` commands that use a trained model: ``eval``, ``generate``, ``chat`` (and what they share:
finding the model a path names, :mod:`rlloom.commands.targets`)."""
