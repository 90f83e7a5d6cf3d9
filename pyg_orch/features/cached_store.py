r"""A GPU cache in front of any PyG feature store."""
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from pyg_orch.core.checks import (check_choice, check_fraction, check_int,
                                  resolve_device)
from pyg_orch.core.errors import ArgumentTypeError
from pyg_orch.features.gpu_cache import (CacheQuery, ReadOnlyFeatureStore,
                                        RowCache, attr_index, out_degrees,
                                        split_budget)
from pyg_orch.features.hetero_tiered import HeteroTieredFeatureStore
from pyg_orch.features.tiered import (TieredFeatureStore, check_node_ids,
                                      parse_budget)

Key = Tuple[Any, str]
FeatureStoreLike = Union[None, str, TieredFeatureStore,
                         HeteroTieredFeatureStore]
Scores = Union[Tensor, Mapping[Any, Tensor]]


@dataclass(frozen=True)
class CacheOptions:
    r"""The GPU cache of node features in host memory: which rows a loader
    keeps on the GPU, and how many.

    .. code-block:: python

        from pyg_orch import CacheOptions, HybridNeighborLoader

        loader = HybridNeighborLoader(
            data, num_neighbors=[15, 10], batch_size=1024,
            cache=CacheOptions(cache_ratio=0.2, ranking='degree'))

    Args:
        store (str or TieredFeatureStore, optional): On CUDA with node
            features :obj:`x` in host memory, :obj:`'auto'` serves them from
            a :class:`~pyg_orch.gpu.TieredFeatureStore` (or, for
            :class:`~torch_geometric.data.HeteroData`, a
            :class:`~pyg_orch.gpu.HeteroTieredFeatureStore`); pass one to
            share it, or :obj:`None` to gather on the CPU and copy, as PyG
            does. (default: :obj:`'auto'`)
        gpu_memory_budget (int or float or str): GPU memory for the cache:
            bytes, a fraction of free memory, or :obj:`'auto'` (a quarter of
            free memory). (default: :obj:`'auto'`)
        cache_ratio (float, optional): Cache at most this fraction of the
            rows. (default: :obj:`None`)
        ranking (str): Rank rows by :obj:`'frequency'` (appearances in
            pre-sampled batches) or :obj:`'degree'`.
            (default: :obj:`'frequency'`)
        num_presample_batches (int, optional): Batches pre-sampled for
            :obj:`'frequency'`; :obj:`None` for an epoch's worth, at most
            256 (8 on a partition folder). (default: :obj:`None`)
        policy (str): :obj:`'static'` or :obj:`'lru'` (remote rows of a
            partition folder, replaced as batches read them).
            (default: :obj:`'static'`)
    """
    store: FeatureStoreLike = 'auto'
    gpu_memory_budget: Union[None, int, float, str] = 'auto'
    cache_ratio: Optional[float] = None
    ranking: str = 'frequency'
    num_presample_batches: Optional[int] = None
    policy: str = 'static'

    def __post_init__(self) -> None:
        store = self.store
        if not (store is None or isinstance(store, (
                TieredFeatureStore, HeteroTieredFeatureStore)) or (
                    isinstance(store, str) and store == 'auto')):
            raise ValueError(f"'store' must be 'auto', None, a "
                             f"TieredFeatureStore or a "
                             f"HeteroTieredFeatureStore (got {store!r})")
        parse_budget(self.gpu_memory_budget, torch.device('cpu'))
        object.__setattr__(self, 'cache_ratio', check_fraction(
            'cache_ratio', self.cache_ratio, optional=True))
        check_choice('ranking', self.ranking, ('frequency', 'degree'))
        check_int('num_presample_batches', self.num_presample_batches, 1,
                  optional=True)
        check_choice('policy', self.policy, ('static', 'lru'))


class GPUCachedFeatureStore(ReadOnlyFeatureStore):
    r"""A :class:`~torch_geometric.data.FeatureStore` that keeps the hottest
    rows of any other one (read with ids on the CPU) on a device.

    .. code-block:: python

        from pyg_orch import CacheOptions
        from pyg_orch.gpu import GPUCachedFeatureStore

        store = GPUCachedFeatureStore(
            feature_store, CacheOptions(cache_ratio=0.1, policy='lru'),
            device='cuda')
        x = store['paper', 'x', index]

    Args:
        store (FeatureStore): The store of every row.
        cache (CacheOptions, optional): The budget of all attributes
            together, the ranking and the policy (:obj:`'static'`: the
            top-ranked rows; :obj:`'lru'`: every row read is kept, the least
            recently read evicted).
        device (torch.device, optional): Where cached and returned rows
            live (default: CUDA where available).
        counts (torch.Tensor or Dict[str, torch.Tensor], optional): Access
            counts per row (per node type) for :obj:`ranking='frequency'`,
            e.g. from :func:`pyg_orch.sampling.presample.count_node_access`;
            without, rows rank in id order.
        edge_index (torch.Tensor or Dict[Tuple, torch.Tensor], optional):
            The edges (per edge type) for :obj:`ranking='degree'`: rows
            rank by out-degree.
    """
    def __init__(self, store: FeatureStore,
                 cache: Optional[CacheOptions] = None,
                 device: Optional[Union[str, torch.device]] = None,
                 counts: Optional[Scores] = None,
                 edge_index: Optional[Scores] = None):
        super().__init__()
        if not isinstance(store, FeatureStore):
            raise ArgumentTypeError(f"'store' must be a torch_geometric "
                                    f"FeatureStore (got "
                                    f"{type(store).__name__})")
        cache = CacheOptions() if cache is None else cache
        if not isinstance(cache, CacheOptions):
            raise ArgumentTypeError(f"'cache' must be a CacheOptions (got "
                                    f"{type(cache).__name__})")
        if not (isinstance(cache.store, str) and cache.store == 'auto'):
            raise ValueError(f"'cache.store' is a loader's; "
                             f"GPUCachedFeatureStore caches 'store' (got "
                             f"store={cache.store!r} in 'cache')")
        self.store, self.options = store, cache
        self.device = resolve_device(device)
        self.sizes: Dict[Key, Tuple[int, ...]] = {}
        row_bytes: Dict[Key, int] = {}
        like: Dict[Key, Tensor] = {}
        for attr in store.get_all_tensor_attrs():
            key = (attr.group_name, attr.attr_name)
            self.sizes[key] = tuple(store.get_tensor_size(attr))
            like[key] = self._fetch(key, torch.empty(0, dtype=torch.int64))
            row_bytes[key] = math.prod(self.sizes[key][1:]) * \
                like[key].element_size()
        if not self.sizes:
            raise ValueError("'store' holds no tensors to cache")
        rows = {k: s[0] for k, s in self.sizes.items()}
        scores = self._scores(cache.ranking, rows, counts, edge_index)
        ratio = cache.cache_ratio
        chosen = split_budget(
            rows, row_bytes, scores,
            parse_budget(cache.gpu_memory_budget, self.device),
            None if ratio is None else math.ceil(ratio * sum(rows.values())))
        #: The cache of every attribute.
        self.caches: Dict[Key, RowCache] = {}
        for key, ids in chosen.items():
            c = RowCache(rows[key], cache.policy, ids.numel(), self.device)
            if cache.policy == 'lru':
                c.allocate(key[1], like[key])
            self.caches[key] = c
            if cache.policy == 'lru' and not scores:
                continue  # An 'lru' cache without a ranking starts empty.
            # Read even where empty: a partition's store reads collectively.
            got = {key[1]: self._fetch(key, ids).to(self.device)}
            if cache.policy == 'lru':
                c.admit(ids.to(self.device), got, 0)
            else:
                c.fill(ids.to(self.device), got)

    @staticmethod
    def _scores(ranking: str, rows: Dict[Key, int], counts: Optional[Scores],
                edge_index: Optional[Scores]) -> Optional[Dict[Key, Tensor]]:
        # A score per row of every attribute (None: id order).
        if ranking == 'degree':
            if edge_index is None:
                raise ValueError("CacheOptions(ranking='degree') needs "
                                 "'edge_index' (a [2, num_edges] tensor, or "
                                 "one per edge type)")
            edges = edge_index if isinstance(edge_index, Mapping) else {
                None: edge_index}
            sizes: Dict[Any, int] = {}
            for (group, _), n in rows.items():
                sizes[group] = max(sizes.get(group, 0), n)
            per_group = out_degrees(
                {et: torch.as_tensor(ei)[0] for et, ei in edges.items()},
                sizes)
        elif counts is None:
            return None
        else:
            per_group = counts if isinstance(counts, Mapping) else {
                None: counts}
            unknown = [g for g in per_group if g not in {g for g, _ in rows}]
            if unknown:
                raise ValueError(f"'counts' has node types {unknown} that "
                                 f"the store does not hold")
        out = {}
        for (group, name), n in rows.items():
            s = per_group.get(group)
            s = torch.zeros(n) if s is None else torch.as_tensor(s).view(-1)
            if s.numel() != n:
                raise ValueError(f"'counts' of node type {group!r} must have "
                                 f"one entry per row ({n}; got {s.numel()})")
            out[(group, name)] = s
        return out

    def _fetch(self, key: Key, ids: Tensor) -> Tensor:
        return self.store.get_tensor(group_name=key[0], attr_name=key[1],
                                     index=ids.cpu())

    def _cache(self, attr: TensorAttr) -> Tuple[Key, RowCache, Tensor]:
        key = (attr.group_name, attr.attr_name)
        if key not in self.caches:
            raise KeyError(f"GPUCachedFeatureStore has no attribute "
                           f"{attr.attr_name!r} of group {attr.group_name!r} "
                           f"(it serves {sorted(self.caches, key=str)})")
        n = self.sizes[key][0]
        index = attr_index(attr, n)
        check_node_ids(index, n)
        return key, self.caches[key], index

    def _get_tensor(self, attr: TensorAttr) -> Tensor:
        return self._multi_get_tensor([attr])[0]

    def _multi_get_tensor(self, attrs: List[TensorAttr]) -> List[Tensor]:
        # One read of all misses (one collective for a partition's store).
        found = [self._cache(attr) for attr in attrs]
        queries: List[CacheQuery] = [
            c.query(i.to(self.device, torch.int64)) for _, c, i in found]
        missed = self.store.multi_get_tensor([
            TensorAttr(key[0], key[1], q.miss_ids.cpu())
            for (key, _, _), q in zip(found, queries)])
        return [c.complete(q, {key[1]: rows})[key[1]] for (key, c, _), q, rows
                in zip(found, queries, missed)]

    def _get_tensor_size(self, attr: TensorAttr) -> Tuple[int, ...]:
        return self.store.get_tensor_size(attr)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return self.store.get_all_tensor_attrs()

    @property
    def hits(self) -> int:
        r"""Rows served from the cache since :meth:`reset_stats`."""
        return sum(c.hits for c in self.caches.values())

    @property
    def misses(self) -> int:
        r"""Rows fetched from :obj:`store` since :meth:`reset_stats`."""
        return sum(c.misses for c in self.caches.values())

    def reset_stats(self) -> None:
        for c in self.caches.values():
            c.hits = c.misses = 0

    @property
    def num_cached(self) -> Dict[Key, int]:
        r"""Rows cached per :obj:`(group_name, attr_name)`."""
        return {k: c.num_cached for k, c in self.caches.items()}

    def __repr__(self) -> str:
        return (f'{type(self).__name__}({type(self.store).__name__}, '
                f'policy={self.options.policy!r}, cached={self.num_cached}, '
                f'device={self.device})')
