r"""One cache of feature rows on a device over any source of rows, and
the rankings that choose its rows."""
import contextlib
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pyg_orch.core.checks import check_choice, check_int
from pyg_orch.core.devices import argsort_descending

#: The policies of a :class:`RowCache`.
POLICIES = ('static', 'lru')

Rows = Dict[Any, Tensor]


class OrderedSection:
    r"""A lock whose holders' CUDA streams also run in the order the lock
    was taken (threads sharing an :obj:`'lru'` cache)."""
    def __init__(self):
        self._lock = threading.Lock()
        self._event = None

    @contextlib.contextmanager
    def __call__(self, cuda: bool):
        with self._lock:
            if cuda and self._event is not None:
                torch.cuda.current_stream().wait_event(self._event)
            yield
            if cuda:
                self._event = torch.cuda.Event()
                self._event.record()


def most_counted(counts: Tensor, k: int) -> Tensor:
    r"""The positions of the (at most) :obj:`k` largest positive
    :obj:`counts`, ascending; of equal counts the first."""
    k = min(k, int((counts > 0).sum()))
    order = torch.sort(counts, descending=True, stable=True).indices[:k]
    return torch.sort(order).values


def most_counted_split(counts: List[Tensor], k: int,
                       device: Any = None) -> List[Tensor]:
    r""":func:`most_counted` over the concatenation of :obj:`counts`, as a
    mask per tensor of :obj:`counts` (one ranking over several types)."""
    flat = torch.cat(counts + [torch.empty(0, dtype=torch.int64,
                                           device=device)])
    chosen = torch.zeros_like(flat, dtype=torch.bool)
    chosen[most_counted(flat, k)] = True
    return list(torch.split(chosen, [c.numel() for c in counts]))


def hottest_first(hotness: Optional[Tensor], num: int,
                  device: Optional[torch.device] = None) -> Tensor:
    r"""Every id of :obj:`[0, num)`, highest :obj:`hotness` first (ties and
    no :obj:`hotness`: id order), on the CPU (sorted on :obj:`device` if it
    is a GPU)."""
    if hotness is None:
        return torch.arange(num)
    return argsort_descending(hotness.to(torch.float64), device)


def split_budget(
    num_nodes: Mapping[Any, int],
    row_bytes: Mapping[Any, int],
    hotness: Optional[Mapping[Any, Tensor]],
    budget: int,
    max_rows: Optional[int] = None,
) -> Dict[Any, Tensor]:
    r"""The rows to cache per key: all rows ranked by :obj:`hotness` per
    byte (ties in key, then row order), the longest prefix that fits in
    :obj:`budget` bytes and :obj:`max_rows` rows."""
    keys = list(num_nodes)
    scores, key_ids, node_ids, sizes = [], [], [], []
    for i, t in enumerate(keys):
        n = int(num_nodes[t])
        h = torch.ones(n, dtype=torch.float64) if hotness is None else \
            hotness[t].cpu().to(torch.float64).view(-1)
        scores.append(h / max(int(row_bytes[t]), 1))
        key_ids.append(torch.full((n, ), i, dtype=torch.int64))
        node_ids.append(torch.arange(n))
        sizes.append(torch.full((n, ), int(row_bytes[t]), dtype=torch.int64))
    score, key_id, node_id, size = (torch.cat(v) for v in (
        scores, key_ids, node_ids, sizes))
    order = torch.argsort(score, descending=True, stable=True)
    taken = int(torch.searchsorted(torch.cumsum(size[order], 0),
                                   torch.tensor([budget]), right=True))
    if max_rows is not None:
        taken = min(taken, max_rows)
    order = order[:taken]
    chosen_key, chosen_node = key_id[order], node_id[order]
    return {t: chosen_node[chosen_key == i] for i, t in enumerate(keys)}


def out_degrees(sources: Mapping[Any, Tensor],
                sizes: Mapping[Any, int]) -> Dict[Any, Tensor]:
    r"""Per node type of :obj:`sizes`, how many edges every node is the
    source of (:obj:`sources`: source ids per edge type, or :obj:`None`)."""
    out = {t: torch.zeros(n, dtype=torch.int64) for t, n in sizes.items()}
    for edge_type, src in sources.items():
        t = None if edge_type is None else edge_type[0]
        if t in out:
            n = out[t].numel()
            out[t] += torch.bincount(src.to(torch.int64),
                                     minlength=n)[:n].cpu()
    return out


class ReadOnlyFeatureStore(FeatureStore):
    r"""A :class:`~torch_geometric.data.FeatureStore` whose rows are read
    only: :meth:`put_tensor` and :meth:`remove_tensor` raise."""
    #: What to do instead, said by the error.
    instead = 'build a new one to change the features'

    def _put_tensor(self, tensor: Tensor, attr: TensorAttr) -> bool:
        raise NotImplementedError(
            f"{type(self).__name__} is read-only; {self.instead}")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return self._put_tensor(None, attr)


def attr_index(attr: TensorAttr, num_rows: int) -> Tensor:
    r"""The ids :obj:`attr.index` asks for (:obj:`None` or a slice: of
    :obj:`num_rows` rows) as a tensor."""
    index = attr.index
    if index is None or isinstance(index, slice):
        index = torch.arange(num_rows)[index or slice(None)]
    return torch.as_tensor(index)


class CacheQuery:
    r"""What :meth:`RowCache.query` found: the positions of hits and misses
    in the request, the ids missed, the hits' rows and the LRU step."""
    def __init__(self, ids: Tensor, hit_pos: Tensor, miss_pos: Tensor,
                 cached: Rows, step: int):
        self.ids, self.hit_pos, self.miss_pos = ids, hit_pos, miss_pos
        self.cached, self.step = cached, step
        self.miss_ids = ids[miss_pos]


class RowCache:
    r"""Rows of some of :obj:`num_ids` ids on :obj:`device`, found through
    a slot map (:obj:`-1`: not cached); :obj:`'lru'` keeps the rows
    fetched on a miss, evicting the least recently read.

    Args:
        index_device (torch.device, optional): Where the slot map lives.
        lazy (bool): Allocate nothing before :meth:`fill`.
    """
    def __init__(self, num_ids: int, policy: str = 'static',
                 capacity: int = 0, device: Any = 'cpu',
                 index_device: Any = None,
                 slot_dtype: torch.dtype = torch.int64, lazy: bool = False):
        check_choice('policy', policy, POLICIES)
        check_int('capacity', capacity)
        self.policy = policy
        self.capacity = capacity if policy == 'lru' else 0
        self.device = torch.device(device)
        self.index_device = self.device if index_device is None else \
            torch.device(index_device)
        self.num_ids = num_ids
        #: The slot of every id (:obj:`-1`: not cached).
        self.slot = torch.empty(0, dtype=slot_dtype) if lazy else torch.full(
            (num_ids, ), -1, dtype=slot_dtype, device=self.index_device)
        #: The cached rows per key, in slot order.
        self.rows: Rows = {}
        #: The ids filled by :meth:`fill`, in slot order.
        self.ids = torch.empty(0, dtype=torch.int64)
        # LRU: the id in every slot (-1: free) and the step it was last
        # read; the clock is one cell, shared with copies of the owner.
        dev = 'cpu' if lazy else self.index_device  # Lazy: nothing there.
        self.slot_id = torch.full((self.capacity, ), -1, dtype=torch.int64,
                                  device=dev)
        self.last_used = torch.full((self.capacity, ), -1, dtype=torch.int64,
                                    device=dev)
        self.clock = [0]
        self.section = OrderedSection()
        self.hits = self.misses = 0

    @property
    def lru(self) -> bool:
        r"""Whether misses are admitted (an :obj:`'lru'` cache with room)."""
        return self.policy == 'lru' and self.capacity > 0

    @property
    def cuda(self) -> bool:
        r"""Whether the rows or the bookkeeping live on a GPU."""
        return 'cuda' in (self.device.type, self.index_device.type)

    @property
    def num_cached(self) -> int:
        return int((self.slot >= 0).sum())

    @property
    def nbytes(self) -> int:
        r"""The bytes of the cached rows."""
        return sum(t.numel() * t.element_size() for t in self.rows.values())

    def allocate(self, key: Any, like: Tensor) -> None:
        r"""Room for :obj:`capacity` rows of :obj:`key` shaped like
        :obj:`like`'s."""
        self.rows[key] = like.new_empty(
            (self.capacity, ) + tuple(like.shape[1:]), device=self.device)

    def _dev(self, t: Tensor) -> Tensor:
        # To where the rows are; a copy to the host is waited for.
        return t.to(self.device, non_blocking=self.device.type != 'cpu')

    def fill(self, ids: Tensor, rows: Optional[Rows] = None,
             slots: Optional[Tensor] = None) -> None:
        r"""Points the slot map at :obj:`ids` (slot :obj:`i` for the
        :obj:`i`-th, or :obj:`slots`); replaces the rows by :obj:`rows`."""
        dtype = self.slot.dtype if slots is None else slots.dtype
        slot = torch.full((self.num_ids, ), -1, dtype=dtype,
                          device=ids.device)
        slot[ids] = torch.arange(ids.numel(), dtype=dtype, device=ids.device) \
            if slots is None else slots
        self.slot = slot.to(self.index_device)
        self.ids = ids
        if rows is not None:
            self.rows = dict(rows)

    def lookup(self, ids: Tensor) -> Tensor:
        r"""The slot of every id of :obj:`ids` (:obj:`-1`: a miss)."""
        return self.slot[ids]

    def read(self, slot: Tensor) -> Tuple[Rows, int]:
        r"""The rows in :obj:`slot` per key, and the LRU step that read
        them."""
        dest = self._dev(slot)
        out = {k: v.index_select(0, dest) for k, v in self.rows.items()}
        step = self.clock[0]
        if self.lru:
            self.clock[0] += 1
            step = self.clock[0]
            self.last_used[slot] = step
        return out, step

    def admit(self, ids: Tensor, rows: Rows, step: int) -> None:
        r"""LRU: keeps the rows of :obj:`ids` fetched at :obj:`step`,
        evicting the least recently read; ids cached meanwhile stay."""
        if ids.numel() == 0:
            return
        fresh = (self.slot.index_select(0, ids) < 0).nonzero().view(-1)
        if fresh.numel() < ids.numel():
            ids = ids.index_select(0, fresh)
            fresh = self._dev(fresh)
            rows = {k: v.index_select(0, fresh) for k, v in rows.items()}
            if ids.numel() == 0:
                return
        uniq, inverse = torch.unique(ids, return_inverse=True)
        first = torch.full((uniq.numel(), ), ids.numel(), dtype=torch.int64,
                           device=ids.device)
        first.scatter_reduce_(0, inverse, torch.arange(
            ids.numel(), device=ids.device), 'amin')
        m = min(uniq.numel(), self.capacity)
        uniq, first = uniq[:m], first[:m]
        victims = torch.sort(self.last_used, stable=True).indices[:m]
        old = self.slot_id[victims]
        self.slot[old[old >= 0]] = -1
        self.slot_id[victims] = uniq
        self.slot[uniq] = victims.to(self.slot.dtype)
        self.last_used[victims] = step
        victims, first = self._dev(victims), self._dev(first)
        for key in self.rows:
            self.rows[key][victims] = rows[key][first]

    def query(self, ids: Tensor) -> CacheQuery:
        r"""Looks :obj:`ids` (on the index device) up and reads the hits."""
        with self.section(self.cuda) if self.lru else \
                contextlib.nullcontext():
            slot = self.lookup(ids)
            hit = slot >= 0
            hit_pos = hit.nonzero().view(-1)
            miss_pos = (~hit).nonzero().view(-1)
            cached, step = self.read(slot[hit_pos])
        return CacheQuery(ids, hit_pos, miss_pos, cached, step)

    def complete(self, query: CacheQuery, fetched: Rows) -> Rows:
        r"""The rows of :obj:`query.ids` per key, from the hits and the
        misses' rows :obj:`fetched`; an :obj:`'lru'` cache admits those."""
        fetched = {k: self._dev(v) for k, v in fetched.items()}
        hit_dst, miss_dst = self._dev(query.hit_pos), self._dev(
            query.miss_pos)
        out = {}
        for key, got in fetched.items():
            rows = got.new_empty((query.ids.numel(), ) + tuple(got.shape[1:]))
            rows.index_copy_(0, miss_dst, got)
            if key in query.cached:
                rows.index_copy_(0, hit_dst, query.cached[key])
            out[key] = rows
        self.hits += query.hit_pos.numel()
        self.misses += query.miss_pos.numel()
        if self.lru:
            with self.section(self.cuda):
                self.admit(query.miss_ids, fetched, query.step)
        return out

    def gather(self, ids: Tensor, fetch: Callable[[Tensor], Rows]) -> Rows:
        r"""The rows of :obj:`ids` per key, misses from
        :obj:`fetch(missed_ids)`."""
        query = self.query(ids.to(self.index_device, torch.int64))
        return self.complete(query, fetch(query.miss_ids))
