"""Freeing a Megatron engine's device memory between steps without cutting any view into it.

megatron-core's DDP keeps the gradients (``param.main_grad``) and, with the distributed optimizer,
the parameters themselves as views of flat buffers, and the distributed optimizer's shards are views
of the parameters. Moving a tensor with ``.to()`` or ``param.data = …`` would leave those views
pointing at the old memory. So :class:`ParkedStorages` works on the *storages*: each is copied to host
memory (or dropped) and then resized to zero bytes in place; :meth:`ParkedStorages.restore` gives it
its size back and fills it. Every tensor and view keeps its storage object throughout.
"""

from __future__ import annotations

import torch


class ParkedStorages:
    """The storages of ``kept`` (copied to host memory) and of ``dropped`` (restored as zeros),
    each freed on its device; a storage shared by several tensors is handled once."""

    def __init__(self, kept: list[torch.Tensor], dropped: list[torch.Tensor]) -> None:
        self._parked: list[tuple[torch.UntypedStorage, int, torch.UntypedStorage | None]] = []
        seen: set[int] = set()
        for tensors, keep in ((kept, True), (dropped, False)):
            for tensor in tensors:
                storage = tensor.untyped_storage()
                if storage.data_ptr() in seen or storage.nbytes() == 0:
                    continue
                seen.add(storage.data_ptr())
                host = (storage.cpu() if storage.device.type != "cpu" else storage.clone()) if keep else None
                self._parked.append((storage, storage.nbytes(), host))
        for storage, _, _ in self._parked:
            storage.resize_(0)

    def restore(self) -> None:
        """Give every storage its size back: the kept ones their values, the dropped ones zeros."""
        for storage, nbytes, host in self._parked:
            storage.resize_(nbytes)
            if host is None:
                storage.fill_(0)
            else:
                storage.copy_(host)
        self._parked = []
