"""Maps global node ids to batch-local ids in order of first appearance."""
from typing import List, Tuple

import torch
from torch import Tensor


class Relabeler:
    r"""Base class: :meth:`init`, :meth:`add` per hop, :meth:`lookup`."""
    num_nodes: int = 0

    def init(self, seeds: Tensor) -> None:
        raise NotImplementedError

    def add(self, keys: Tensor) -> Tuple[Tensor, Tensor]:
        r"""Local ids of :obj:`keys`, and the new keys by first appearance."""
        raise NotImplementedError

    def lookup(self, keys: Tensor) -> Tensor:
        r"""Local id of every key, :obj:`-1` for keys never added."""
        raise NotImplementedError

    def close(self) -> None:
        pass


def _first_occurrence(seeds: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Sorted unique keys, and the first position of each in :obj:`seeds`."""
    uniq, inv = torch.unique(seeds, return_inverse=True)
    first = torch.full((uniq.numel(), ), seeds.numel(), dtype=torch.int64,
                       device=seeds.device)
    first.scatter_reduce_(0, inv, torch.arange(seeds.numel(),
                                               device=seeds.device), 'amin')
    return uniq, first


class SortRelabeler(Relabeler):
    r"""Relabeling by sorting and binary search (any int64 keys)."""
    def __init__(self, device: torch.device):
        self.device = device
        self.keys = torch.empty(0, dtype=torch.int64, device=device)
        self.vals = torch.empty(0, dtype=torch.int64, device=device)
        self.num_nodes = 0

    def init(self, seeds: Tensor) -> None:
        self.keys, self.vals = _first_occurrence(seeds)
        self.num_nodes = seeds.numel()

    def lookup(self, keys: Tensor) -> Tensor:
        out = torch.full_like(keys, -1)
        if self.keys.numel() == 0 or keys.numel() == 0:
            return out
        idx = torch.searchsorted(self.keys, keys).clamp_(max=self.keys.numel()
                                                         - 1)
        found = self.keys[idx] == keys
        out[found] = self.vals[idx[found]]
        return out

    def add(self, keys: Tensor) -> Tuple[Tensor, Tensor]:
        local = self.lookup(keys)
        is_new = local < 0
        new = keys[is_new]
        uniq, first = _first_occurrence(new)
        order = torch.argsort(first)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=order.device)
        new_local = self.num_nodes + rank
        inv = torch.searchsorted(uniq, new)
        local[is_new] = new_local[inv]
        keys_all = torch.cat([self.keys, uniq])
        vals_all = torch.cat([self.vals, new_local])
        perm = torch.argsort(keys_all)
        self.keys, self.vals = keys_all[perm], vals_all[perm]
        self.num_nodes += uniq.numel()
        return local, uniq[order]


class DenseRelabeler(Relabeler):
    r"""Relabeling through a dense array over all nodes."""
    def __init__(self, buffer: Tensor):
        self.buf = buffer
        self.touched: List[Tensor] = []
        self.num_nodes = 0

    def init(self, seeds: Tensor) -> None:
        pos = torch.arange(seeds.numel(), device=seeds.device,
                           dtype=self.buf.dtype)
        self.buf.scatter_reduce_(0, seeds, pos, 'amin', include_self=False)
        self.touched.append(seeds)
        self.num_nodes = seeds.numel()

    # `index_select` / `index_copy_` / `index_fill_` rather than advanced
    # indexing: several times faster on the CPU for these 1-D gathers.
    def lookup(self, keys: Tensor) -> Tensor:
        return self.buf.index_select(0, keys).to(torch.int64)

    def add(self, keys: Tensor) -> Tuple[Tensor, Tensor]:
        local = self.buf.index_select(0, keys)
        new = keys.masked_select(local < 0)
        if new.numel() == 0:
            return local.to(torch.int64), new
        # Temporarily store `-2 - position` so that `amax` keeps the first
        # position of every new node, distinct from the `-1` of unseen nodes:
        tag = -2 - torch.arange(new.numel(), device=keys.device,
                                dtype=self.buf.dtype)
        self.buf.scatter_reduce_(0, new, tag, 'amax', include_self=False)
        uniq = new.masked_select(self.buf.index_select(0, new) == tag)
        self.buf.index_copy_(
            0, uniq,
            torch.arange(self.num_nodes, self.num_nodes + uniq.numel(),
                         device=keys.device, dtype=self.buf.dtype))
        self.touched.append(uniq)
        self.num_nodes += uniq.numel()
        return self.buf.index_select(0, keys).to(torch.int64), uniq

    def close(self) -> None:
        for t in self.touched:
            self.buf.index_fill_(0, t, -1)
        self.touched = []
