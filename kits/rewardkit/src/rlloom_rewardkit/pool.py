"""A pool of worker processes that runs one call per row, each under a wall-clock deadline.

Workers are started with the ``spawn`` method (no copy of the trainer's threads or CUDA state),
on first use, and are reused across batches; rows are only sent once a worker has started. A row
is sent to an idle worker as the pickled pair ``(fn, args)``; the worker answers with an
:class:`~rlloom_rewardkit.outcome.Outcome`. A worker still busy ``timeout_s`` seconds after it got its
row is killed (its row is a timeout) and replaced; a worker that dies (segfault, ``os._exit``)
makes its row an error and is replaced too.

``fn`` must be picklable by reference (a module-level function, or an instance of a module-level
class). A worker imports ``fn``'s module when its first row arrives (that time counts against the
row, as a verifier's lazy imports do in-process), so verifiers live in modules that do not import
torch (e.g. ``rlloom_rewards.math_verifier``, or a tasks reward's module).

Like every ``multiprocessing`` spawn user, the program that starts the run must guard its entry
point with ``if __name__ == "__main__":`` (console scripts such as ``rlloom`` do).
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from rlloom_rewardkit.outcome import ERROR, TIMEOUT, Outcome, call, describe


def _serve(conn: Connection) -> None:
    """Worker loop: say it is ready, then receive a pickled ``(fn, args)`` and send back its outcome,
    until the pipe closes."""
    conn.send(None)
    while True:
        try:
            payload = conn.recv_bytes()
        except EOFError:
            return
        try:
            task = pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - e.g. fn's module is not importable here
            conn.send(Outcome(ERROR, message=f"cannot load the verifier in the worker: {describe(exc)}"))
            continue
        outcome = call(*task)
        try:
            conn.send(outcome)
        except Exception as exc:  # noqa: BLE001 - an unpicklable return value
            conn.send(Outcome(ERROR, message=f"cannot send the verifier's result back: {describe(exc)}"))


class _Worker:
    def __init__(self, context: Any) -> None:
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_serve, args=(child_conn,), daemon=True, name="rlloom-reward-worker")
        self.process.start()
        child_conn.close()
        self.row: int | None = None
        self.deadline = float("inf")

    def wait_ready(self) -> _Worker:
        """Block until the process has started (so start-up time never counts against a row)."""
        try:
            self.conn.recv()
        except EOFError:
            raise RuntimeError(f"a reward worker process failed to start (exit code {self.process.exitcode})") from None
        return self

    def stop(self) -> None:
        """Kill the process now (its current call is abandoned)."""
        self.process.kill()
        self.process.join()
        self.conn.close()


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    workers.clear()


class WorkerPool:
    """``num_workers`` processes; :meth:`map` runs ``fn`` on every row (see the module doc)."""

    def __init__(self, num_workers: int) -> None:
        if num_workers < 1:
            raise ValueError(f"a WorkerPool needs num_workers >= 1, got {num_workers}")
        self.num_workers = num_workers
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)

    def map(self, fn: Callable[..., Any], rows: Sequence[tuple], timeout_s: float = 0.0) -> list[Outcome]:
        """The outcome of ``fn(*row)`` for every row, in row order; ``timeout_s <= 0``: no deadline."""
        outcomes: list[Outcome | None] = [None] * len(rows)
        payloads: deque[tuple[int, bytes]] = deque()
        for index, row in enumerate(rows):
            try:
                payloads.append((index, pickle.dumps((fn, tuple(row)))))
            except Exception as exc:  # noqa: BLE001 - an unpicklable row or verifier fails that row only
                outcomes[index] = Outcome(ERROR, message=f"cannot send the row to a worker: {describe(exc)}")
        missing = min(self.num_workers, len(payloads)) - len(self._workers)
        started = [_Worker(self._context) for _ in range(missing)]
        self._workers.extend(worker.wait_ready() for worker in started)
        busy: dict[Connection, _Worker] = {}
        while payloads or busy:
            for worker in self._workers:
                if worker.row is None and payloads:
                    worker.row, payload = payloads.popleft()
                    worker.conn.send_bytes(payload)
                    worker.deadline = time.monotonic() + timeout_s if timeout_s > 0 else float("inf")
                    busy[worker.conn] = worker
            next_deadline = min(worker.deadline for worker in busy.values())
            wait_s = None if next_deadline == float("inf") else max(0.0, next_deadline - time.monotonic())
            for conn in wait(list(busy), timeout=wait_s):
                worker = busy.pop(conn)
                try:
                    outcomes[worker.row] = conn.recv()
                    worker.row = None
                except EOFError:
                    worker.process.join(1)
                    code = worker.process.exitcode
                    outcomes[worker.row] = Outcome(ERROR, message=f"the worker process died (exit code {code})")
                    self._replace(worker)
            now = time.monotonic()
            for conn, worker in list(busy.items()):
                if worker.deadline <= now:
                    del busy[conn]
                    outcomes[worker.row] = Outcome(TIMEOUT, message=f"no result within timeout_s={timeout_s}")
                    self._replace(worker)
        return outcomes  # type: ignore[return-value]  # every slot is filled above

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        self._workers[self._workers.index(worker)] = _Worker(self._context).wait_ready()

    def close(self) -> None:
        """Stop every worker (also done when the pool is garbage-collected or the process exits)."""
        self._finalizer()
