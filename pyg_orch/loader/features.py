"""The GPU feature store a hybrid loader builds for itself
(:obj:`CacheOptions(store='auto')`)."""
from typing import Callable, Dict, Optional, Union

import torch
from torch_geometric.data import Data, HeteroData

from pyg_orch.features.tiered import TieredFeatureStore
from pyg_orch.features.hetero_tiered import HeteroTieredFeatureStore
from pyg_orch.loader.options import CacheOptions
from pyg_orch.loader.stats import StageTimer
from pyg_orch.sampling.contract import HotNodeSampler

AnyStore = Union[TieredFeatureStore, HeteroTieredFeatureStore]
#: Access counts from pre-sampled batches: an int64 tensor per node, or a
#: dictionary of them per node type (see
#: :func:`pyg_orch.sampling.presample.count_node_access`).
Counts = Union[torch.Tensor, Dict[str, torch.Tensor]]


def build_feature_store(
    cache: CacheOptions,
    data,
    sampler,
    device: torch.device,
    count_access: Callable[[], Counts],
    timer: StageTimer,
    hetero: bool = False,
) -> Optional[AnyStore]:
    r""":obj:`cache.store` if one was given (checked against :obj:`data`);
    for :obj:`'auto'`, where it pays (CUDA, features in host memory, a
    :class:`~pyg_orch.sampling.HotNodeSampler`), a new
    :class:`~pyg_orch.gpu.TieredFeatureStore` (sharded over the machine's
    GPUs with a sharded topology) or, with :obj:`hetero`, a
    :class:`~pyg_orch.gpu.HeteroTieredFeatureStore`, rows ranked by
    :obj:`cache.ranking` (:obj:`count_access()` for :obj:`'frequency'`);
    else :obj:`None`."""
    # `cache` was checked on every device, though only CUDA builds a store:
    feature_store, budget, ratio, policy = (
        cache.store, cache.gpu_memory_budget, cache.cache_ratio,
        cache.ranking)
    if isinstance(feature_store, (TieredFeatureStore,
                                  HeteroTieredFeatureStore)):
        check_given_store(feature_store, data, hetero)
        return feature_store
    if feature_store is None:
        return None
    if isinstance(data, HeteroData):
        if not hetero or device.type != 'cuda':
            return None
        return build_hetero_store(data, sampler, device, count_access,
                                  timer, budget, ratio, policy)
    x = getattr(data, 'x', None) if isinstance(data, Data) else None
    if (device.type != 'cuda' or not isinstance(x, torch.Tensor) or x.is_cuda
            or x.dim() != 2 or not isinstance(sampler, HotNodeSampler)):
        return None
    if policy == 'degree':
        # Rows are fetched when their node is sampled as someone's
        # in-neighbor: that follows the out-degree.
        topo = sampler.topology.csc[None]
        hotness = torch.bincount(topo.row.to(torch.int64),
                                 minlength=topo.num_src_nodes).cpu()
    else:
        with timer.stage('presample'):
            hotness = count_access()
    if sampler.topology.is_sharded:
        # The machine's GPUs share one cache; host rows live once per
        # machine (a collective: every rank builds its loader in turn).
        from pyg_orch.parallel.peer_memory import PeerGroup
        from pyg_orch.features.sharded import ShardedFeatureStore
        return ShardedFeatureStore(x, PeerGroup(device=device),
                                   hotness=hotness, gpu_memory_budget=budget,
                                   cache_ratio=ratio)
    return TieredFeatureStore(x, device, hotness=hotness,
                              gpu_memory_budget=budget, cache_ratio=ratio)


def check_given_store(store: AnyStore, data, hetero: bool) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`'store'` where
    :obj:`store` cannot serve :obj:`data` (or the loader, :obj:`hetero`)."""
    if isinstance(store, HeteroTieredFeatureStore):
        if not isinstance(data, HeteroData):
            raise ValueError("'store' is a HeteroTieredFeatureStore, "
                             "but the graph is not a HeteroData")
        if not hetero:
            raise ValueError("'store': a HeteroTieredFeatureStore "
                             "serves the batches of HybridNeighborLoader "
                             "and HybridLinkNeighborLoader only")
        for t, tier in store.stores.items():
            if t not in data.node_types:
                raise ValueError(f"'store' holds node type '{t}', "
                                 f"which the graph lacks "
                                 f"({data.node_types})")
            x = getattr(data[t], store.attr_name, None)
            shape = (tier.num_nodes, tier.width)
            if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape:
                raise ValueError(
                    f"'store' holds {shape} rows for node type "
                    f"'{t}', but the graph's '{store.attr_name}' is "
                    f"{None if x is None else tuple(x.shape)}")
    elif isinstance(data, HeteroData):
        raise ValueError("'store' must be a HeteroTieredFeatureStore "
                         "for a HeteroData (got a TieredFeatureStore)")


def host_features(data: HeteroData) -> Dict[str, torch.Tensor]:
    r"""The node types whose :obj:`x` is a 2-dimensional tensor in host
    memory (what a :class:`~pyg_orch.gpu.HeteroTieredFeatureStore` serves)."""
    out = {}
    for t in data.node_types:
        x = data[t].get('x')
        if isinstance(x, torch.Tensor) and not x.is_cuda and x.dim() == 2:
            out[t] = x
    return out


def build_hetero_store(
    data: HeteroData,
    sampler,
    device: torch.device,
    count_access: Callable[[], Counts],
    timer: StageTimer,
    budget: Union[None, int, float, str],
    ratio: Optional[float],
    policy: str,
) -> Optional[HeteroTieredFeatureStore]:
    r"""The :class:`~pyg_orch.gpu.HeteroTieredFeatureStore` of
    :obj:`CacheOptions(store='auto')` over the node types of
    :func:`host_features`, ranked by :obj:`policy` (:obj:`count_access()`
    per node type, or out-degrees); :obj:`None` without such features or
    without a :class:`~pyg_orch.sampling.HotNodeSampler`."""
    x_dict = host_features(data)
    if not x_dict or not isinstance(sampler, HotNodeSampler):
        return None
    topo = sampler.topology
    if policy == 'degree':
        # Per type, the out-degree over every edge type it is a source of.
        hotness = {t: torch.zeros(x.size(0), dtype=torch.int64)
                   for t, x in x_dict.items()}
        for edge_type, csc in topo.csc.items():
            src = edge_type[0]
            if src in hotness:
                hotness[src] += torch.bincount(
                    csc.row.to(torch.int64),
                    minlength=csc.num_src_nodes).cpu()[:hotness[src].numel()]
    else:
        with timer.stage('presample'):
            counts = count_access()
        hotness = {t: counts[t] for t in x_dict}
    return HeteroTieredFeatureStore(x_dict, device, hotness=hotness,
                                    gpu_memory_budget=budget,
                                    cache_ratio=ratio)
