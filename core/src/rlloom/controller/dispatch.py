"""Dispatch modes (:class:`rlloom.protocols.DispatchMode`): how a launcher spreads a call over a worker group's
ranks. The core's: ``one_to_all`` (every rank runs it, as collectives need; only rank 0's result is kept)
and ``rank_zero``; the data-parallel splits are :mod:`rlloom_enginekit.dispatch`'s. An engine declares a
method's mode with ``@dispatch("dp_split")``; undeclared, :data:`DEFAULT_MODES` by name, then ``one_to_all``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rlloom.types import RankCall

DISPATCH_ATTRIBUTE = "rlloom_dispatch"
ONE_TO_ALL = "one_to_all"

DEFAULT_MODES: dict[str, str] = {  # the modes of the protocol methods of engines that declare none
    "compute_log_probs": "dp_split", "compute_values": "dp_split", "train_step": "dp_split_tokens",
    "generate": "dp_split_rollout"}

Method = TypeVar("Method", bound=Callable[..., Any])


def dispatch(mode: str) -> Callable[[Method], Method]:
    """Declare the dispatch mode of an engine method (a registered mode's name)."""

    def declare(method: Method) -> Method:
        setattr(method, DISPATCH_ATTRIBUTE, mode)
        return method

    return declare


def declared_mode(obj: Any, method: str) -> str:
    """The mode of ``obj.method``: its :func:`dispatch` declaration, else :data:`DEFAULT_MODES`, else one_to_all."""
    declared = getattr(getattr(obj, method, None), DISPATCH_ATTRIBUTE, None)
    return declared or DEFAULT_MODES.get(method, ONE_TO_ALL)


class OneToAll:
    """Every rank runs the call; rank 0's result is the result."""

    def scatter(self, args: tuple, kwargs: dict, world_size: int) -> list[RankCall | None]:
        return [RankCall(args, kwargs, keep_result=rank == 0) for rank in range(world_size)]

    def gather(self, results: list[Any], args: tuple, kwargs: dict) -> Any:
        return results[0]


class RankZero(OneToAll):
    """Only rank 0 runs the call."""

    def scatter(self, args: tuple, kwargs: dict, world_size: int) -> list[RankCall | None]:
        return [RankCall(args, kwargs)] + [None] * (world_size - 1)
