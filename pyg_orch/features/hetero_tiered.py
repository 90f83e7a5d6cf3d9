"""The tiered feature store of a heterogeneous graph."""
import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import TensorAttr

from pyg_orch.features.gpu_cache import (ReadOnlyFeatureStore, attr_index,
                                        split_budget)
from pyg_orch.features.tiered import (FeatureStoreStats, TieredFeatureStore,
                                      check_hotness, parse_budget)
from pyg_orch.core.checks import check_fraction, check_int, resolve_device

NodeType = str


@dataclass
class HeteroFeatureStoreStats(FeatureStoreStats):
    r"""The counters summed over node types (:obj:`batches`: the most
    of any type), and per type in :obj:`per_type`."""
    per_type: Dict[NodeType, FeatureStoreStats] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, float]:
        out = super().as_dict()
        out['per_type'] = {t: s.as_dict() for t, s in self.per_type.items()}
        return out


class HeteroTieredFeatureStore(ReadOnlyFeatureStore):
    r"""A :class:`~torch_geometric.data.FeatureStore` for the node features
    of a heterogeneous graph: one :class:`~pyg_orch.gpu.TieredFeatureStore`
    per node type, the GPU budget split by one ranking of all rows by
    :obj:`hotness` per byte.

    Args:
        x_dict (Dict[str, torch.Tensor]): The features per node type,
            :obj:`[num_nodes, width]` each, on the CPU.
        device (torch.device): The GPU.
        hotness (Dict[str, torch.Tensor], optional): A score per node of
            every type (e.g. access counts; default: all equal).
        gpu_memory_budget (int or float or str, optional): Bytes for all
            types together, a fraction of free GPU memory, or
            :obj:`'auto'`.
        cache_ratio (float, optional): Cache at most this fraction of the
            rows of all types together (capped by the budget).
        method, reuse, num_threads, gather_blocks, attr_name: As in
            :class:`~pyg_orch.gpu.TieredFeatureStore`, for every type.
    """
    #: Whether :meth:`set_cached_nodes` may change the cached rows.
    can_set_cached_nodes = True

    def __init__(
        self,
        x_dict: Mapping[NodeType, Tensor],
        device: Union[str, torch.device],
        hotness: Optional[Mapping[NodeType, Tensor]] = None,
        gpu_memory_budget: Union[None, int, float, str] = 'auto',
        cache_ratio: Optional[float] = None,
        method: str = 'auto',
        reuse: bool = True,
        num_threads: Optional[int] = None,
        gather_blocks: Union[None, int, str] = 'auto',
        attr_name: str = 'x',
    ):
        super().__init__()
        if not isinstance(x_dict, Mapping) or len(x_dict) == 0:
            raise ValueError("'x_dict' must be a non-empty dictionary of "
                             "feature tensors per node type")
        for t, x in x_dict.items():
            if not isinstance(t, str) or not isinstance(x, Tensor) or \
                    x.dim() != 2:
                got = f'shape {tuple(x.shape)}' if isinstance(
                    x, Tensor) else type(x).__name__
                raise ValueError(f"'x_dict' must map node type names to "
                                 f"2-dimensional feature tensors (got {got} "
                                 f"for node type {t!r})")
        if hotness is not None:
            if not isinstance(hotness, Mapping):
                raise ValueError("'hotness' must be a dictionary of scores "
                                 "per node type")
            unknown = [t for t in hotness if t not in x_dict]
            missing = [t for t in x_dict if t not in hotness]
            if unknown or missing:
                raise ValueError(
                    f"'hotness' must have the node types of 'x_dict' "
                    f"({list(x_dict)}); unknown: {unknown}, missing: "
                    f"{missing}")
            for t, h in hotness.items():
                check_hotness(h, x_dict[t].size(0), f" of node type '{t}'")
        cache_ratio = check_fraction('cache_ratio', cache_ratio, optional=True)
        self.device = resolve_device(device)
        self.attr_name = attr_name
        #: The budget in bytes, for all types together.
        self.budget = parse_budget(gpu_memory_budget, self.device)
        num_nodes = {t: x.size(0) for t, x in x_dict.items()}
        row_bytes = {t: x.size(1) * x.element_size()
                     for t, x in x_dict.items()}
        max_rows = None if cache_ratio is None else math.ceil(
            cache_ratio * sum(num_nodes.values()))
        # Kept to rank rows across types when the cache grows:
        self._hotness = None if hotness is None else {
            t: h.cpu().to(torch.float64) for t, h in hotness.items()}
        self._row_bytes = row_bytes
        chosen = split_budget(num_nodes, row_bytes, self._hotness,
                              self.budget, max_rows)
        #: One :class:`~pyg_orch.gpu.TieredFeatureStore` per node type.
        self.stores: Dict[NodeType, TieredFeatureStore] = {}
        for t, x in x_dict.items():
            # Within a type the ranking follows the type's hotness (ties in
            # row order), so its store caches the chosen rows: a prefix.
            self.stores[t] = TieredFeatureStore(
                x, self.device,
                hotness=None if hotness is None else self._hotness[t],
                gpu_memory_budget=chosen[t].numel() * row_bytes[t],
                method=method, reuse=reuse, num_threads=num_threads,
                gather_blocks=gather_blocks, attr_name=attr_name)
        self.method = next(iter(self.stores.values())).method

    @property
    def node_types(self) -> List[NodeType]:
        return list(self.stores)

    @property
    def num_cached(self) -> int:
        r"""Rows cached on the GPU, all types together."""
        return sum(s.num_cached for s in self.stores.values())

    @property
    def num_local(self) -> int:
        r"""Rows in this GPU's memory, all types together."""
        return sum(s.num_local for s in self.stores.values())

    @property
    def num_cached_per_type(self) -> Dict[NodeType, int]:
        r"""Rows cached on the GPU per node type."""
        return {t: s.num_cached for t, s in self.stores.items()}

    @property
    def cached_nodes(self) -> Dict[NodeType, Tensor]:
        return {t: s.cached_nodes for t, s in self.stores.items()}

    @property
    def capacity(self) -> Dict[NodeType, int]:
        r"""Rows per node type that :meth:`set_cached_nodes` may cache."""
        return {t: s.capacity for t, s in self.stores.items()}

    def set_cached_nodes(self, nodes: Mapping[NodeType, Tensor]) -> None:
        r"""Caches the rows :obj:`nodes[t]` of every node type given, as
        many as the type's share of the budget (:attr:`capacity`) allows."""
        if not isinstance(nodes, Mapping):
            raise ValueError(
                f"'nodes' must be a dictionary of node ids per node type "
                f"for a {type(self).__name__} (got {type(nodes).__name__})")
        self._check_types('nodes', nodes)
        for t, n in nodes.items():
            self.stores[t].set_cached_nodes(n)

    @property
    def num_rows(self) -> int:
        r"""The rows of all types (the most the cache can hold)."""
        return sum(s.num_rows for s in self.stores.values())

    @property
    def cached_bytes(self) -> int:
        r"""The bytes of the cached rows, all types together."""
        return sum(s.cached_bytes for s in self.stores.values())

    def grow_cache(self, num_bytes: int) -> int:
        r"""Adds up to :obj:`num_bytes` of rows to the caches, ranked across
        types by hotness per byte as at construction; returns the rows
        added (see :meth:`~pyg_orch.gpu.TieredFeatureStore.grow_cache`)."""
        check_int('num_bytes', num_bytes, 0)
        target = split_budget(
            {t: s.num_nodes for t, s in self.stores.items()},
            self._row_bytes, self._hotness,
            self.cached_bytes + int(num_bytes))
        left, added = int(num_bytes), 0
        for t, store in self.stores.items():
            size = max(self._row_bytes[t], 1)
            more = min(target[t].numel() - store.num_cached, left // size)
            if more > 0:
                got = store.grow_cache(more * size)
                added += got
                left -= got * size
        self.budget = max(self.budget, self.cached_bytes)
        return added

    def gpu_bytes(self) -> int:
        r"""GPU memory held by every type's store."""
        return sum(s.gpu_bytes() for s in self.stores.values())

    def reset_stats(self) -> None:
        for s in self.stores.values():
            s.reset_stats()

    @property
    def stats(self) -> HeteroFeatureStoreStats:
        r"""The counters, summed and per type (reading them synchronizes)."""
        per_type = {t: s.stats for t, s in self.stores.items()}
        total = HeteroFeatureStoreStats(per_type=per_type)
        for s in per_type.values():
            for name, v in vars(s).items():
                setattr(total, name, (max if name == 'batches' else sum)(
                    (getattr(total, name), v)))
        return total

    def describe(self) -> str:
        parts = ', '.join(
            f'{t}: {s.num_cached}/{s.num_nodes}'
            for t, s in self.stores.items())
        return (f'{type(self).__name__}(cached rows {parts}, '
                f'gpu={self.gpu_bytes() / 2**20:.1f} MiB, '
                f'method={self.method})')

    def close(self) -> None:
        for s in self.stores.values():
            s.close()

    def gather(self, node_type: NodeType, index: Tensor) -> Tensor:
        r"""The rows :obj:`index` of :obj:`node_type` on :obj:`device`."""
        store = self.stores.get(node_type)
        if store is None:
            raise ValueError(f"'node_type' must be one of {self.node_types} "
                             f"(got {node_type!r})")
        return store.gather(index)

    def gather_dict(self, index_dict: Mapping[NodeType, Tensor]
                    ) -> Dict[NodeType, Tensor]:
        r"""The rows of every node type of :obj:`index_dict`."""
        self._check_types('index_dict', index_dict)
        return {t: self.stores[t].gather(i) for t, i in index_dict.items()}

    def _check_types(self, name: str, types) -> None:
        unknown = [t for t in types if t not in self.stores]
        if unknown:
            raise ValueError(f"'{name}' has node types {unknown} that the "
                             f"store does not hold ({self.node_types})")

    def _store(self, attr: TensorAttr) -> TieredFeatureStore:
        if attr.attr_name != self.attr_name:
            raise KeyError(f"{type(self).__name__} serves "
                           f"'{self.attr_name}', not '{attr.attr_name}'")
        store = self.stores.get(attr.group_name)
        if store is None:
            raise KeyError(f"{type(self).__name__} holds node types "
                           f"{self.node_types}, not {attr.group_name!r}")
        return store

    def _get_tensor(self, attr: TensorAttr) -> Optional[Tensor]:
        store = self._store(attr)
        return store.gather(attr_index(attr, store.num_nodes))

    def _get_tensor_size(self, attr: TensorAttr) -> Tuple[int, int]:
        store = self._store(attr)
        return (store.num_nodes, store.width)

    def get_all_tensor_attrs(self) -> List[TensorAttr]:
        return [TensorAttr(group_name=t, attr_name=self.attr_name)
                for t in self.stores]

    def __repr__(self) -> str:
        return self.describe()
