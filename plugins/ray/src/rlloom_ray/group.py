"""A resource pool's worker processes and the waiting on their calls."""

from __future__ import annotations

import re
import time
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from rlloom_ray.errors import WorkerError

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class WorkerGroup:
    """The Ray actors of one pool (rank ``i`` = ``workers[i]``) and its placement group.

    :meth:`wait` collects one call per rank; the first failure (in completion order, so a rank that
    died is reported rather than a peer stuck in a collective with it) or a timeout raises
    :class:`WorkerError`, and marks the group ``failed`` (shutdown then skips its ``close`` calls).
    """

    def __init__(self, pool: str, workers: list[Any], placement: Any, timeout_s: float) -> None:
        self.pool, self.workers, self.placement, self.timeout_s = pool, workers, placement, timeout_s
        self.failed = False

    def wait(self, role: str, method: str, refs: list[Any], timeout_s: float | None = None,
             started: float | None = None, setting: str = "launcher.call_timeout_s") -> list[Any]:
        """Results of ``refs`` (one per rank) in rank order; the timeout (default: the group's call timeout)
        counts from ``started`` (a ``time.monotonic()`` value; default: now), and its error names ``setting``,
        the key that sets it."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = (time.monotonic() if started is None else started) + timeout_s
        pending = {ref: rank for rank, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
            if not ready:
                self.failed = True
                ranks = sorted(pending.values())
                raise WorkerError(role, ranks[0], method, f"did not answer within {timeout_s:g} s",
                                  f"ranks still running: {ranks} (pool {self.pool!r}; see {setting})")
            for ref in ready:
                rank = pending.pop(ref)
                results[rank] = self.get(role, rank, method, ref)
        return results

    def get(self, role: str, rank: int, method: str, ref: Any) -> Any:
        """``ray.get(ref)``, rank ``rank``'s result of ``method``: a :class:`WorkerError` (the group marked
        ``failed``) when the call raised or its process died."""
        try:
            return ray.get(ref)
        except RayTaskError as error:
            self.failed = True
            raise WorkerError(role, rank, method, "raised", ANSI_ESCAPE.sub("", str(error))) from None
        except RayActorError as error:
            self.failed = True
            raise WorkerError(role, rank, method, "died", ANSI_ESCAPE.sub("", str(error))) from None

    def kill(self) -> None:
        """Stop every worker and free the placement group."""
        from ray.util.placement_group import remove_placement_group

        for worker in self.workers:
            ray.kill(worker, no_restart=True)
        remove_placement_group(self.placement)
