"""The one error a Ray worker failure becomes on the controller."""

from __future__ import annotations

from rlloom.errors import RoleFailedError


class WorkerError(RoleFailedError):
    """A worker call failed: it raised, its process died, or it did not answer in time.

    The message names the role, the rank in its pool, the method, and carries the remote traceback
    (or Ray's account of the death)."""

    def __init__(self, role: str, rank: int, method: str, what: str, detail: str) -> None:
        self.role, self.rank, self.method = role, rank, method
        super().__init__(f"Ray worker for role {role!r} rank {rank} {what} during {method}():\n{detail}")
