"""A feature store in tiers: the hottest rows on the GPU, all rows in
pinned host memory."""
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import TensorAttr

from pyg_orch.core.errors import ArgumentTypeError
from pyg_orch.core.triton_util import kernel_view, triton_available
from pyg_orch.features.gpu_cache import (ReadOnlyFeatureStore, RowCache,
                                        attr_index, hottest_first)
from pyg_orch.core.checks import (check_bool, check_choice, check_fraction,
                                  check_int, resolve_device)

#: The integer dtypes node ids may have.
ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@dataclass
class FeatureStoreStats:
    r"""Counters since :meth:`TieredFeatureStore.reset_stats`."""
    rows: int = 0
    cache_rows: int = 0
    reused_rows: int = 0
    host_rows: int = 0
    host_bytes: int = 0
    batches: int = 0
    peer_rows: int = 0
    peer_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        r"""Share of rows served from GPU memory."""
        return (self.cache_rows + self.reused_rows + self.peer_rows) / max(
            self.rows, 1)

    def as_dict(self) -> Dict[str, float]:
        return {
            'rows': self.rows,
            'cache_rows': self.cache_rows,
            'reused_rows': self.reused_rows,
            'host_rows': self.host_rows,
            'hit_rate': self.hit_rate,
            'cache_hit_rate': self.cache_rows / max(self.rows, 1),
            'h2d_bytes_per_batch': self.host_bytes / max(self.batches, 1),
            'peer_rows': self.peer_rows,
            'peer_bytes_per_batch': self.peer_bytes / max(self.batches, 1),
        }


def parse_budget(budget: Union[None, int, float, str],
                 device: torch.device) -> int:
    r"""Bytes of GPU memory for a cache: an int (bytes), a float in
    :obj:`(0, 1]` (of the free memory), or :obj:`None` / :obj:`'auto'`
    (a quarter of the free memory)."""
    if budget is None or budget == 'auto':
        budget = 0.25
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise ValueError(f"'gpu_memory_budget' must be a number of bytes, a "
                         f"fraction of free GPU memory in (0, 1], or 'auto' "
                         f"(got {budget!r})")
    if isinstance(budget, float):
        if not 0.0 < budget <= 1.0:
            raise ValueError(f"'gpu_memory_budget' as a fraction must lie in "
                             f"(0, 1] (got {budget})")
        if device.type != 'cuda':
            return 0
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * budget)
    if budget < 0:
        raise ValueError(f"'gpu_memory_budget' must be >= 0 (got {budget})")
    return int(budget)


def check_hotness(hotness, num_nodes: int, of: str = '') -> None:
    r"""Checks that :obj:`hotness` holds :obj:`num_nodes` real scores, no
    NaN (:obj:`of`: what the error adds to the name, a node type)."""
    name = f"'hotness'{of}"
    if not isinstance(hotness, Tensor) or hotness.is_complex() or \
            hotness.dtype == torch.bool:
        got = hotness.dtype if isinstance(hotness, Tensor) else \
            type(hotness).__name__
        raise ArgumentTypeError(f"{name} must be a tensor of {num_nodes} "
                                f"real scores (got {got})")
    if hotness.is_floating_point() and bool(torch.isnan(hotness).any()):
        raise ValueError(f"{name} holds NaN; every node needs a score")
    if hotness.numel() != num_nodes:
        raise ValueError(f"{name} must have {num_nodes} entries (got "
                         f"{hotness.numel()})")


def check_node_ids(index, num_nodes: int, name: str = 'index') -> None:
    r"""Checks :obj:`index`, 1-D ids in :obj:`[0, num_nodes)` (on CUDA
    asynchronously)."""
    if not isinstance(index, Tensor):
        raise ArgumentTypeError(f"'{name}' must be a tensor of node ids (got "
                                f"{type(index).__name__})")
    if index.dtype not in ID_DTYPES:
        raise ArgumentTypeError(f"'{name}' must hold integer node ids (got "
                                f"dtype {index.dtype})")
    if index.dim() != 1:
        raise ValueError(f"'{name}' must be one-dimensional (got shape "
                         f"{list(index.shape)})")
    if index.numel() == 0:
        return
    if index.is_cuda:
        torch._assert_async(((index >= 0) & (index < num_nodes)).all(),
                            f"'{name}' holds node ids outside "
                            f"[0, {num_nodes})")
        return
    lo, hi = (int(v) for v in torch.aminmax(index))
    if lo < 0 or hi >= num_nodes:
        raise IndexError(f"'{name}' must hold node ids in [0, {num_nodes}) "
                         f"(got ids in [{lo}, {hi}])")


class TieredFeatureStore(ReadOnlyFeatureStore):
    r"""A :class:`~torch_geometric.data.FeatureStore` for node features
    that do not fit on the GPU: the hottest rows cached on the GPU, every
    row in pinned host memory. :meth:`gather` serves a batch's rows from the
    cache, the previous batch, or host memory.

    Args:
        x (torch.Tensor): The features, :obj:`[num_nodes, width]`, on the CPU.
        device (torch.device): The GPU.
        hotness (torch.Tensor, optional): A score per node (e.g. access
            counts); the highest are cached (default: index order).
        gpu_memory_budget (int or float or str, optional): Bytes for the
            cache, a fraction of free GPU memory, or :obj:`'auto'`.
        cache_ratio (float, optional): Cache this fraction of the rows
            instead (capped by the budget).
        method (str): :obj:`'uva'`, :obj:`'cpu'` or :obj:`'auto'` (UVA when
            Triton is available).
        reuse (bool): Serve rows of the previous batch from GPU memory.
        num_threads (int, optional): Threads of the CPU gather.
        gather_blocks (int or str, optional): Thread blocks of the UVA
            gather: :obj:`'auto'` (half the multiprocessors) or :obj:`None`
            (no cap).
        attr_name (str): The attribute name served. (default: :obj:`'x'`)
    """
    def __init__(
        self,
        x: Tensor,
        device: Union[str, torch.device],
        hotness: Optional[Tensor] = None,
        gpu_memory_budget: Union[None, int, float, str] = 'auto',
        cache_ratio: Optional[float] = None,
        method: str = 'auto',
        reuse: bool = True,
        num_threads: Optional[int] = None,
        gather_blocks: Union[None, int, str] = 'auto',
        attr_name: str = 'x',
    ):
        super().__init__()
        if not isinstance(x, Tensor) or x.dim() != 2:
            raise ValueError("'x' must be a 2-dimensional feature tensor")
        self.device = resolve_device(device)
        if not isinstance(attr_name, str):
            raise ArgumentTypeError(f"'attr_name' must be a string (got "
                                    f"{type(attr_name).__name__})")
        reuse = check_bool('reuse', reuse)
        cache_ratio = check_fraction('cache_ratio', cache_ratio, optional=True)
        check_int('num_threads', num_threads, 1, optional=True)
        check_choice('method', method, ('auto', 'uva', 'cpu'))
        if method == 'auto':
            method = 'uva' if (self.device.type == 'cuda'
                               and triton_available()) else 'cpu'
        if method == 'uva' and not triton_available():
            raise ValueError("method='uva' needs Triton")
        self.method = method
        if gather_blocks == 'auto':
            gather_blocks = None
            if self.device.type == 'cuda':
                props = torch.cuda.get_device_properties(self.device)
                gather_blocks = max(props.multi_processor_count // 2, 1)
        else:
            check_int('gather_blocks', gather_blocks, 1, optional=True)
        self.gather_blocks = gather_blocks
        self.attr_name = attr_name
        self.num_nodes, self.width = x.shape
        self.dtype = x.dtype
        self.host = self._host_rows(x)
        # Made once: a pointer object per launch made each launch wait.
        self._host_view = kernel_view(self.host)

        row_bytes = self.width * x.element_size()
        budget = parse_budget(gpu_memory_budget, self.device)
        num_cached = min(self.num_nodes, budget // max(row_bytes, 1))
        if cache_ratio is not None:
            num_cached = min(num_cached,
                             int(math.ceil(cache_ratio * self.num_nodes)))
        self.capacity = num_cached
        if hotness is not None:
            check_hotness(hotness, self.num_nodes)
        order = hottest_first(hotness, self.num_nodes, self.device)
        #: Every node, hottest first: the rows :meth:`grow_cache` adds.
        self._order = order.to(torch.int32) if self.num_nodes < 2**31 \
            else order
        self._lock = threading.Lock()
        #: The cache of the hottest rows (slot map and rows on the GPU).
        self.row_cache = RowCache(self.num_nodes, device=self.device,
                                  slot_dtype=torch.int32, lazy=True)
        self._fill_cache(self._cached_order(order, num_cached))
        self.reuse = reuse
        self._prev: Optional[Tuple[Tensor, Tensor, int]] = None
        self._prev_pos = torch.full((self.num_nodes, ), -1, dtype=torch.int32,
                                    device=self.device) if reuse else None
        self._pool = None
        self.num_threads = num_threads or max(torch.get_num_threads(), 1)
        self.reset_stats()

    #: Shards of the cache (0: one GPU's cache only).
    _num_shards = 0
    #: Whether :meth:`set_cached_nodes` may change the cached rows.
    can_set_cached_nodes = True
    #: Rows copied to the cache at a time (bounds the staging memory).
    FILL_CHUNK_ROWS = 1 << 20

    @property
    def num_cached(self) -> int:
        return self.cached_nodes.numel()

    @property
    def cached_nodes(self) -> Tensor:
        return self.row_cache.ids

    @property
    def slot(self) -> Tensor:
        return self.row_cache.slot

    @property
    def cache(self) -> Tensor:
        return self.row_cache.rows[self.attr_name]

    def _host_rows(self, x: Tensor) -> Tensor:
        if self.device.type == 'cuda':
            return x if x.is_pinned() else x.cpu().pin_memory()
        return x.cpu()

    def _cached_order(self, order: Tensor, num_cached: int) -> Tensor:
        return order[:num_cached]

    def _cache_table(self) -> Tuple:
        # The gather kernel's arguments for a cache split across GPUs.
        return self.slot, 0, 0

    def _read_cache(self, slot: Tensor, out: Tensor, rows: Tensor,
                    source: Tensor) -> None:
        out[rows] = self.cache.index_select(0, slot.to(torch.int64))

    def _fill_cache(self, nodes: Tensor) -> None:
        # With every row cached, rows keep their order: a gather is then one
        # `index_select`.
        full = nodes.numel() == self.num_nodes
        if full:
            nodes = torch.arange(self.num_nodes)
        if self.device.type == 'cuda' and self.row_cache.rows:
            # Gathers queued on other streams read the old rows first.
            torch.cuda.synchronize(self.device)
        self.row_cache.rows = {}  # The old rows go before the new come.
        try:
            rows = self._load_rows(nodes, full)
        except torch.OutOfMemoryError:
            # The old rows fitted: put them back, then say so.
            torch.cuda.empty_cache()
            old = self.row_cache.ids
            self.row_cache.rows = {self.attr_name: self._load_rows(
                old, old.numel() == self.num_nodes)}
            raise
        self.full = full
        self.row_cache.fill(nodes)
        self.row_cache.rows = {self.attr_name: rows}

    def _load_rows(self, nodes: Tensor, full: bool) -> Tensor:
        # The rows `nodes` (all, in order, if `full`) on the device.
        rows = torch.empty(nodes.numel(), self.width, dtype=self.dtype,
                           device=self.device)
        copy_rows(self.host, None if full else nodes, rows,
                  self.FILL_CHUNK_ROWS)
        return rows

    def set_cached_nodes(self, nodes: Tensor) -> None:
        r"""Caches the rows :obj:`nodes` (most important first, duplicates
        dropped), as many as the budget allows. Where they can not be
        allocated, the old rows stay and the
        :class:`torch.OutOfMemoryError` is raised."""
        nodes = torch.as_tensor(nodes).view(-1).cpu()
        if nodes.numel() > 0 and nodes.dtype not in ID_DTYPES:
            raise ArgumentTypeError(f"'nodes' must hold integer node ids "
                                    f"(got dtype {nodes.dtype})")
        nodes = nodes.to(torch.int64)
        if nodes.numel() > 0 and (int(nodes.min()) < 0
                                  or int(nodes.max()) >= self.num_nodes):
            raise ValueError(f"'nodes' must lie in [0, {self.num_nodes})")
        uniq, inv = torch.unique(nodes, return_inverse=True)
        first = torch.full((uniq.numel(), ), nodes.numel(), dtype=torch.int64)
        first.scatter_reduce_(0, inv, torch.arange(nodes.numel()), 'amin')
        nodes = uniq[torch.argsort(first)][:self._max_cached_rows()]
        with self._lock:
            self._fill_cache(nodes)

    def _max_cached_rows(self) -> int:
        return self.capacity

    @property
    def num_rows(self) -> int:
        r"""The rows the store serves (the most the cache can hold)."""
        return self.num_nodes

    @property
    def num_local(self) -> int:
        r"""The rows in this GPU's memory (all cached rows, unless the cache
        is split over GPUs)."""
        return self.num_cached

    @property
    def cached_bytes(self) -> int:
        r"""The bytes of the rows in this GPU's memory."""
        return self.num_local * self.width * self.host.element_size()

    def grow_cache(self, num_bytes: int) -> int:
        r"""Adds up to :obj:`num_bytes` of rows to the cache, the hottest
        not cached first (by the :obj:`hotness` given at construction), and
        raises the budget to match; returns the rows added. Where the new
        rows can not be allocated, the old cache is put back and the
        :class:`torch.OutOfMemoryError` raised."""
        check_int('num_bytes', num_bytes, 0)
        row_bytes = max(self.width * self.host.element_size(), 1)
        with self._lock:
            old = self.cached_nodes.cpu()
            add = min(int(num_bytes) // row_bytes,
                      self.num_nodes - old.numel())
            if add <= 0:
                return 0
            fresh = self._hottest_not_in(old, add)
            self._fill_cache(torch.cat([old, fresh]))
            self.capacity = max(self.capacity, old.numel() + add)
        return add

    def _hottest_not_in(self, held: Tensor, limit: int) -> Tensor:
        # Up to `limit` nodes outside `held`, hottest first (what
        # `grow_cache` adds).
        mask = torch.zeros(self.num_nodes, dtype=torch.bool)
        mask[held] = True
        order = self._order.to(torch.int64)
        return order[~mask[order]][:limit]

    def gpu_bytes(self) -> int:
        r"""GPU memory held: the cache and the slot map."""
        return sum(t.numel() * t.element_size() for t in (
            self.cache, self.slot, self._prev_pos) if t is not None)

    def reset_stats(self) -> None:
        # Rows per source, counted on the device: a gather never waits.
        self._source_counts = torch.zeros(4, dtype=torch.int64,
                                          device=self.device)
        self._full_rows = self._batches = 0

    @property
    def stats(self) -> FeatureStoreStats:
        r"""The counters (reading them synchronizes)."""
        cache, reused, host, peer = self._source_counts.tolist()
        cache += self._full_rows
        row_bytes = self.width * self.host.element_size()
        return FeatureStoreStats(
            rows=cache + reused + host + peer, cache_rows=cache,
            reused_rows=reused, host_rows=host, host_bytes=host * row_bytes,
            batches=self._batches, peer_rows=peer,
            peer_bytes=peer * row_bytes)

    def describe(self) -> str:
        return (f'{type(self).__name__}(rows={self.num_nodes}, '
                f'width={self.width}, cached={self.num_cached} '
                f'({100 * self.num_cached / max(self.num_nodes, 1):.1f}%), '
                f'gpu={self.gpu_bytes() / 2**20:.1f} MiB, '
                f'method={self.method}, reuse={self.reuse})')

    def gather(self, index: Tensor) -> Tensor:
        r"""The rows :obj:`index` (node ids, 1-D) on :obj:`device`."""
        check_node_ids(index, self.num_nodes)
        with self._lock:  # One gather at a time: it updates the reuse state.
            index = index.to(self.device, torch.int64)
            if self.full:
                self._full_rows += index.numel()
                self._batches += 1
                return self.cache.index_select(0, index)
            if self.method == 'uva':
                out, source = self._gather_uva(index)
            else:
                out, source = self._gather_cpu(index)
            self._count(index, source)
            if self.reuse:
                self._remember(index, out)
            return out

    def _prev_state(self) -> Optional[Tuple[Tensor, Tensor]]:
        if self._prev is None or self._prev[1]._version != self._prev[2]:
            return None  # None yet, or modified in place: stale.
        return self._prev[0], self._prev[1]

    def _gather_uva(self, index: Tensor) -> Tuple[Tensor, Tensor]:
        from pyg_orch.sampling.triton import kernels as tk

        n = index.numel()
        out = torch.empty(n, self.width, dtype=self.dtype, device=self.device)
        source = torch.empty(n, dtype=torch.int8, device=self.device)
        prev = self._prev_state() if self.reuse else None
        cache = self.cache if self.cache.numel() > 0 else out
        block_c = min(triton_next_pow2(self.width), 128)
        block_r = max(1024 // block_c, 1)
        blocks = max((n + block_r - 1) // block_r, 1)
        grid = blocks if self.gather_blocks is None else min(
            blocks, self.gather_blocks)
        if n > 0:
            tk.gather_rows_kernel[(grid, )](
                index, self.slot, cache,
                self._prev_pos if prev is not None else self.slot,
                prev[1] if prev is not None else out, self._host_view,
                out, source, n, (blocks + grid - 1) // grid,
                *self._cache_table(), WIDTH=self.width,
                USE_PREV=prev is not None, BLOCK_R=block_r, BLOCK_C=block_c,
                SHARDS=self._num_shards)
        return out, source

    def _gather_cpu(self, index: Tensor) -> Tuple[Tensor, Tensor]:
        n = index.numel()
        out = torch.empty(n, self.width, dtype=self.dtype, device=self.device)
        slot = self.slot.index_select(0, index)
        source = torch.full((n, ), 2, dtype=torch.int8, device=self.device)
        in_cache = slot >= 0
        source[in_cache] = 0
        prev = self._prev_state() if self.reuse else None
        if prev is not None:
            pos = self._prev_pos.index_select(0, index)
            in_prev = ~in_cache & (pos >= 0)
            source[in_prev] = 1
        on_host = (source == 2).nonzero().view(-1)
        rows = torch.nonzero(in_cache).view(-1)
        self._read_cache(slot[rows], out, rows, source)
        if prev is not None:
            rows = in_prev.nonzero().view(-1)
            out[rows] = prev[1].index_select(0, pos[rows].to(torch.int64))
        if on_host.numel() > 0:
            host_index = index.index_select(0, on_host).cpu()
            staged = self._cpu_index_select(host_index)
            out[on_host.to(self.device)] = staged.to(self.device,
                                                     non_blocking=True)
        return out, source

    def _cpu_index_select(self, index: Tensor) -> Tensor:
        pin = self.device.type == 'cuda'
        staged = torch.empty(index.numel(), self.width, dtype=self.dtype,
                             pin_memory=pin)
        chunks = max(min(self.num_threads, index.numel() // 4096), 1)
        if chunks == 1:
            torch.index_select(self.host, 0, index, out=staged)
            return staged
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.num_threads,
                                            thread_name_prefix='pyg_orch-'
                                            'gather')
        bounds = torch.linspace(0, index.numel(), chunks + 1).long().tolist()

        def work(i: int) -> None:
            a, b = bounds[i], bounds[i + 1]
            torch.index_select(self.host, 0, index[a:b], out=staged[a:b])

        list(self._pool.map(work, range(chunks)))
        return staged

    def _count(self, index: Tensor, source: Tensor) -> None:
        # Not `bincount`: on CUDA it waits for the device to size its output.
        tiers = torch.arange(4, dtype=source.dtype, device=source.device)
        self._source_counts += (source.view(-1, 1) == tiers).sum(0)
        self._batches += 1

    def _remember(self, index: Tensor, out: Tensor) -> None:
        if self._prev is not None:
            self._prev_pos.index_fill_(0, self._prev[0], -1)
        self._prev_pos.index_copy_(
            0, index, torch.arange(index.numel(), dtype=torch.int32,
                                   device=self.device))
        self._prev = (index, out, out._version)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _check(self, attr: TensorAttr) -> None:
        if attr.attr_name != self.attr_name:
            raise KeyError(f"{type(self).__name__} serves "
                           f"'{self.attr_name}', not '{attr.attr_name}'")

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        self._check(attr)
        return self.gather(attr_index(attr, self.num_nodes))

    def _get_tensor_size(self, attr: TensorAttr) -> Tuple[int, int]:
        self._check(attr)
        return (self.num_nodes, self.width)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=self.attr_name)]


def copy_rows(host: Tensor, nodes: Optional[Tensor], out: Tensor,
              chunk: int, in_id_order: bool = False) -> None:
    r"""Copies rows :obj:`nodes` of :obj:`host` (all rows if :obj:`None`)
    into :obj:`out`, :obj:`chunk` rows at a time: no host copy of them all.
    With :obj:`in_id_order`, the rows are read from :obj:`host` in id order
    (sorted on :obj:`out`'s device; in the order given where it has no
    room) and put in place there. ``benchmarks/bench_cache_fill.py`` found
    it slower into host memory and into an H200's, so the stores read in
    the order given."""
    n = out.size(0)
    if nodes is None:
        for a in range(0, n, chunk):
            b = min(a + chunk, n)
            out[a:b].copy_(host[a:b])
        return
    rows = min(chunk, n)
    where = landing = None
    if in_id_order and n > 1:
        try:  # Sorted where `out` lives; a chunk lands there, then moves.
            ids, where = torch.sort(nodes.to(out.device))
            landing = torch.empty(rows, host.size(1), dtype=host.dtype,
                                  device=out.device)
            nodes = ids.cpu()
        except torch.OutOfMemoryError:  # No room: rows in the given order.
            where = landing = None
            torch.cuda.empty_cache()
    staging = torch.empty(rows, host.size(1), dtype=host.dtype,
                          pin_memory=out.is_cuda)
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        part = staging[:b - a]
        torch.index_select(host, 0, nodes[a:b], out=part)
        if where is None:
            out[a:b].copy_(part)
        else:
            landing[:b - a].copy_(part)
            out.index_copy_(0, where[a:b], landing[:b - a])


def triton_next_pow2(x: int) -> int:
    return 1 << max(int(x) - 1, 0).bit_length()
