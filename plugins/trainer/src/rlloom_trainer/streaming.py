"""The buffer of streamed groups (``trainer.stream_groups``, docs/async.md): finished groups wait in the order
they finished; a step takes the first ``batch_size`` of them that are fresh enough, and the stale ones are
dropped or regenerated (``trainer.stale_policy``; a prompt regenerated once and stale again is dropped); what
was trained or dropped is recorded by prompt, so that a checkpoint says exactly which prompts of the drawn
batches are done.

A group is identified by its prompt's uid ``draw<k>-<i>`` (row ``i`` of the ``k``-th drawn batch). With
``version`` the weights a group was generated with and K ``trainer.max_staleness``, step ``s`` (which trains
at version ``s - 1``) accepts a group when ``s - 1 - version <= K``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlloom.batch import Batch

DROP, REGENERATE = "drop", "regenerate"


def place(uid: str) -> tuple[int, int]:
    """``(k, i)`` of the uid ``draw<k>-<i>``."""
    draw, row = uid.removeprefix("draw").split("-")
    return int(draw), int(row)


@dataclass
class Group:
    """One prompt's ``n`` finished responses (``batch``) and the weights' ``version`` that generated them."""

    uid: str
    version: int
    batch: Batch


@dataclass
class GroupBuffer:
    """Finished groups in arrival order, and the uids ``done`` (trained or dropped) of the batches drawn.

    ``take(step)`` first removes every group older than K versions for ``step``: ``drop`` drops it (done,
    counted in ``dropped``); ``regenerate`` hands it back to be generated again (counted in ``regenerated``)
    the first time its prompt is stale, and drops it the second (a prompt is regenerated at most once, so a
    prompt whose generation keeps outlasting K updates cannot be regenerated forever). Then, once at least
    ``batch_size`` groups remain, it takes the first ``batch_size`` to arrive, ordered by (draw, row)."""

    batch_size: int
    max_staleness: int
    policy: str = DROP
    groups: list[Group] = field(default_factory=list)
    done: set[str] = field(default_factory=set)
    dropped: int = 0
    regenerated: int = 0
    first: int = 1  # the first drawn batch that may have a prompt not done
    again: set[str] = field(default_factory=set)  # the prompts regenerated, not yet done

    def arrive(self, group: Group) -> None:
        self.groups.append(group)

    def take(self, step: int) -> tuple[list[Group] | None, list[Group], list[Group]]:
        """``(taken, dropped, again)``: the step's groups (None while fewer than ``batch_size`` fresh ones wait),
        the stale groups dropped, and the stale groups to generate again (``regenerate``)."""
        oldest = step - 1 - self.max_staleness
        stale = [group for group in self.groups if group.version < oldest]
        self.groups = [group for group in self.groups if group.version >= oldest]
        dropped = [group for group in stale if self.policy == DROP or group.uid in self.again]
        again = [group for group in stale if self.policy == REGENERATE and group.uid not in self.again]
        self.again.update(group.uid for group in again)
        self.regenerated += len(again)
        self.dropped += len(dropped)
        self._finish(dropped)
        if len(self.groups) < self.batch_size:
            return None, dropped, again
        taken, self.groups = self.groups[: self.batch_size], self.groups[self.batch_size :]
        self._finish(taken)
        return sorted(taken, key=lambda group: place(group.uid)), dropped, again

    def _finish(self, groups: list[Group]) -> None:
        """``groups``' prompts are done (trained or dropped)."""
        self.done.update(group.uid for group in groups)
        self.again.difference_update(group.uid for group in groups)

    def first_open(self, drawn: int) -> int:
        """The first of the ``drawn`` batches (``batch_size`` prompts each) with a prompt not done (``drawn + 1``:
        none), from :attr:`first` on; it becomes :attr:`first`, and the done uids before it are forgotten."""
        rows = range(self.batch_size)
        self.first = next((k for k in range(self.first, drawn + 1) if any(f"draw{k}-{i}" not in self.done
                                                                           for i in rows)), drawn + 1)
        self.done = {uid for uid in self.done if place(uid)[0] >= self.first}
        return self.first
