r"""Relabeling through an open-addressing hash table on the GPU, with the
contract of :class:`pyg_orch.sampling.relabel.SortRelabeler`."""
from typing import List, Tuple

import torch
from torch import Tensor

_INT64_MAX = 2**63 - 1
_BLOCK = 1024
_MIN_CAPACITY = 1 << 12


def _grid(n: int) -> Tuple[int]:
    return (max((n + _BLOCK - 1) // _BLOCK, 1), )


class HashRelabeler:
    r"""Relabeling through a GPU hash table that lives for one batch."""
    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.num_nodes = 0
        self._keys: List[Tensor] = []  # Every key with a local id, in order.
        self._alloc(0)

    def _alloc(self, num_keys: int) -> None:
        capacity = _MIN_CAPACITY
        while capacity < 2 * num_keys:
            capacity *= 2
        self.capacity = capacity
        kw = dict(dtype=torch.int64, device=self.device)
        # One more entry than slots: it parks lanes that are done.
        self.table = torch.full((capacity + 1, ), -1, **kw)
        self.local = torch.full((capacity + 1, ), -1, **kw)
        self.first = torch.full((capacity + 1, ), _INT64_MAX, **kw)

    def _slots(self, keys: Tensor, insert: bool) -> Tensor:
        from pyg_orch.sampling.triton import kernels as tk
        slot = torch.empty_like(keys)
        tk.hash_slots_kernel[_grid(keys.numel())](
            keys, self.table, slot, keys.numel(), self.capacity - 1,
            INSERT=insert, BLOCK=_BLOCK)
        return slot

    def _insert_in_order(self, keys: Tensor) -> None:
        # Local id of every key: the position of its first occurrence.
        slot = self._slots(keys, True)
        pos = torch.arange(keys.numel(), device=self.device)
        self.first.scatter_reduce_(0, slot, pos, 'amin')
        self.local[slot] = self.first[slot]
        self.first[slot] = _INT64_MAX

    def _ensure(self, extra: int) -> None:
        if 2 * (self.num_nodes + extra) <= self.capacity:
            return
        self._alloc(self.num_nodes + extra)
        if self._keys:
            self._insert_in_order(torch.cat(self._keys))

    def init(self, seeds: Tensor) -> None:
        seeds = seeds.to(self.device, torch.int64).contiguous()
        self.num_nodes = 0
        self._keys = []
        self._ensure(seeds.numel())
        self._insert_in_order(seeds)
        self._keys = [seeds]
        self.num_nodes = seeds.numel()

    def add(self, keys: Tensor) -> Tuple[Tensor, Tensor]:
        from pyg_orch.sampling.triton import kernels as tk
        keys = keys.to(self.device, torch.int64).contiguous()
        n = keys.numel()
        if n == 0:
            return keys.clone(), keys.clone()
        self._ensure(n)
        slot = self._slots(keys, True)
        tk.hash_claim_kernel[_grid(n)](slot, self.local, self.first, n,
                                       BLOCK=_BLOCK)
        is_new = torch.empty_like(keys)
        tk.hash_mark_kernel[_grid(n)](slot, self.local, self.first, is_new,
                                      n, BLOCK=_BLOCK)
        rank = torch.cumsum(is_new, 0)
        total = int(rank[-1])  # The one synchronization.
        new_keys = torch.empty(total, dtype=torch.int64, device=self.device)
        tk.hash_assign_kernel[_grid(n)](
            keys, slot, is_new, rank, self.local, self.first, new_keys, n,
            self.num_nodes, BLOCK=_BLOCK)
        local = self.local.index_select(0, slot)
        self.num_nodes += total
        self._keys.append(new_keys)
        return local, new_keys

    def lookup(self, keys: Tensor) -> Tensor:
        keys = keys.to(self.device, torch.int64).contiguous()
        if keys.numel() == 0:
            return keys.clone()
        slot = self._slots(keys, False)
        found = slot >= 0
        return torch.where(found, self.local.index_select(
            0, slot.clamp(min=0)), -1)

    def close(self) -> None:
        self._keys = []
