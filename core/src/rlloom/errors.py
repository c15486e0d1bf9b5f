"""The errors a command ends with, one paragraph and no traceback (:mod:`rlloom.cli`): a bad config or a role
that cannot start (exit status 2), a run that stops itself (1), a role that fails mid-run (3)."""


class ConfigError(ValueError):
    """A user error in the run config. ``str(error)`` is the one-paragraph message to print."""


class RunFailedError(RuntimeError):
    """A run stopped itself (too many non-finite steps) or could not write or read its state (a
    checkpoint); the message says why and where to look."""


class RoleStartError(RuntimeError):
    """A role could not be built: one paragraph naming the role, the config choice and the cause's first
    line, or a worker's :meth:`RoleFailedError.summary` (the cause is chained for ``RLLOOM_DEBUG=1``)."""

    def __init__(self, role: str, choice: str, cause: BaseException) -> None:
        first_line = (cause.summary() if isinstance(cause, RoleFailedError)
                      else (str(cause).strip().splitlines() or [""])[0])
        what = {"model": "the model source", "data": "the dataset"}.get(role, f"the {role} role")
        super().__init__(f"{what} ({choice}) could not start: {type(cause).__name__}: {first_line} "
                         "(set RLLOOM_DEBUG=1 for the traceback)")


class RoleFailedError(RuntimeError):
    """A role's worker raised, died or stopped answering mid-run (launchers raise subclasses:
    ``rlloom_ray.WorkerError``); the command line prints :meth:`summary`, status 3."""

    def summary(self) -> str:
        """One paragraph for the user: which role failed and the error's last line."""
        lines = [line.strip() for line in str(self).strip().splitlines() if line.strip()]
        return lines[0] if len(lines) < 2 else f"{lines[0]} {lines[-1]}"
